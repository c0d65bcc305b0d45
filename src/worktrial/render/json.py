"""The JSON envelope as text."""

from __future__ import annotations

from worktrial.model.envelope import Envelope
from worktrial.safe_text import for_json


def render_json(envelope: Envelope) -> str:
    """The envelope as printed or written by ``--format json``: the stored JSON, terminal-safe (``for_json``)."""
    return for_json(envelope.to_json())
