"""Per-attempt artifacts on disk: ``<run dir>/attempts/<task>/<n>/artifacts.json``.

Written once per attempt by the run driver (after redaction, see ``worktrial.model.artifacts``) and read back by
``show``, ``view``, JUnit and the markdown report. Reading is defensive: a missing, oversized or unreadable file
is treated as "no artifacts", never as an error that hides the rest of a run.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import ValidationError

from worktrial.isolation.patch import CHANGE_MAX_BYTES
from worktrial.model.artifacts import AttemptArtifacts
from worktrial.safe_read import read_input
from worktrial.util import atomic_write_text, replace_file

ATTEMPTS_DIR = "attempts"
ARTIFACTS_FILE = "artifacts.json"
CHANGE_FILE = "change.diff"
"""The agent's exact change (``git apply`` input), kept for ``regrade``; its digest is in the signed record."""
# Three bounded tails plus command tails fit well under this; anything bigger was not written by us.
MAX_ARTIFACTS_BYTES = 16 * 1024 * 1024


def task_dirname(task_id: str) -> str:
    """A file-system-safe directory name for a task id; a digest suffix keeps distinct ids apart."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._")[:80] or "task"
    if safe == task_id:
        return safe
    return f"{safe}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"


def attempt_dir(run_dir: Path, task_id: str, attempt: int) -> Path:
    return run_dir / ATTEMPTS_DIR / task_dirname(task_id) / str(attempt)


def write_artifacts(run_dir: Path, artifacts: AttemptArtifacts) -> Path:
    """Store one attempt's artifacts (a retried attempt overwrites the earlier try's)."""
    directory = attempt_dir(run_dir, artifacts.task_id, artifacts.attempt)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ARTIFACTS_FILE
    atomic_write_text(path, artifacts.model_dump_json(indent=1) + "\n")
    return path


def write_change(run_dir: Path, task_id: str, attempt: int, data: bytes) -> Path:
    """Store one attempt's exact change (a retried attempt overwrites the earlier try's)."""
    directory = attempt_dir(run_dir, task_id, attempt)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHANGE_FILE
    replace_file(path, data)
    return path


class ChangeUnavailable(Exception):
    """A stored change that cannot be used, with the reason as its message."""


def read_change(run_dir: Path, task_id: str, attempt: int, sha256: str) -> bytes:
    """The stored exact change of one attempt, only if it has the digest its signed record names."""
    path = attempt_dir(run_dir, task_id, attempt) / CHANGE_FILE
    try:
        data = read_input(path, CHANGE_MAX_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        raise ChangeUnavailable(f"its stored change ({path.name}) is gone") from None
    except (OSError, ValueError) as exc:
        raise ChangeUnavailable(f"its stored change cannot be read ({exc})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ChangeUnavailable("its stored change was altered after the run (its digest is not the signed one)")
    return data


def read_artifacts(run_dir: Path, task_id: str, attempt: int) -> AttemptArtifacts | None:
    """The stored artifacts of one attempt, or None when there are none (or they cannot be trusted)."""
    path = attempt_dir(run_dir, task_id, attempt) / ARTIFACTS_FILE
    try:
        loaded = AttemptArtifacts.model_validate_json(read_input(path, MAX_ARTIFACTS_BYTES, follow_symlinks=False))
    except (OSError, ValueError, ValidationError):  # none, a symlink, a FIFO, too large, not ours
        return None
    if loaded.task_id != task_id or loaded.attempt != attempt:
        return None
    return loaded


def read_run_artifacts(run_dir: Path, keys: list[tuple[str, int]]) -> dict[tuple[str, int], AttemptArtifacts]:
    """Artifacts of the given (task, attempt) pairs that have any."""
    found: dict[tuple[str, int], AttemptArtifacts] = {}
    for task_id, attempt in keys:
        artifacts = read_artifacts(run_dir, task_id, attempt)
        if artifacts is not None:
            found[(task_id, attempt)] = artifacts
    return found


def run_dir_of(source: str) -> Path | None:
    """The run-store directory an envelope came from (a stored run, or its envelope.json), else None."""
    path = Path(source)
    directory = path if path.is_dir() else path.parent
    return directory if (directory / "run.json").is_file() else None


def artifacts_for_envelope(source: str, keys: list[tuple[str, int]]) -> dict[tuple[str, int], AttemptArtifacts]:
    """Artifacts next to an envelope that lives in a run store; none for an envelope published elsewhere."""
    directory = run_dir_of(source)
    return read_run_artifacts(directory, keys) if directory is not None else {}
