"""A run made from another run's attempts, as the session stores it: the session's ``Reusing`` over a ``ReusePlan``.

Carried records (reused, or regraded without verification) are written when the run's store is created; a regraded
attempt's record is made when its replay's result arrives, from the source record (what the agent did: its claim,
time, tokens, cost) and the replay's verification (what this suite's verifier says). Each keeps its files: the
trace, the artifacts (a regrade's verify logs in place of the old ones), the stored change and the trajectory are
copied into the new run, so it stands on its own (and can be regraded again). A replay whose rebuilt tree is not
the one the agent left (``StoredChange.result`` differs) is no verdict: a regrade leaves the attempt out, saying
why; ``eval --reuse`` runs the agent for it instead.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from worktrial.engine.executor import AttemptJob, AttemptResult
from worktrial.engine.reuse import ReusePlan
from worktrial.jsonlimits import MAX_TRACE_BYTES
from worktrial.model.envelope import ReuseInfo, SandboxInfo, same_containment
from worktrial.model.records import AttemptRecord, StoredChange, Usage
from worktrial.model.suite import LoadedSuite
from worktrial.model.trace import Trace, build_trace
from worktrial.safe_read import read_input
from worktrial.state.artifacts import (
    ChangeUnavailable,
    read_artifacts,
    read_change,
    write_artifacts,
    write_change,
)
from worktrial.state.store import RunMeta, RunStore
from worktrial.state.traces import write_trace
from worktrial.state.trajectories import read_trajectory_file, write_trajectory


def source_containments(plan: ReusePlan) -> list[SandboxInfo]:
    """The containments the carried and regraded attempts' agents ran under, for the new run's list."""
    meta = plan.source.meta
    used = {r.sandbox for r in [*plan.carried, *plan.replays.values()]}
    found = [meta.sandboxes[i] for i in sorted(i for i in used if i is not None and 0 <= i < len(meta.sandboxes))]
    if None in used and meta.sandbox is not None:
        found.append(meta.sandbox)
    return found


class Carrier:
    """The session's ``Reusing`` for a run made from ``plan.source``'s attempts."""

    def __init__(
        self,
        plan: ReusePlan,
        loaded: LoadedSuite,
        store: RunStore,
        meta: RunMeta,
        state_root: Path,
        trace_dir: Path,
        warn: Callable[[str], None],
    ) -> None:
        self.plan, self.store, self.meta, self.state_root, self.trace_dir = plan, store, meta, state_root, trace_dir
        self.tasks = {t.id: t for t in loaded.suite.tasks}
        self.warn = warn
        self.replays = bool(plan.replays)

    # -- Reusing --------------------------------------------------------------------------------------------------

    def job(self, job: AttemptJob) -> AttemptJob:
        return self.plan.job(job)

    def skipped(self) -> set[tuple[str, int]]:
        return self.plan.skipped

    def info(self) -> ReuseInfo:
        return self.plan.info()

    def regraded(self, job: AttemptJob, result: AttemptResult) -> AttemptRecord | None:
        source = self.plan.replays[job.key]
        why = result.unreplayed or _inexact(source, result.record)
        if why is not None:
            self.plan.left_out[job.key] = why
            return None
        record = _merged(source, result.record).model_copy(
            update={"provenance": self.plan.provenance(source, "regraded", reverified=True)}
        )
        return self._stored(record, source, result)

    def rerun(self, job: AttemptJob) -> AttemptJob | None:
        if self.plan.mode == "regrade":
            return None
        self.plan.left_out[job.key] = f"ran again: {self.plan.left_out.get(job.key, 'it could not be regraded')}"
        return dataclasses.replace(job, task=self.tasks[job.task.id], replay=None)

    # -- carrying records over ------------------------------------------------------------------------------------

    def carry(self) -> list[AttemptRecord]:
        """Store every carried record, with its files; the records as stored."""
        out = []
        for record in self.plan.carried:
            stored = self._stored(record, self.plan.source.records[(record.task_id, record.attempt)], None)
            self.store.append(stored)
            out.append(stored)
        return out

    def _stored(self, record: AttemptRecord, source: AttemptRecord, result: AttemptResult | None) -> AttemptRecord:
        """``record`` with its files copied from the source run (a regrade's verify logs in its artifacts)."""
        src = self.plan.source.store.dir
        task_id, number = record.task_id, record.attempt
        update: dict[str, object] = {"sandbox": self._containment(source), "trace": self._trace(source, record)}
        artifacts = read_artifacts(src, task_id, source.attempt)
        if result is not None and result.artifacts is not None:
            verify = [c for c in result.artifacts.commands if c.phase == "verify"]
            if artifacts is None:
                artifacts = result.artifacts
            else:
                kept = [c for c in artifacts.commands if c.phase != "verify"]
                artifacts = artifacts.model_copy(update={"commands": [*kept, *verify]})
        try:
            if artifacts is not None:
                write_artifacts(self.store.dir, artifacts.model_copy(update={"attempt": number}))
            change = source.change
            if change is not None and change.sha256 is not None:
                try:
                    data = read_change(src, task_id, source.attempt, change.sha256)
                    write_change(self.store.dir, task_id, number, data)
                except ChangeUnavailable as exc:
                    update["change"] = StoredChange(result=change.result, missing=str(exc))
            if source.trajectory is not None:
                text, why = read_trajectory_file(src, task_id, source.attempt, source.trajectory)
                update["trajectory"] = (
                    write_trajectory(self.store.dir, self.state_root, task_id, number, text.decode("utf-8"))
                    if text is not None
                    else None
                )
                if text is None:
                    self.warn(f"the trajectory of {task_id} #{source.attempt} is not carried over: {why}")
        except OSError as exc:  # a full disk costs the files, never the record
            self.warn(f"could not copy the files of {task_id} #{source.attempt}: {exc.strerror or exc}")
        return record.model_copy(update=update)

    def _containment(self, source: AttemptRecord) -> int | None:
        """Where the source's agent ran, as an index into this run's containments."""
        meta = self.plan.source.meta
        index = source.sandbox
        info = meta.sandboxes[index] if index is not None and 0 <= index < len(meta.sandboxes) else meta.sandbox
        if info is None:
            return None
        return next((i for i, known in enumerate(self.meta.sandboxes) if same_containment(known, info)), None)

    def _trace(self, source: AttemptRecord, record: AttemptRecord) -> str | None:
        """The record's trace file: the source's figures, with this record's verdict and times."""
        trace = _source_trace(Path(self.plan.source.meta.workspace), source)
        update = {
            "attempt": record.attempt,
            "outcome": record.outcome,
            "duration_secs": record.duration_secs,
            "verify_secs": record.verify_secs,
        }
        trace = trace.model_copy(update=update) if trace is not None else _bare_trace(record)
        try:
            path = write_trace(trace, self.trace_dir)
        except OSError as exc:
            self.warn(f"could not write the trace of {record.task_id} #{record.attempt}: {exc.strerror or exc}")
            return None
        try:
            return os.path.relpath(path, self.state_root)
        except ValueError:
            return str(path)


def _inexact(source: AttemptRecord, replayed: AttemptRecord) -> str | None:
    """Why the rebuilt tree is not the one the agent left, or None."""
    before = source.change.result if source.change is not None else None
    now = replayed.change.result if replayed.change is not None else None
    if before is None or now is None:
        return "what its rebuilt tree holds could not be compared with what the agent left"
    if before != now:
        return "its stored change did not rebuild the tree the agent left (the task's base differs now)"
    return None


def _merged(source: AttemptRecord, replayed: AttemptRecord) -> AttemptRecord:
    """What the agent did (the source record) judged by this suite's verifier (the replay's): a claimed success takes
    the new verdict; any other outcome, which verification never decided, keeps its own and records the new
    ``verified``."""
    decided = source.claimed is True and source.outcome in ("pass", "fail")
    verdict = (
        {"outcome": replayed.outcome, "reason": replayed.reason, "error_category": replayed.error_category}
        if decided
        else {}
    )
    duration = round(max(0.0, source.duration_secs - source.verify_secs) + replayed.verify_secs, 3)
    return source.model_copy(
        update={
            **verdict,
            "verified": replayed.verified,
            "verify_secs": replayed.verify_secs,
            "duration_secs": duration,
            "reward": replayed.reward,
            "rewards": replayed.rewards,
            "worktree": replayed.worktree,
            "retries": 0,
            "retry_reasons": [],
        }
    )


def _source_trace(root: Path, source: AttemptRecord) -> Trace | None:
    if source.trace is None:
        return None
    path = Path(source.trace)
    try:
        data = read_input(path if path.is_absolute() else root / path, MAX_TRACE_BYTES, follow_symlinks=False)
        trace = Trace.model_validate_json(data)
    except (OSError, ValueError):
        return None
    return trace if (trace.task_id, trace.attempt) == (source.task_id, source.attempt) else None


def _bare_trace(record: AttemptRecord) -> Trace:
    usage = Usage(tokens=record.tokens, cost_usd=record.cost_usd, turns=record.turns)
    return build_trace(
        task_id=record.task_id, attempt=record.attempt, outcome=record.outcome, duration_secs=record.duration_secs,
        agent_secs=record.agent_secs, verify_secs=record.verify_secs, usage=usage, setup_secs=record.setup_secs,
    )  # fmt: skip
