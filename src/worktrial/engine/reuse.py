"""Runs made from another run's attempts: what each stored attempt is worth against a suite as it is now.

``worktrial regrade RUN`` judges every stored attempt again against the suite's verify commands, running no agent;
``worktrial eval --reuse RUN`` carries over the records of attempts whose task definition is unchanged, regrades
those whose verifier alone changed and runs the rest. Both plan here, per (task, attempt) of the source run:

- the task's definition, part by part (``model/task_digest.py``), is compared with what the source stored (or, for a
  run stored before digests, what its suite file gives, where that file is still the one it measured);
- an attempt whose verdict depended on verification is regraded from its stored change (``AttemptJob.replay``): it
  is rebuilt in a fresh checkout of its base and verified there as any attempt is. That needs the change kept byte
  for byte (``AttemptRecord.change``) and a verifier that saw only the agent's files: one that ran in the worktree
  as the agent left it (``verify_in: worktree``) or in the agent's own container (a ``shared`` or ``separate``
  verifier room) judged more than a change holds, and is not regradable;
- an attempt whose verdict never reached verification (a timeout, an error, a claimed failure) keeps it.

The new run's records say where each verdict came from (``Provenance``), and are signed like any run's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from worktrial.engine.executor import AttemptJob, Replay, TaskBase
from worktrial.engine.session import resolve_workspace, task_bases
from worktrial.errors import BadInputError, SuiteError
from worktrial.isolation.workspace import tree_digest
from worktrial.model.envelope import NotRegraded, ReuseInfo
from worktrial.model.records import AttemptRecord, Provenance
from worktrial.model.run_config import RunConfig, flag_of
from worktrial.model.suite import LoadedSuite, Task, load_suite
from worktrial.model.task_digest import changed_parts, classify, files_reach_agent, task_parts
from worktrial.state.artifacts import CHANGE_FILE, attempt_dir
from worktrial.state.store import RunMeta, RunStore

Mode = Literal["reuse", "regrade"]

MAY_DIFFER = frozenset({"attempts", "k", "label", "tasks", "categories", "limit", "reuse"})
"""Config fields a run may change from the run it reuses: how many attempts and which tasks, not how each ran."""


@dataclass(frozen=True)
class SourceRun:
    """The run whose attempts are used: its signed meta and records, and its tasks' definitions part by part."""

    store: RunStore
    meta: RunMeta
    records: Mapping[tuple[str, int], AttemptRecord]
    parts: Mapping[str, Mapping[str, str]] | None
    """Task id -> part -> digest; None when the run stored none and its suite file changed since."""

    @property
    def suite_digest(self) -> str:
        return self.meta.suite_bundle_sha256 or self.meta.suite_sha256


def open_source_run(state_root: Path, run_id: str) -> SourceRun:
    """A stored run to regrade or reuse; its records are only those its harness signed."""
    store = RunStore.open(state_root, run_id)
    meta = store.meta()
    records = {(r.task_id, r.attempt): r for r in store.records()}
    return SourceRun(store, meta, records, _stored_parts(meta))


def _stored_parts(meta: RunMeta) -> Mapping[str, Mapping[str, str]] | None:
    """The source run's task definitions: as it stored them, else from its suite file where that is still the file
    it measured (a run stored before digests were kept)."""
    if meta.tasks and all(t.parts for t in meta.tasks):
        return {t.id: t.parts for t in meta.tasks}
    try:
        loaded = load_suite(meta.suite_path)
    except SuiteError:
        return None
    if loaded.sha256 != meta.suite_sha256 or loaded.digest != (meta.suite_bundle_sha256 or meta.suite_sha256):
        return None
    loaded = meta.config.timeout_multipliers.apply(loaded)
    ws = resolve_workspace(loaded, Path(meta.workspace), meta.base_commit)
    bases = {
        task_id: dataclasses.replace(base, commit=meta.task_base_commits.get(task_id, base.commit))
        for task_id, base in task_bases(loaded, ws).items()
    }
    return definition_parts(loaded, bases, meta.environment_images)


def definition_parts(
    loaded: LoadedSuite, bases: Mapping[str, TaskBase], images: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """Each task's definition, part by part, with the tree its attempts start from and its image."""
    trees: dict[tuple[str, str, tuple[str, ...]], str] = {}
    parts: dict[str, dict[str, str]] = {}
    for task in loaded.suite.tasks:
        base = bases.get(task.id)
        tree = ""
        if base is not None and base.source.kind == "path":
            key = (base.source.location, base.commit, base.hide)
            if key not in trees:
                trees[key] = tree_digest(Path(base.source.location), base.commit, base.hide)
            tree = trees[key]
        parts[task.id] = task_parts(loaded.suite, task, loaded.files, tree, images.get(task.id))
    return parts


def config_differences(source: RunConfig, given: RunConfig) -> list[str]:
    """Why a run with config ``given`` cannot reuse attempts measured under ``source`` (empty when it can)."""
    fields = set(RunConfig.model_fields) - MAY_DIFFER
    return source.differences(given, fields)


def refuse_config(run_id: str, source: RunConfig, given: RunConfig) -> None:
    if differences := config_differences(source, given):
        may = ", ".join(sorted(flag_of(RunConfig, f).split(" ")[0] for f in MAY_DIFFER))
        raise BadInputError(
            f"cannot reuse run {run_id}; it measured something else: {'; '.join(differences)} (a reused attempt "
            f"must have run as this run's would; only {may} may differ)"
        )


@dataclass
class ReusePlan:
    """What becomes of each (task, attempt) of a new run made from a source run."""

    mode: Mode
    source: SourceRun
    carried: list[AttemptRecord] = field(default_factory=list)
    """Records taken over as they are (with their provenance): reused, or regraded without verification."""
    replays: dict[tuple[str, int], AttemptRecord] = field(default_factory=dict)
    """Attempts to regrade from their stored change -> the source record."""
    left_out: dict[tuple[str, int], str] = field(default_factory=dict)
    """regrade: attempts not in the new run, with why; reuse: attempts that could not be regraded and run again."""

    def info(self) -> ReuseInfo:
        skipped = [NotRegraded(task_id=t, attempt=n, reason=why) for (t, n), why in self.left_out.items()]
        return ReuseInfo(
            mode=self.mode, source=self.source.meta.id, source_suite_digest=self.source.suite_digest,
            not_regraded=skipped,
        )  # fmt: skip

    @property
    def skipped(self) -> set[tuple[str, int]]:
        """Attempts the new run never runs: a regrade runs no agent, so what it cannot regrade stays out."""
        return set(self.left_out) if self.mode == "regrade" else set()

    def job(self, job: AttemptJob) -> AttemptJob:
        """The job as planned: a regraded attempt replays its stored change (its setup commands' effects are in it)."""
        record = self.replays.get(job.key)
        if record is None or record.change is None or record.change.sha256 is None:
            return job
        change = attempt_dir(self.source.store.dir, record.task_id, record.attempt) / CHANGE_FILE
        replay = Replay(str(change), record.change.sha256, record.claimed, record.outcome == "timeout")
        task = job.task.model_copy(update={"setup_commands": []})
        return dataclasses.replace(job, task=task, replay=replay)

    def provenance(self, record: AttemptRecord, kind: Literal["reused", "regraded"], reverified: bool) -> Provenance:
        change = record.change.sha256 if reverified and record.change is not None else None
        return Provenance(
            kind=kind, run=self.source.meta.id, attempt=record.attempt, suite_digest=self.source.suite_digest,
            reverified=reverified, change_sha256=change,
        )  # fmt: skip


def plan(
    mode: Mode,
    source: SourceRun,
    loaded: LoadedSuite,
    parts: Mapping[str, Mapping[str, str]],
    config: RunConfig,
) -> ReusePlan:
    """Decide, for every (task, attempt) of the new run that the source ran, whether it is reused, regraded, left
    out (regrade) or run again (reuse)."""
    out = ReusePlan(mode, source)
    tasks = {t.id: t for t in loaded.suite.tasks}
    if mode == "regrade":
        for task_id, number in sorted(source.records):
            if task_id not in tasks:
                out.left_out[(task_id, number)] = f"task {task_id} is not in the suite any more"
    for task in loaded.suite.tasks:
        for number in range(1, config.attempts + 1):
            if (found := source.records.get((task.id, number))) is not None:
                _decide(out, mode, task, found, parts.get(task.id, {}), loaded, config)
    return out


def _decide(
    out: ReusePlan,
    mode: Mode,
    task: Task,
    record: AttemptRecord,
    now: Mapping[str, str],
    loaded: LoadedSuite,
    config: RunConfig,
) -> None:
    key = (task.id, record.attempt)
    before = out.source.parts.get(task.id) if out.source.parts is not None else None
    if before is None:
        if mode == "regrade":
            out.left_out[key] = (
                f"run {out.source.meta.id} kept no digest of the task's definition and its suite file changed "
                "since, so what its attempts answered is unknown"
            )
        return
    fate = classify(before, now, agent=config.agent, files_to_agent=files_reach_agent(loaded.suite, task, config.agent))
    if fate == "agent":
        if mode == "regrade":
            changed = ", ".join(changed_parts(before, now))
            out.left_out[key] = f"the task changed where its agent's run depended on it ({changed}): run it again"
        return
    if fate == "same" and mode == "reuse":
        out.carried.append(_carried(record, out.provenance(record, "reused", reverified=False)))
        return
    if not needs_verification(record, task, config.verify_always):
        out.carried.append(_carried(record, out.provenance(record, "regraded", reverified=False)))
        return
    why = not_regradable(record, task)
    if why is None:
        out.replays[key] = record
    else:
        out.left_out[key] = why


def _carried(record: AttemptRecord, provenance: Provenance) -> AttemptRecord:
    return record.model_copy(update={"provenance": provenance, "trace": None, "retries": 0, "retry_reasons": []})


def needs_verification(record: AttemptRecord, task: Task, verify_always: bool) -> bool:
    """Whether verification decided (or, diagnosing, recorded) the attempt's verdict: a claimed success, a claimed
    failure or timeout under ``--verify-always``, a timeout the task verifies (``on_timeout: verify``)."""
    if record.claimed is True and record.outcome in ("pass", "fail"):
        return True
    if record.outcome == "timeout" and task.on_timeout == "verify":
        return True
    return verify_always and record.outcome in ("fail", "timeout")


def not_regradable(record: AttemptRecord, task: Task) -> str | None:
    """Why an attempt's stored change cannot be judged again faithfully, or None."""
    change = record.change
    if change is None:
        return "its run kept no change for it (--no-artifacts, or recorded before worktrial kept changes)"
    if change.sha256 is None:
        return f"its change was not kept: {change.missing or 'unknown'}"
    if task.verify_in == "worktree":
        return (
            "its task verifies in the worktree as the agent left it (verify_in: worktree), git metadata and ignored "
            "files included, which a stored change does not hold"
        )
    room = getattr(record, "verifier_room", None)  # where a container task's verifier ran (the container checkout)
    if room == "shared":
        return (
            "its verifier ran in the agent's own container (verifier mode shared): the verdict depended on what the "
            "agent left running and installed there, which no stored change holds"
        )
    if room == "separate":
        return (
            "its verifier ran on the worktree as the agent left it (verifier mode separate), ignored files "
            "included, which a stored change does not hold"
        )
    return None
