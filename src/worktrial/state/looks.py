"""Which stored runs ``compare`` has looked at, so a run that grew since is flagged (optional stopping).

Comparing two runs, then resuming or extending one and comparing again until p < 0.05, is optional stopping: in
simulation, re-checking after every ``resume`` calls a null difference significant 10-13% of the time, not 5%.
``compare`` notes how many attempts each stored run had the first time it was compared
(``<root>/.worktrial/looked.json``, next to ``runs/``); whenever a run is compared again with more attempts than
that, one line says so. ``grown_since_compared`` is the same check in one call, for ``resume`` or any other command.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError

from worktrial.isolation.safefs import read_regular
from worktrial.state.store import RUN_FILE, runs_dir
from worktrial.util import replace_file, utc_now

LOOKS_FILE = "looked.json"
_MAX_BYTES = 8 * 1024 * 1024
log = logging.getLogger(__name__)


class Look(BaseModel):
    """A run as ``compare`` first saw it, and how often it has been compared."""

    attempts: int
    at: str
    looks: int = 1


def looks_path(state_root: Path) -> Path:
    return runs_dir(state_root).parent / LOOKS_FILE


def load_looks(state_root: Path) -> dict[str, Look]:
    """The recorded looks; an unreadable or malformed file counts as none (it only ever adds a warning)."""
    path = looks_path(state_root)
    try:
        raw = json.loads(read_regular(path, _MAX_BYTES))
        return {str(run): Look.model_validate(look) for run, look in dict(raw).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, ValidationError) as exc:
        log.info("ignoring %s: %s", path, exc)
        return {}


def grown_since_compared(state_root: Path, run_id: str, attempts: int) -> str | None:
    """One line when stored run ``run_id`` has more attempts than when it was first compared, else None.

    The one call another command (``resume``) needs to say the same thing ``compare`` says.
    """
    return grown_since_looked(run_id, attempts, load_looks(state_root).get(run_id))


def grown_since_looked(run_id: str, attempts: int, look: Look | None) -> str | None:
    """One line when ``run_id`` now has more attempts than when it was first compared, else None."""
    if look is None or attempts <= look.attempts:
        return None
    return (
        f"run {run_id} had {look.attempts} attempts when it was first compared ({look.at}) and has {attempts} now: "
        "testing again after adding attempts inflates false positives (optional stopping); fix the size in "
        "advance (`worktrial power`) and read this p-value as exploratory"
    )


def note_comparison(runs: Sequence[tuple[str, int, Path]]) -> list[str]:
    """Warnings for the stored runs among ``(run id, attempts, where it was loaded from)`` that grew since first
    compared; the others are recorded as looked at.

    A run counts as stored when it was loaded from its directory in a run store (``<root>/.worktrial/runs/<id>``);
    envelope files from elsewhere are neither checked nor noted, and no git call is needed to tell.
    """
    by_root: dict[Path, dict[str, int]] = {}
    for run_id, attempts, source in runs:
        root = _store_root(run_id, source)
        if root is not None:
            by_root.setdefault(root, {})[run_id] = attempts
    warnings: list[str] = []
    for root, stored in by_root.items():
        looks = load_looks(root)
        warnings += [w for run_id, n in stored.items() if (w := grown_since_looked(run_id, n, looks.get(run_id)))]
        for run_id, n in stored.items():
            look = looks.get(run_id)
            if look is None:
                looks[run_id] = Look(attempts=n, at=utc_now())
            else:
                look.looks += 1
        try:
            replace_file(looks_path(root), json.dumps({r: v.model_dump() for r, v in looks.items()}, indent=1))
        except OSError as exc:  # a read-only store still compares; it only cannot remember this look
            log.info("cannot record the comparison in %s: %s", looks_path(root), exc)
    return warnings


def _store_root(run_id: str, source: Path) -> Path | None:
    """The state root whose run store ``source`` (an envelope.json or a run directory) belongs to, if any."""
    directory = source if source.is_dir() else source.parent
    if directory.name != run_id or not (directory / RUN_FILE).is_file():
        return None
    root = directory.parent.parent.parent
    return root if runs_dir(root) == directory.parent else None
