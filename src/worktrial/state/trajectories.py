"""Trajectory files on disk: ``<run dir>/attempts/<task>/<n>/trajectory.json``, next to the attempt's artifacts.

Written once per attempt by the run driver (already redacted and bounded, ``engine/trajectory.py``); the record
holds its path and digest (``TrajectoryRef``), so ``audit`` and every reader can tell a file that changed since.
Reading is defensive, as for artifacts: a missing, oversized, changed or unreadable file is "no trajectory" with a
reason, never an error that hides the rest of a run.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import ValidationError

from worktrial.model.trajectory import MAX_TRAJECTORY_BYTES, Trajectory, TrajectoryRef
from worktrial.safe_read import read_input
from worktrial.state.artifacts import attempt_dir
from worktrial.util import atomic_write_text

TRAJECTORY_FILE = "trajectory.json"
MAX_TRAJECTORY_FILE_BYTES = 4 * MAX_TRAJECTORY_BYTES
"""Sealed files stay near ``MAX_TRAJECTORY_BYTES`` (JSON escaping adds some); anything bigger was not written by us."""


def write_trajectory(run_dir: Path, state_root: Path, task_id: str, attempt: int, text: str) -> TrajectoryRef:
    """Store one attempt's sealed trajectory (a retried attempt's replaces the earlier try's); its reference."""
    directory = attempt_dir(run_dir, task_id, attempt)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / TRAJECTORY_FILE
    data = text.encode("utf-8")
    atomic_write_text(path, text)
    try:
        shown = os.path.relpath(path, state_root)
    except ValueError:
        shown = str(path)
    steps = sum(1 for _ in Trajectory.model_validate_json(data).all_steps())
    return TrajectoryRef(path=shown, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), steps=steps)


def read_trajectory_file(
    run_dir: Path, task_id: str, attempt: int, ref: TrajectoryRef | None
) -> tuple[bytes | None, str]:
    """The stored trajectory file's bytes, exactly those its record's digest covers, or None and why not ("" when
    the run recorded none)."""
    if ref is None:
        return None, ""
    path = attempt_dir(run_dir, task_id, attempt) / TRAJECTORY_FILE
    try:
        data = read_input(path, MAX_TRAJECTORY_FILE_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return None, "its trajectory file is missing"
    except (OSError, ValueError):  # a symlink, a FIFO, too large
        return None, "its trajectory file cannot be read"
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        return None, "its trajectory file changed since the attempt recorded it (the digest differs)"
    return data, ""


def read_trajectory(
    run_dir: Path, task_id: str, attempt: int, ref: TrajectoryRef | None
) -> tuple[Trajectory | None, str]:
    """The stored trajectory of one attempt, or None and why not ("" when the run recorded none)."""
    data, why = read_trajectory_file(run_dir, task_id, attempt, ref)
    if data is None:
        return None, why
    try:
        return Trajectory.model_validate_json(data), ""
    except (ValueError, ValidationError):
        return None, "its trajectory file is not a valid trajectory"
