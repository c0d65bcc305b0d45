"""Stored runs as the user sees them: listing and re-rendering."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from worktrial import __version__
from worktrial.envelope import Envelope, RunInfo, WorkspaceInfo, split_route
from worktrial.metrics import TaskInfo, build_report
from worktrial.records import AttemptRecord
from worktrial.store import RunMeta, RunStore, list_run_dirs
from worktrial.util import utc_now


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


def host_info() -> dict[str, object]:
    return {
        "os": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def envelope_from_records(meta: RunMeta, records: list[AttemptRecord], *, complete: bool | None = None) -> Envelope:
    """The envelope of a stored run from its metadata and attempt records (no suite file needed)."""
    provider, model = split_route(meta.model)
    total = meta.attempts * len(meta.tasks)
    info = RunInfo(
        id=meta.id,
        started_at=meta.started_at,
        finished_at=utc_now(),
        complete=(len(records) == total) if complete is None else complete and len(records) == total,
        workspace=WorkspaceInfo(path=meta.source_repo, base_commit=meta.base_commit, dirty=meta.dirty),
        attempts=meta.attempts,
        k=meta.k,
        jobs=meta.jobs,
        verify_always=meta.verify_always,
        host=host_info(),
    )
    tasks = [TaskInfo(t.id, t.name, t.category) for t in meta.tasks]
    return Envelope(
        harness_version=__version__,
        provider=provider,
        model=model,
        agent=meta.agent_description or {"name": meta.agent},
        suite_path=meta.suite_display_path,
        suite_sha256=meta.suite_sha256,
        run=info,
        report=build_report(meta.suite_id, meta.suite_name, tasks, records, meta.k),
    )
