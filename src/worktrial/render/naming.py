"""How a run is named to a reader: the user's label, the agent and the model, as ``worktrial runs`` names it.

A run id alone says nothing about what was measured, so pages and tables name runs by what they ran and show
the id only where two runs would otherwise read the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from worktrial.model.envelope import Envelope


def model_name(envelope: Envelope) -> str | None:
    """``provider/model``, the model alone, or None when the run does not say."""
    if envelope.provider:
        return f"{envelope.provider}/{envelope.model}"
    return envelope.model


def run_name(envelope: Envelope) -> str:
    """``label — agent / model``; the parts a run does not have are left out."""
    agent = str(envelope.agent.get("name") or "?")
    model = model_name(envelope)
    what = f"{agent} / {model}" if model else agent
    return f"{envelope.run.label} — {what}" if envelope.run.label else what


def run_names(envelopes: Sequence[Envelope]) -> list[str]:
    """One name per run that tells the runs apart: the run id is added to names that would repeat."""
    names = [run_name(e) for e in envelopes]
    repeated = Counter(names)
    return [f"{name} ({e.run.id})" if repeated[name] > 1 else name for name, e in zip(names, envelopes, strict=True)]
