"""The JSON envelope as text."""

from __future__ import annotations

import json

from worktrial.envelope import Envelope


def render_json(envelope: Envelope) -> str:
    return json.dumps(envelope.model_dump(mode="json"), indent=2) + "\n"
