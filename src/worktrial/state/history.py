"""Stored runs as the user sees them: listing, loading envelopes and rebuilding them from attempt records."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.errors import BadInputError
from worktrial.jsonlimits import MAX_ENVELOPE_BYTES
from worktrial.model.envelope import (
    BudgetInfo,
    Envelope,
    ReuseInfo,
    RunInfo,
    SandboxInfo,
    WorkspaceInfo,
    parse_envelope_json,
    split_route,
)
from worktrial.model.records import AttemptRecord
from worktrial.safe_read import InputFileError, read_input
from worktrial.state import signing
from worktrial.state.store import (
    ENVELOPE_FILE,
    RUN_FILE,
    RUN_ID_EXAMPLE,
    RunMeta,
    RunStore,
    is_run_id,
    list_run_dirs,
    runs_dir,
)
from worktrial.util import utc_now
from worktrial.version import __version__

if TYPE_CHECKING:
    from worktrial.analysis.compare import LoadedEnvelope

Problem = Literal["key missing", "changed", "unreadable"]

_MEANING: dict[Problem, str] = {
    "key missing": "their signing keys are not in {keys} (stored by another user or under another HOME); `report`, "
    "`view` and `compare` show what their envelopes say, unverified",
    "changed": "their run.json does not match its signature (changed outside worktrial); `resume` refuses them and "
    "their numbers come only from an envelope whose signature still holds",
    "unreadable": "their run.json cannot be read",
}


def problem_note(problem: Problem, count: int) -> str:
    """One line under a listing saying what a problem of ``count`` listed runs means."""
    return f"{problem}: {count} run(s) cannot be verified here: " + _MEANING[problem].format(keys=signing.key_dir())


@dataclass(frozen=True)
class RunRow:
    id: str
    suite: str
    agent: str
    started_at: str
    done: int | None
    total: int | None
    pass_at_1: float | None
    problem: Problem | None = None
    """Why the run cannot be verified here; None when its records are the harness's own (or predate signing)."""


def list_runs(state_root: Path) -> list[RunRow]:
    """Every stored run, oldest first; runs whose records cannot be verified here are listed with the reason."""
    rows = []
    for directory in list_run_dirs(state_root):
        store = RunStore(directory)
        try:
            meta = store.meta()
            records = store.records()
        except BadInputError:
            rows.append(_unverified_row(store))
            continue
        by_task: dict[str, list[bool]] = {}
        for record in records:
            by_task.setdefault(record.task_id, []).append(record.outcome == "pass")
        pass1 = sum(sum(v) / len(v) for v in by_task.values()) / len(by_task) if by_task else None
        rows.append(
            RunRow(
                id=meta.id,
                suite=meta.suite_display_path,
                agent=_agent(meta),
                started_at=meta.started_at,
                done=len(records),
                total=meta.config.attempts * len(meta.tasks),
                pass_at_1=pass1,
            )
        )
    return rows


def _agent(meta: RunMeta) -> str:
    config = meta.config
    return (
        (f"{config.label} — " if config.label else "") + config.agent + (f" / {config.model}" if config.model else "")
    )


def _unverified_row(store: RunStore) -> RunRow:
    """A run whose run.json does not verify here: what its files say, marked, never silently left out."""
    run_id = store.dir.name
    try:
        meta = store.unverified_meta()
    except BadInputError:
        return RunRow(run_id, "?", "?", "?", None, None, None, problem="unreadable")
    problem: Problem = "key missing" if signing.load_key(run_id) is None else "changed"
    envelope = store.envelope()  # unverified without a key; with one, None unless its signature holds
    done = pass1 = None
    if envelope is not None:
        done = envelope.report.overall.total_runs
        pass1 = envelope.report.overall.curves.pass_at.get("1")
    return RunRow(
        id=run_id,
        suite=meta.suite_display_path,
        agent=_agent(meta),
        started_at=meta.started_at,
        done=done,
        total=meta.config.attempts * len(meta.tasks),
        pass_at_1=pass1,
        problem=problem,
    )


def stored_envelope(state_root: Path, run_id: str) -> Envelope:
    """The stored envelope, or one rebuilt from the attempt records when the run never finished."""
    store = RunStore.open(state_root, run_id)
    envelope = store.envelope()
    if envelope is not None:
        return envelope
    meta = store.meta()
    return envelope_from_records(meta, store.records())


def store_problems(envelope_path: Path, envelope: Envelope) -> tuple[list[str], list[str]]:
    """Mismatches and notes between an envelope in a run directory and that run's signed records.

    An envelope that is not in a run directory (a published copy) has nothing to compare with: no findings.
    """
    directory = envelope_path.resolve().parent
    if not (directory / RUN_FILE).is_file():
        return [], []
    store = RunStore(directory)
    try:
        stored = store.load_records()
    except BadInputError as exc:
        return [f"run store: {exc}"], []
    notes = [f"run store: {w}"] if (w := stored.warning()) else []
    by_key = {(r.task_id, r.attempt): r for r in stored.records}
    published = {(a.task_id, a.attempt): a for t in envelope.report.tasks for a in t.attempts}
    problems = []
    for key, record in published.items():
        where = f"report.tasks[{key[0]}].attempts[{key[1]}]"
        mine = by_key.get(key)
        if mine is None:
            problems.append(f"{where}: not in the run store's records ({directory.name})")
        elif (mine.outcome, mine.claimed, mine.verified) != (record.outcome, record.claimed, record.verified):
            problems.append(
                f"{where}: outcome {record.outcome} in the envelope, {mine.outcome} in the run store's record"
            )
        elif mine.provenance != record.provenance:
            problems.append(f"{where}: its provenance differs from the run store's record")
    missing = sorted(set(by_key) - set(published))
    if missing:
        shown = ", ".join(f"{t}#{n}" for t, n in missing[:8])
        problems.append(f"{len(missing)} stored attempt(s) missing from the envelope: {shown}")
    return problems, notes


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
    config = meta.config
    provider, model = split_route(config.model)
    source: Literal["route", "agent"] | None = "route" if config.model else None
    reported = {r.model for r in records if r.model}
    if not config.model and len(reported) == 1:
        # Without --model the CLI chose from its own settings; its init/metadata events name the model.
        provider, model = split_route(reported.pop())
        source = "agent"
    total = config.attempts * len(meta.tasks)
    sandboxes = meta.sandboxes or ([meta.sandbox] if meta.sandbox is not None else [])
    info = RunInfo(
        id=meta.id,
        started_at=meta.started_at,
        finished_at=utc_now(),
        complete=(len(records) == total) if complete is None else complete and len(records) == total,
        workspace=WorkspaceInfo(path=meta.source_repo, base_commit=meta.base_commit, dirty=meta.dirty),
        attempts=config.attempts,
        k=config.k,
        jobs=meta.jobs,
        verify_always=config.verify_always,
        host=host_info(),
        sandbox=_weakest_used(sandboxes, records),
        sandboxes=sandboxes if len(sandboxes) > 1 else None,
        trace_root=meta.workspace,
        budget=_budget(meta, records),
        concurrency=meta.concurrency,
        grace_secs=None if meta.lifted else config.grace_secs,
        label=config.label,
        selection=meta.selection,
        task_base_commits=dict(meta.task_base_commits),
        reuse=reuse_counts(meta.reuse, records),
        dirty_excluded=list(meta.dirty_excluded),
    )
    tasks = [TaskInfo(t.id, t.name, t.category, t.cluster) for t in meta.tasks]
    return Envelope(
        harness_version=__version__,
        provider=provider,
        model=model,
        model_source=source,
        agent=meta.agent_description or {"name": config.agent},
        suite_path=meta.suite_display_path,
        suite_sha256=meta.suite_sha256,
        suite_bundle_sha256=meta.suite_bundle_sha256 or meta.suite_sha256,
        suite_files=list(meta.suite_files),
        environment_images=dict(meta.environment_images) or None,
        run=info,
        report=build_report(meta.suite_id, meta.suite_name, tasks, records, config.k),
    )


def reuse_counts(reuse: ReuseInfo | None, records: list[AttemptRecord]) -> ReuseInfo | None:
    """``run.reuse`` with the counts of the records it covers: reused, regraded, and run by an agent here."""
    if reuse is None:
        return None
    kinds = [r.provenance.kind if r.provenance is not None else "ran" for r in records]
    counts = {kind: kinds.count(kind) for kind in ("reused", "regraded", "ran")}
    return reuse.model_copy(update=counts)


def _budget(meta: RunMeta, records: list[AttemptRecord]) -> BudgetInfo | None:
    """``run.budget``: the stored limits, with the spend of the records the envelope covers."""
    if meta.budget is None:
        return None
    costs = [r.cost_usd for r in records if r.provenance is None]  # what this run's agents spent
    return meta.budget.model_copy(
        update={
            "spent": round(sum(c for c in costs if c is not None), 6),
            "unpriced_attempts": sum(1 for c in costs if c is None),
        }
    )


def _weakest_used(sandboxes: list[SandboxInfo], records: list[AttemptRecord]) -> SandboxInfo | None:
    """``run.sandbox``: the containment of the run's attempts, the weakest one when a resumed run's differ."""
    used = [sandboxes[r.sandbox] for r in records if r.sandbox is not None and 0 <= r.sandbox < len(sandboxes)]
    return min(used or sandboxes[:1], key=SandboxInfo.weakness, default=None)


def resolve_envelope(ref: str, workspace: Callable[[], Path]) -> LoadedEnvelope:
    """A file path if one exists, else a stored run id: ``<workspace>/.worktrial/runs/<id>/envelope.json``.

    A stored run that never wrote its envelope (it crashed) is rebuilt from its attempt records.
    ``workspace`` is only called for run ids, so comparing files works outside any repository.
    """
    from worktrial.analysis.compare import LoadedEnvelope  # here: a run, which only stores envelopes, needs no compare

    path = Path(ref)
    stored_id: str | None = None
    if not path.exists() or path.is_dir():  # a FIFO or a device is a file given, refused when read below
        if "/" in ref or ref.endswith(".json"):
            raise BadInputError(f"{ref}: envelope file not found")
        if not is_run_id(ref):
            raise BadInputError(
                f"{ref}: not an envelope file, and no stored run with that id (run ids look like "
                f"{RUN_ID_EXAMPLE}; `worktrial runs` lists stored runs)"
            )
        root = workspace()
        path = runs_dir(root) / ref / ENVELOPE_FILE
        stored_id = ref
        if not path.is_file():
            if (path.parent / RUN_FILE).is_file():
                return LoadedEnvelope(label=ref, source=str(path.parent), envelope=stored_envelope(root, ref))
            raise BadInputError(
                f"{ref}: not an envelope file, and no stored run with that id ({path} is missing; "
                "`worktrial runs` lists stored runs)"
            )
    try:
        # A file the user names may be a symlink to an envelope; the run store's own is read without following.
        data = read_input(path, MAX_ENVELOPE_BYTES, follow_symlinks=stored_id is None)
        raw = parse_envelope_json(data.decode("utf-8"))
    except InputFileError as exc:
        raise BadInputError(f"{path}: {exc.problem}; an envelope is a JSON file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadInputError(f"{path}: not a readable JSON envelope ({exc})") from None
    try:
        envelope = Envelope.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{path}: not a worktrial envelope ({where}: {first['msg']})") from None
    if stored_id is not None and envelope.run.id != stored_id:
        raise BadInputError(f"{path}: names run {envelope.run.id!r}, not the run directory's {stored_id}; refusing it")
    return LoadedEnvelope(label=ref, source=str(path), envelope=envelope)
