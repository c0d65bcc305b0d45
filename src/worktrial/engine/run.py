"""A whole run: resolve the workspace and agent, run every attempt (in parallel, resumably), build the envelope."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from worktrial.agents import AgentOptions, create_agent
from worktrial.agents.base import Agent, AgentError
from worktrial.engine.attempt import AttemptSettings, run_attempt
from worktrial.engine.executor import LocalExecutor
from worktrial.errors import BadInputError, RunAborted, SuiteError
from worktrial.isolation import proc
from worktrial.isolation.pool import Slot
from worktrial.isolation.workspace import (
    SourceRepo,
    ensure_state_dir,
    fetch_pinned,
    find_workspace,
    is_dirty,
    open_source,
    remove_tree,
    resolve_commit,
)
from worktrial.model.envelope import Envelope, SuiteFileInfo
from worktrial.model.records import AttemptRecord
from worktrial.model.suite import LoadedSuite, Task, load_suite
from worktrial.state.config import cache_dir, load_config
from worktrial.state.history import envelope_from_records
from worktrial.state.store import RunMeta, RunStore, TaskMeta
from worktrial.util import public_url, utc_now

# Error categories caused by infrastructure, not by the agent's work: retrying them does not bias results.
INFRA_ERROR_CATEGORIES = frozenset({"worktree", "crashed", "provider_server", "provider_rate_limit"})
JOIN_TIMEOUT_SECS = 30.0


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@dataclass
class RunOptions:
    """Everything about a run that is not in the suite file."""

    agent: str | None = None
    agent_cmd: str | None = None
    model: str | None = None
    base_url: str | None = None
    attempts: int | None = None
    k: int | None = None
    workspace: Path | None = None
    verify_always: bool = False
    keep_worktrees: bool = False
    jobs: int | None = None
    retry_errors: int = 0
    resume: str | None = None
    base_commit: str | None = None
    """Start every attempt from this commit instead of the workspace's HEAD (matrices pin their first run's)."""
    agent_settings: dict[str, Any] = field(default_factory=dict)
    on_begin: Callable[[str, int, int], None] | None = None
    """Called with (run id, attempts to run now, attempts already done) before the first attempt starts."""
    on_start: Callable[[str, int], None] | None = None
    """Called with (task id, attempt) when an attempt starts."""
    on_attempt: Callable[[AttemptRecord], None] | None = None
    on_warning: Callable[[str], None] | None = None


@dataclass(frozen=True)
class RunResult:
    envelope: Envelope
    interrupted: bool
    kept_root: Path | None
    store_dir: Path


def choose_agent_name(options: RunOptions) -> str:
    if options.agent_cmd and options.agent not in (None, "command"):
        raise BadInputError(f"--agent-cmd only works with --agent command, not --agent {options.agent}")
    if options.agent:
        return options.agent
    if options.agent_cmd:
        return "command"
    if options.model:
        return "builtin"
    raise BadInputError("choose an agent: --agent oracle|nop|command|..., --agent-cmd CMD, or --model provider/model")


def build_agent(options: RunOptions, config: dict[str, Any] | None = None) -> Agent:
    """The agent the options name, configured from the merged user and project config."""
    name = choose_agent_name(options)
    agent_options = AgentOptions(
        model=options.model,
        agent_cmd=options.agent_cmd,
        base_url=options.base_url,
        settings=options.agent_settings,
        config=config or {},
    )
    return create_agent(name, agent_options)


@dataclass(frozen=True)
class _Workspace:
    state_root: Path
    source: SourceRepo
    base_commit: str
    dirty: bool


def _resolve_workspace(loaded: LoadedSuite, workspace: Path | None, base_commit: str | None = None) -> _Workspace:
    pin = loaded.suite.workspace
    if pin is not None and pin.repo:
        repo = fetch_pinned(pin.repo, pin.ref, loaded.path.resolve().parent, cache_dir())
        try:
            state_root = find_workspace(workspace)
        except BadInputError:
            state_root = (workspace or Path.cwd()).resolve()
        user_repo = repo == state_root
    else:
        repo = find_workspace(workspace)
        state_root = repo
        user_repo = True
    base = resolve_commit(repo, base_commit or (pin.ref if pin is not None and pin.ref else "HEAD"))
    dirty = is_dirty(repo) if user_repo and not (pin and pin.ref) else False
    return _Workspace(state_root=state_root, source=open_source(repo), base_commit=base, dirty=dirty)


def state_root_for(workspace: Path | None) -> Path:
    """Where runs are stored: the git repository containing ``workspace`` (or the current directory)."""
    return find_workspace(workspace)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a run (or a matrix) the same way Ctrl-C does (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _validate_counts(loaded: LoadedSuite, options: RunOptions) -> tuple[int, int, int]:
    attempts = options.attempts or loaded.suite.attempts
    if attempts < 1:
        raise BadInputError(f"--attempts must be at least 1 (got {attempts})")
    k = options.k or attempts
    if not 1 <= k <= attempts:
        raise BadInputError(f"--k must be between 1 and the number of attempts ({attempts}); got {k}")
    jobs = options.jobs or default_jobs()
    if jobs < 1:
        raise BadInputError(f"--jobs must be at least 1 (got {jobs})")
    if options.retry_errors < 0:
        raise BadInputError(f"--retry-errors must be 0 or more (got {options.retry_errors})")
    return attempts, k, jobs


def run_suite(suite: LoadedSuite | str | Path, options: RunOptions | None = None) -> RunResult:
    """Run every task of a suite ``attempts`` times and return the envelope (also for interrupted runs).

    With ``options.resume`` the stored run of that id is continued instead (see ``resume_run``).
    """
    options = options or RunOptions()
    loaded = suite if isinstance(suite, LoadedSuite) else load_suite(suite)
    if options.resume:
        return resume_run(options.resume, options, loaded)
    attempts, k, jobs = _validate_counts(loaded, options)
    agent_name = choose_agent_name(options)
    ws = _resolve_workspace(loaded, options.workspace, options.base_commit)
    agent = build_agent(options, load_config(ws.state_root))
    if ws.dirty and options.on_warning:
        options.on_warning(
            f"{ws.source.path} has uncommitted changes; they are not part of the base commit "
            f"{ws.base_commit[:12]} that every attempt starts from"
        )
    agent.preflight()
    ensure_state_dir(ws.state_root)
    meta = RunMeta(
        id=new_run_id(),
        started_at=utc_now(),
        suite_path=str(loaded.path.resolve()),
        suite_display_path=_display_path(loaded.path),
        suite_sha256=loaded.sha256,
        suite_bundle_sha256=loaded.digest,
        suite_files=[SuiteFileInfo(name=f.name, sha256=f.sha256, size=f.size) for f in loaded.files],
        suite_id=loaded.suite.id,
        suite_name=loaded.suite.display_name,
        tasks=[TaskMeta(id=t.id, name=t.display_name, category=t.category) for t in loaded.suite.tasks],
        workspace=str(ws.state_root),
        source_repo=str(ws.source.path),
        base_commit=ws.base_commit,
        dirty=ws.dirty,
        agent=agent_name,
        agent_description=agent.describe(),
        agent_cmd=options.agent_cmd,
        model=options.model,
        base_url=public_url(options.base_url) if options.base_url else None,
        base_url_redacted=bool(options.base_url) and public_url(options.base_url or "") != options.base_url,
        agent_settings=dict(options.agent_settings),
        attempts=attempts,
        k=k,
        jobs=jobs,
        verify_always=options.verify_always,
        retry_errors=options.retry_errors,
    )
    store = RunStore.create(ws.state_root, meta)
    return _execute(loaded, agent, ws, meta, store, options, done=[])


def resume_run(run_id: str, options: RunOptions | None = None, loaded: LoadedSuite | None = None) -> RunResult:
    """Run only the attempts a stored run is missing, then report on the whole run.

    Refuses, listing every difference, when the suite digest, base commit, agent or model would differ.
    """
    options = options or RunOptions()
    store = RunStore.open(state_root_for(options.workspace), run_id)
    meta = store.meta()
    if loaded is None:
        try:
            loaded = load_suite(meta.suite_path)
        except SuiteError as exc:
            raise BadInputError(f"cannot resume {run_id}: {exc}") from None
    ws = _resolve_workspace(loaded, Path(meta.workspace))
    differences = []
    if loaded.sha256 != meta.suite_sha256:
        differences.append(f"suite digest: stored {meta.suite_sha256[:12]}, now {loaded.sha256[:12]} ({loaded.path})")
    elif loaded.digest != (meta.suite_bundle_sha256 or meta.suite_sha256):
        stored_digest = meta.suite_bundle_sha256 or meta.suite_sha256
        differences.append(
            f"suite bundle digest: stored {stored_digest[:12]}, now {loaded.digest[:12]} "
            f"(a file the suite declares in `files` changed)"
        )
    if ws.base_commit != meta.base_commit:
        differences.append(f"base commit: stored {meta.base_commit[:12]}, now {ws.base_commit[:12]}")
    given_agent = choose_agent_name(options) if (options.agent or options.agent_cmd or options.model) else None
    if given_agent is not None and given_agent != meta.agent:
        differences.append(f"agent: stored {meta.agent}, now {given_agent}")
    if options.agent_cmd is not None and options.agent_cmd != meta.agent_cmd:
        differences.append(f"agent command: stored {meta.agent_cmd!r}, now {options.agent_cmd!r}")
    if options.model is not None and options.model != meta.model:
        differences.append(f"model: stored {meta.model}, now {options.model}")
    if options.base_url is not None and public_url(options.base_url) != meta.base_url:
        differences.append(f"base URL: stored {meta.base_url}, now {public_url(options.base_url)}")
    if options.attempts is not None and options.attempts != meta.attempts:
        differences.append(f"attempts: stored {meta.attempts}, now {options.attempts}")
    if differences:
        raise BadInputError(f"cannot resume run {run_id}; it differs from the stored run:\n" + "\n".join(differences))
    if meta.base_url_redacted and options.base_url is None:
        raise BadInputError(
            f"run {run_id} used a base URL with credentials in it, which were not stored; "
            f"pass --base-url {meta.base_url} with them again to resume"
        )
    if meta.work_root:
        remove_tree(Path(meta.work_root))  # left behind by a crash
    stored = RunOptions(
        agent=meta.agent,
        agent_cmd=meta.agent_cmd,
        model=meta.model,
        base_url=options.base_url or meta.base_url,
        agent_settings=meta.agent_settings,
    )
    agent = build_agent(stored, load_config(ws.state_root))
    agent.preflight()
    jobs = options.jobs or meta.jobs
    meta = meta.model_copy(
        update={
            "jobs": jobs,
            "retry_errors": options.retry_errors or meta.retry_errors,
            "agent_description": agent.describe(),
        }
    )
    merged = dataclasses.replace(options, verify_always=meta.verify_always, jobs=jobs, retry_errors=meta.retry_errors)
    return _execute(loaded, agent, ws, meta, store, merged, done=store.records())


def _execute(
    loaded: LoadedSuite,
    agent: Agent,
    ws: _Workspace,
    meta: RunMeta,
    store: RunStore,
    options: RunOptions,
    done: list[AttemptRecord],
) -> RunResult:
    done_keys = {(r.task_id, r.attempt) for r in done}
    tasks = {t.id: t for t in loaded.suite.tasks}
    plans = [(t, n) for n in range(1, meta.attempts + 1) for t in loaded.suite.tasks if (t.id, n) not in done_keys]
    records = [r for r in done if r.task_id in tasks]
    work_root = Path(tempfile.mkdtemp(prefix=f"worktrial-{meta.id}-"))
    meta = meta.model_copy(update={"work_root": str(work_root)})
    store.write_meta(meta)
    settings = AttemptSettings(
        source=ws.source,
        base_commit=meta.base_commit,
        work_root=work_root,
        trace_dir=ws.state_root / ".worktrial" / "eval" / "traces" / meta.id,
        workspace=ws.state_root,
        verify_always=meta.verify_always,
        keep_worktrees=options.keep_worktrees,
    )

    def work(plan: tuple[Task, int], slot: Slot | None) -> tuple[AttemptRecord, AgentError | None] | None:
        task, number = plan
        reasons: list[str] = []
        while True:
            outcome = run_attempt(agent, task, number, settings, slot)
            if proc.STOPPING.is_set():
                return None  # ended by the interrupt: not a result, it reruns on resume
            record = outcome.record
            if (
                record.outcome == "error"
                and record.error_category in INFRA_ERROR_CATEGORIES
                and len(reasons) < meta.retry_errors
                and outcome.fatal is None
            ):
                reasons.append(record.reason or record.error_category or "error")
                continue
            if reasons:
                record = record.model_copy(update={"retries": len(reasons), "retry_reasons": reasons})
            return record, outcome.fatal

    def make_slot(index: int) -> Slot | None:
        if options.keep_worktrees:
            return None
        return Slot(ws.source, meta.base_commit, work_root / f"slot-{index}")

    def close_slot(slot: Slot | None) -> None:
        if slot is not None:
            slot.close()

    executor: LocalExecutor[tuple[Task, int], tuple[AttemptRecord, AgentError | None], Slot | None]
    executor = LocalExecutor(meta.jobs, work, make_slot, close_slot)
    interrupted = False
    aborted: AgentError | None = None
    proc.STOPPING.clear()
    if options.on_begin:
        options.on_begin(meta.id, len(plans), len(records))
    try:
        with sigterm_as_interrupt():
            try:
                for event in executor.events(plans):
                    task, number = event.item
                    if event.kind == "start":
                        if options.on_start:
                            options.on_start(task.id, number)
                        continue
                    assert event.result is not None
                    record, fatal = event.result
                    store.append(record)
                    records.append(record)
                    if options.on_attempt:
                        options.on_attempt(record)
                    if fatal is not None and aborted is None:
                        aborted = fatal
                        executor.stop()
                        proc.stop_all()
            except KeyboardInterrupt:
                interrupted = True
                executor.stop()
                proc.stop_all()
            executor.join(JOIN_TIMEOUT_SECS)
    except KeyboardInterrupt:
        # A second Ctrl-C while cleaning up: end every process now and leave at once.
        proc.stop_all()
        if not options.keep_worktrees:
            remove_tree(work_root)
        raise SystemExit(130) from None
    finally:
        proc.kill_all_live()
        if not options.keep_worktrees:
            remove_tree(work_root)
        proc.STOPPING.clear()
    envelope = envelope_from_records(meta, records, complete=not interrupted and aborted is None)
    store.write_envelope(envelope)
    if aborted is not None:
        raise RunAborted(
            f"stopping the run: {aborted.message} (it would repeat on every attempt); "
            f"finished attempts are stored in run {meta.id}"
        )
    return RunResult(
        envelope=envelope,
        interrupted=interrupted,
        kept_root=work_root if options.keep_worktrees else None,
        store_dir=store.dir,
    )


def _display_path(path: Path) -> str:
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
    return str(path)
