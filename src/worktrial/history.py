"""Stored runs as the user sees them: listing and re-rendering."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from worktrial.envelope import Envelope
from worktrial.run import envelope_from_records
from worktrial.store import RunStore, list_run_dirs


@dataclass(frozen=True)
class RunRow:
    id: str
    suite: str
    agent: str
    started_at: str
    done: int
    total: int
    pass_at_1: float | None


def list_runs(state_root: Path) -> list[RunRow]:
    rows = []
    for directory in list_run_dirs(state_root):
        store = RunStore(directory)
        try:
            meta = store.meta()
        except Exception:  # one unreadable run must not hide the others
            continue
        records = store.records()
        by_task: dict[str, list[bool]] = {}
        for record in records:
            by_task.setdefault(record.task_id, []).append(record.outcome == "pass")
        pass1 = sum(sum(v) / len(v) for v in by_task.values()) / len(by_task) if by_task else None
        rows.append(
            RunRow(
                id=meta.id,
                suite=meta.suite_display_path,
                agent=meta.agent + (f" / {meta.model}" if meta.model else ""),
                started_at=meta.started_at,
                done=len(records),
                total=meta.attempts * len(meta.tasks),
                pass_at_1=pass1,
            )
        )
    return rows


def stored_envelope(state_root: Path, run_id: str) -> Envelope:
    """The stored envelope, or one rebuilt from the attempt records when the run never finished."""
    store = RunStore.open(state_root, run_id)
    envelope = store.envelope()
    if envelope is not None:
        return envelope
    meta = store.meta()
    return envelope_from_records(meta, store.records())
