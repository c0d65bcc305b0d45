"""The JSON envelope as text."""

from __future__ import annotations

from worktrial.model.envelope import Envelope


def render_json(envelope: Envelope) -> str:
    return envelope.to_json()
