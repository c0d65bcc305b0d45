"""The JSON envelope as text."""

from __future__ import annotations

from worktrial.envelope import Envelope


def render_json(envelope: Envelope) -> str:
    """Serialised by pydantic directly: no intermediate dict per attempt, so memory stays small for big runs."""
    return envelope.model_dump_json(indent=2) + "\n"
