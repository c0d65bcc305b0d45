"""A whole run: resolve the workspace and agent, plan the attempts, drain the executor's events, clean up.

One run is one scope: its settings are one frozen ``RunSettings``, its processes live in its executor's
``ProcessScope``, and what the caller wants to hear about it goes to a ``RunObserver``. Nothing here touches
process-wide state or exits the interpreter: ``run_suite`` returns a ``RunResult`` whose ``status`` the CLI
maps to an exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import secrets
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from worktrial.agents import AgentOptions, create_agent
from worktrial.agents.base import Agent
from worktrial.engine.confine import (
    SandboxChoice,
    loopback_url,
    resolve_sandbox,
    unreadable_objects,
    unwritable_shared,
)
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptSpec, Executor, RepoSource, TaskBase
from worktrial.engine.local import LocalExecutor
from worktrial.errors import BadInputError, SuiteError, WorkspaceError
from worktrial.isolation import cgroups
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.sandbox import SandboxDecision, SandboxSettings
from worktrial.isolation.workspace import (
    SourceRepo,
    check_writable,
    ensure_state_dir,
    fetch_pinned,
    find_workspace,
    is_dirty,
    open_source,
    remove_tree,
    resolve_commit,
    tracked_in,
    unwritable,
)
from worktrial.model.bundle import copy_bundle
from worktrial.model.config import Config
from worktrial.model.envelope import Envelope, SandboxInfo, SuiteFileInfo
from worktrial.model.records import RETRYABLE_ERRORS, AttemptRecord
from worktrial.model.selection import reselect, select
from worktrial.model.suite import MAX_ATTEMPTS, LoadedSuite, Task, load_suite
from worktrial.state import leftovers
from worktrial.state.artifacts import write_artifacts
from worktrial.state.config import cache_dir, load_config
from worktrial.state.history import envelope_from_records
from worktrial.state.roots import state_root
from worktrial.state.store import RunMeta, RunStore, TaskMeta
from worktrial.state.traces import write_trace
from worktrial.util import public_url, utc_now

INFRA_ERROR_CATEGORIES = RETRYABLE_ERRORS
"""Errors --retry-errors may run again (model.records.RETRYABLE_ERRORS, documented in docs/results.md)."""
JOIN_TIMEOUT_SECS = 30.0
MAX_JOBS = 256
MAX_RETRY_ERRORS = 100


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


ExecutorFactory = Callable[[int, Path, bool], Executor]
"""Builds the executor of one run from (jobs, the run's private work directory, keep worktrees)."""


def local_executor(jobs: int, work_root: Path, keep_worktrees: bool) -> Executor:
    return LocalExecutor(jobs, work_root, keep_worktrees=keep_worktrees)


@dataclass(frozen=True)
class RunOptions:
    """Everything about a run that is not in the suite file."""

    agent: str | None = None
    agent_cmd: str | None = None
    model: str | None = None
    base_url: str | None = None
    pass_env: tuple[str, ...] = ()
    """--pass-env: credential-like variables (names or ``PREFIX_*``) the agent receives besides its own."""
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
    agent_settings: Mapping[str, Any] = field(default_factory=dict)
    executor: ExecutorFactory = local_executor
    """Where attempts run: the local thread executor unless another one is plugged in."""
    artifacts: bool = True
    """Keep each attempt's logs and patch in the run store (--no-artifacts turns it off)."""
    label: str | None = None
    """The user's name for the run (--label), shown in runs, compare, view and matrices."""
    tasks: tuple[str, ...] = ()
    """--task glob patterns over task ids (empty: every task)."""
    categories: tuple[str, ...] = ()
    limit: int | None = None
    sandbox: SandboxChoice = field(default_factory=SandboxChoice)
    """--sandbox, --network, --max-memory, --max-procs (None: the user's config, then the defaults)."""


class RunObserver:
    """What a caller hears about a run while it happens; every method is optional (override what you need).

    Called from the run's own thread, in order: ``warning`` any time, ``begin`` once, then ``start`` and
    ``attempt`` per attempt.
    """

    def warning(self, message: str) -> None:
        """Something the user should know that does not stop the run (e.g. uncommitted changes)."""

    def begin(self, run_id: str, to_run: int, done: int) -> None:
        """Before the first attempt: the run id, attempts to run now and attempts already done (resume)."""

    def start(self, task_id: str, attempt: int) -> None:
        """An attempt started on a worker."""

    def phase(self, task_id: str, attempt: int, phase: str) -> None:
        """A running attempt moved to another phase: ``setup``, ``agent`` or ``verify``."""

    def attempt(self, record: AttemptRecord) -> None:
        """An attempt finished; its record is already persisted."""


RunStatus = Literal["complete", "aborted", "stopped"]


@dataclass(frozen=True)
class RunResult:
    """A finished run: ``complete``; ``aborted`` by an error that would repeat on every attempt (``error`` says
    which); or ``stopped`` by Ctrl-C / SIGTERM. The envelope covers what finished in every case."""

    envelope: Envelope
    status: RunStatus
    store_dir: Path
    kept_root: Path | None = None
    error: str | None = None

    @property
    def run_id(self) -> str:
        return self.envelope.run.id

    @property
    def interrupted(self) -> bool:
        return self.status == "stopped"


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


def agent_ref(options: RunOptions, config: Config | None = None) -> AgentRef:
    """The agent the options name, as data: name and options (configured from the merged user and project config)."""
    return AgentRef(
        name=choose_agent_name(options),
        options=AgentOptions(
            model=options.model,
            agent_cmd=options.agent_cmd,
            base_url=options.base_url,
            settings=dict(options.agent_settings),
            pass_env=tuple(options.pass_env),
            config=config if config is not None else Config(),
        ),
    )


def build_agent(options: RunOptions, config: Config | None = None) -> Agent:
    """The agent the options name, built in this process (matrices preflight every configuration with it)."""
    ref = agent_ref(options, config)
    return create_agent(ref.name, ref.options)


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
        root = state_root(workspace)
        user_repo = repo == root
    else:
        repo = find_workspace(workspace)
        root = repo
        user_repo = True
    base = resolve_commit(repo, base_commit or (pin.ref if pin is not None and pin.ref else "HEAD"))
    dirty = is_dirty(repo) if user_repo and not (pin and pin.ref) else False
    return _Workspace(state_root=root, source=open_source(repo), base_commit=base, dirty=dirty)


def _task_bases(loaded: LoadedSuite, ws: _Workspace) -> dict[str, TaskBase]:
    """Each task's repository, commit and environment; tasks with their own ``workspace`` pin resolve it here."""
    suite = loaded.suite
    default_source = _source_of(ws)
    hide = _committed_suite_dir(loaded, ws.source.path, ws.base_commit)
    resolved: dict[tuple[str | None, str | None], tuple[RepoSource, str]] = {}
    bases: dict[str, TaskBase] = {}
    for task in suite.tasks:
        environment = suite.environment_for(task)
        pin = task.workspace
        if pin is None or (pin.repo is None and pin.ref is None):
            bases[task.id] = TaskBase(default_source, ws.base_commit, environment, hide)
            continue
        key = (pin.repo, pin.ref)
        if key not in resolved:
            repo = fetch_pinned(pin.repo, pin.ref, loaded.suite_dir, cache_dir()) if pin.repo else ws.source.path
            try:
                commit = resolve_commit(repo, pin.ref or "HEAD")
            except BadInputError as exc:
                raise BadInputError(f"task {task.id}: {exc}") from None
            resolved[key] = (RepoSource("path", str(repo)), commit)
        source, commit = resolved[key]
        own_hide = _committed_suite_dir(loaded, Path(source.location), commit)
        bases[task.id] = TaskBase(source, commit, environment, own_hide)
    return bases


def _committed_suite_dir(loaded: LoadedSuite, repo: Path, commit: str) -> tuple[str, ...]:
    """The suite's directory relative to ``repo`` when ``commit`` holds it (hidden tests must not reach agents)."""
    try:
        rel = loaded.suite_dir.relative_to(repo.resolve()).as_posix()
    except ValueError:
        return ()
    if rel in ("", "."):
        return ()  # a suite at the repository's top level: its files are declared one by one, see lint
    return (rel,) if tracked_in(repo, commit, rel) else ()


def resolve_task_bases(
    loaded: LoadedSuite, workspace: Path | None, base_commit: str | None = None
) -> dict[str, TaskBase]:
    """Where each task's attempts start, resolved as a run would (``check`` rebuilds results on them)."""
    return _task_bases(loaded, _resolve_workspace(loaded, workspace, base_commit))


def state_root_for(workspace: Path | None) -> Path:
    """Where runs are stored: one rule for every command (see ``worktrial.state.roots``)."""
    return state_root(workspace)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a run (or a matrix) the same way Ctrl-C does (only possible from the main thread).

    SIGHUP is what a closed terminal or a dropped SSH session sends: left at its default it would kill the harness
    on the spot, losing the envelope and leaving the agents running with no deadline.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signals = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def _validate_counts(loaded: LoadedSuite, options: RunOptions) -> tuple[int, int, int]:
    attempts = options.attempts or loaded.suite.attempts
    k = options.k or attempts
    jobs = options.jobs or default_jobs()
    check_counts(attempts, k, jobs, options.retry_errors)
    return attempts, k, jobs


def check_counts(attempts: int, k: int, jobs: int, retry_errors: int, *, source: str = "") -> None:
    """The same limits for flags, suite files and a stored run.json (which anyone could have edited)."""
    where = f"{source}: " if source else ""
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise BadInputError(f"{where}--attempts must be between 1 and {MAX_ATTEMPTS} per task (got {attempts})")
    if not 1 <= k <= attempts:
        raise BadInputError(f"{where}--k must be between 1 and the number of attempts ({attempts}); got {k}")
    if not 1 <= jobs <= MAX_JOBS:
        raise BadInputError(f"{where}--jobs must be between 1 and {MAX_JOBS} (got {jobs})")
    if not 0 <= retry_errors <= MAX_RETRY_ERRORS:
        raise BadInputError(f"{where}--retry-errors must be between 0 and {MAX_RETRY_ERRORS} (got {retry_errors})")


@dataclass(frozen=True)
class RunSettings:
    """Everything one run needs once it has started, resolved and frozen (the stored ``meta`` included)."""

    loaded: LoadedSuite
    meta: RunMeta
    state_root: Path
    work_root: Path
    trace_dir: Path
    spec: AttemptSpec
    keep_worktrees: bool
    bases: Mapping[str, TaskBase] = field(default_factory=dict)
    """Task id -> where its attempts start (repository, commit, environment)."""


def _source_of(ws: _Workspace) -> RepoSource:
    return RepoSource("path", str(ws.source.path))


def run_suite(
    suite: LoadedSuite | str | Path, options: RunOptions | None = None, observer: RunObserver | None = None
) -> RunResult:
    """Run every task of a suite ``attempts`` times and return the result (also for stopped or aborted runs).

    With ``options.resume`` the stored run of that id is continued instead (see ``resume_run``).
    """
    options = options or RunOptions()
    observer = observer or RunObserver()
    loaded = suite if isinstance(suite, LoadedSuite) else load_suite(suite)
    if options.resume:
        return resume_run(options.resume, options, loaded, observer)
    loaded, selection = select(loaded, options.tasks, options.categories, options.limit)
    attempts, k, jobs = _validate_counts(loaded, options)
    ws = _resolve_workspace(loaded, options.workspace, options.base_commit)
    ref = agent_ref(options, load_config(ws.state_root))
    if ws.dirty:
        observer.warning(
            f"{ws.source.path} has uncommitted changes; they are not part of the base commit "
            f"{ws.base_commit[:12]} that every attempt starts from"
        )
    bases = _task_bases(loaded, ws)
    _end_previous(ws.state_root, observer)
    run_id = new_run_id()
    with _started(run_id, jobs, options) as (executor, work_root):
        sandbox = _sandbox(options, ref, ws, work_root, bases, observer)
        description = executor.preflight(ref)
        ensure_state_dir(ws.state_root)
        meta = RunMeta(
            id=run_id,
            started_at=utc_now(),
            suite_path=str(loaded.path.resolve()),
            suite_display_path=_display_path(loaded.path),
            suite_sha256=loaded.sha256,
            suite_bundle_sha256=loaded.digest,
            suite_files=[SuiteFileInfo(name=f.name, sha256=f.sha256, size=f.size) for f in loaded.files],
            suite_id=loaded.suite.id,
            suite_name=loaded.suite.display_name,
            tasks=[
                TaskMeta(id=t.id, name=t.display_name, category=t.category, cluster=t.cluster)
                for t in loaded.suite.tasks
            ],
            workspace=str(ws.state_root),
            source_repo=str(ws.source.path),
            base_commit=ws.base_commit,
            dirty=ws.dirty,
            task_base_commits={task_id: base.commit for task_id, base in bases.items()},
            agent=ref.name,
            agent_description=description,
            agent_cmd=options.agent_cmd,
            model=options.model,
            base_url=public_url(options.base_url) if options.base_url else None,
            base_url_redacted=bool(options.base_url) and public_url(options.base_url or "") != options.base_url,
            agent_settings=dict(options.agent_settings),
            pass_env=list(options.pass_env),
            attempts=attempts,
            k=k,
            jobs=jobs,
            verify_always=options.verify_always,
            retry_errors=options.retry_errors,
            work_root=str(work_root),
            label=options.label,
            selection=selection,
            artifacts=options.artifacts,
            sandbox=sandbox[2],
        )
        store = RunStore.create(ws.state_root, meta)
        try:
            settings = _settings(loaded, meta, ws, ref, work_root, options.keep_worktrees, bases, store.dir, sandbox)
            return _execute(settings, executor, store, observer, done=[])
        finally:
            store.close()


def resume_run(
    run_id: str,
    options: RunOptions | None = None,
    loaded: LoadedSuite | None = None,
    observer: RunObserver | None = None,
) -> RunResult:
    """Run only the attempts a stored run is missing, then report on the whole run.

    Refuses, listing every difference, when the suite digest, base commit, agent or model would differ.
    """
    options = options or RunOptions()
    observer = observer or RunObserver()
    store = RunStore.open(state_root_for(options.workspace), run_id, writer=True)
    try:
        return _resume(store, run_id, options, loaded, observer)
    finally:
        store.close()


@dataclass(frozen=True)
class StoredSuite:
    """The suite file a stored run names, as it is now, and what the run recorded about it."""

    loaded: LoadedSuite
    workspace: Path
    unchanged: bool
    """The file still has the digest the run started with (else resume refuses, listing the differences)."""


def stored_suite(run_id: str, workspace: Path | None = None) -> StoredSuite:
    """The suite a stored run was started from, for the trust check before ``resume`` runs its commands."""
    meta = RunStore.open(state_root_for(workspace), run_id).meta()
    try:
        loaded = load_suite(meta.suite_path)
    except SuiteError as exc:
        raise BadInputError(f"cannot resume {run_id}: {exc}") from None
    unchanged = loaded.sha256 == meta.suite_sha256 and loaded.digest == (meta.suite_bundle_sha256 or meta.suite_sha256)
    return StoredSuite(loaded, Path(meta.workspace), unchanged)


def _resume(
    store: RunStore, run_id: str, options: RunOptions, loaded: LoadedSuite | None, observer: RunObserver
) -> RunResult:
    meta = store.meta()
    check_counts(meta.attempts, meta.k, meta.jobs, meta.retry_errors, source=str(store.dir / "run.json"))
    if loaded is None:
        loaded = stored_suite(run_id, options.workspace).loaded
    loaded = reselect(loaded, meta.selection)
    ws = _resolve_workspace(loaded, Path(meta.workspace))
    bases = _task_bases(loaded, ws)
    differences = _differences(loaded, ws, meta, options)
    moved = [
        f"{task_id} (stored {meta.task_base_commits[task_id][:12]}, now {base.commit[:12]})"
        for task_id, base in bases.items()
        if task_id in meta.task_base_commits and meta.task_base_commits[task_id] != base.commit
    ]
    if moved:
        differences.append(f"task base commits: {', '.join(moved[:5])}")
    if differences:
        raise BadInputError(f"cannot resume run {run_id}; it differs from the stored run:\n" + "\n".join(differences))
    if meta.base_url_redacted and options.base_url is None:
        raise BadInputError(
            f"run {run_id} used a base URL with credentials in it, which were not stored; "
            f"pass --base-url {meta.base_url} with them again to resume"
        )
    _end_previous(ws.state_root, observer, own=store.dir)
    if meta.work_root:
        _remove_crashed_work_root(Path(meta.work_root), run_id, observer)
    stored_records = store.load_records(meta)
    if (warning := stored_records.warning()) is not None:
        observer.warning(warning)
    stored = RunOptions(
        agent=meta.agent,
        agent_cmd=meta.agent_cmd,
        model=meta.model,
        base_url=options.base_url or meta.base_url,
        agent_settings=meta.agent_settings,
        pass_env=tuple(meta.pass_env),
    )
    ref = agent_ref(stored, load_config(ws.state_root))
    jobs = options.jobs or meta.jobs
    check_writable(store.dir, "run data")
    with _started(run_id, jobs, options) as (executor, work_root):
        sandbox = _sandbox(options, ref, ws, work_root, bases, observer)
        description = executor.preflight(ref)
        meta = meta.model_copy(
            update={
                "jobs": jobs,
                "retry_errors": options.retry_errors or meta.retry_errors,
                "agent_description": description,
                "work_root": str(work_root),
                "sandbox": sandbox[2],
            }
        )
        store.write_meta(meta)
        settings = _settings(loaded, meta, ws, ref, work_root, options.keep_worktrees, bases, store.dir, sandbox)
        return _execute(settings, executor, store, observer, done=stored_records.records)


def _end_previous(state_root: Path, observer: RunObserver, own: Path | None = None) -> None:
    """Before anything runs: end what an earlier harness, killed with kill -9, left running here (one line)."""
    if (line := leftovers.describe(leftovers.end_previous(state_root, own=own))) is not None:
        observer.warning(line)
    if stale := cgroups.end_stale():  # what the signed record missed, or a killed run of another workspace
        observer.warning(f"ended {stale} process(es) left in the cgroup of a worktrial killed with kill -9")


def _remove_crashed_work_root(path: Path, run_id: str, observer: RunObserver) -> None:
    """Remove the worktrees a crashed run left behind, but only a directory this harness made for this run.

    run.json is signed, but a run stored before signing (or a copied one) could name any directory: only a
    real directory (not a symlink) owned by this user and named ``worktrial-<run id>-...`` is removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        observer.warning(f"leaving {path} alone: {exc.strerror}")
        return
    ours = (
        path.is_absolute()
        and path.name.startswith(f"worktrial-{run_id}-")
        and stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
    )
    if not ours:
        observer.warning(f"leaving {path} alone: it is not a work directory this harness created for run {run_id}")
        return
    remove_tree(path)


def _differences(loaded: LoadedSuite, ws: _Workspace, meta: RunMeta, options: RunOptions) -> list[str]:
    """Why the given suite, workspace and flags would not continue the stored run (empty when they would)."""
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
    return differences


@contextlib.contextmanager
def _started(run_id: str, jobs: int, options: RunOptions) -> Iterator[tuple[Executor, Path]]:
    """The run's private work directory and executor; both are gone when the run ends, however it ends."""
    try:
        work_root = Path(tempfile.mkdtemp(prefix=f"worktrial-{run_id}-"))
        check_writable(work_root, "worktrees (TMPDIR)")
    except OSError as exc:
        raise WorkspaceError(unwritable(Path(tempfile.gettempdir()), "worktrees (TMPDIR)", exc)) from None
    except WorkspaceError:
        remove_tree(work_root)
        raise
    try:
        executor = options.executor(jobs, work_root, options.keep_worktrees)
    except BaseException:  # e.g. a cluster that cannot be reached: nothing ran, leave nothing behind
        remove_tree(work_root)
        raise
    try:
        yield executor, work_root
    except BaseException:
        executor.stop()  # bad input in preflight, or a second Ctrl-C: end everything, wait for nothing
        executor.close(0)
        raise
    finally:
        if not options.keep_worktrees:
            remove_tree(work_root)


def _sandbox(
    options: RunOptions,
    ref: AgentRef,
    ws: _Workspace,
    work_root: Path,
    bases: Mapping[str, TaskBase],
    observer: RunObserver,
) -> tuple[SandboxSettings, SandboxDecision, SandboxInfo]:
    """The run's sandbox, hiding the user's repositories, the state root and the run's other slots."""
    repos = {ws.source.path, *(Path(b.source.location) for b in bases.values() if b.source.kind == "path")}
    table = ref.options.config.agents.get(ref.name)
    configured = table.command if table is not None else None
    command = " ".join(c for c in (ref.options.agent_cmd, configured) if c)
    resolved = resolve_sandbox(options.sandbox, [*repos, ws.state_root, work_root], command)
    if resolved[1].network == "on" and ref.name != "builtin" and (url := loopback_url(options.base_url)):
        # The built-in agent calls its model from the harness; every other agent calls it from inside the sandbox.
        raise BadInputError(
            f"--base-url {public_url(url)} is on this host's loopback, which attempts cannot reach on a network of "
            "their own (--network on, the default); pass --network host to share the host's network with them"
        )
    objects = unreadable_objects(ws.source.objects_dir, resolved[1]) if ws.source.objects_dir.is_dir() else None
    for warning in (resolved[1].warning, *unwritable_shared(resolved[0], resolved[1]), objects):
        if warning:
            observer.warning(warning)
    return resolved


def _settings(
    loaded: LoadedSuite,
    meta: RunMeta,
    ws: _Workspace,
    ref: AgentRef,
    work_root: Path,
    keep_worktrees: bool,
    bases: Mapping[str, TaskBase],
    store_dir: Path,
    sandbox: tuple[SandboxSettings, SandboxDecision, SandboxInfo],
) -> RunSettings:
    suite_dir = work_root / "suite"
    copy_bundle(loaded.path, loaded.files, suite_dir)
    spec = AttemptSpec(
        run_id=meta.id,
        suite_sha256=meta.suite_sha256,
        base_commit=meta.base_commit,
        source=_source_of(ws),
        agent=ref,
        verify_always=meta.verify_always,
        keep_worktrees=keep_worktrees,
        artifacts=meta.artifacts,
        suite_dir=str(suite_dir),
        artifacts_dir=str(store_dir),
        sandbox=sandbox[0],
        sandbox_decision=sandbox[1],
        suite_digest=meta.suite_bundle_sha256 or meta.suite_sha256,
        environment_cache=str(cache_dir() / "environments"),
    )
    return RunSettings(
        loaded=loaded,
        meta=meta,
        state_root=ws.state_root,
        work_root=work_root,
        trace_dir=ws.state_root / ".worktrial" / "eval" / "traces" / meta.id,
        spec=spec,
        keep_worktrees=keep_worktrees,
        bases=bases,
    )


def _plan(settings: RunSettings, done: set[tuple[str, int]]) -> Iterator[AttemptJob]:
    """The attempts still to run, lazily: attempt 1 of every task first, then attempt 2, ...

    Tasks with different bases (repository, commit, environment) run one base after the other, so each
    worker's slot for a base is set up once and reused instead of being rebuilt for every other attempt.
    """
    groups: dict[str, list[Task]] = {}
    for task in settings.loaded.suite.tasks:
        base = settings.bases.get(task.id)
        groups.setdefault(base.key if base else "", []).append(task)
    for tasks in groups.values():
        for number in range(1, settings.meta.attempts + 1):
            for task in tasks:
                if (task.id, number) not in done:
                    yield AttemptJob(spec=settings.spec, task=task, attempt=number, base=settings.bases.get(task.id))


def _execute(
    settings: RunSettings, executor: Executor, store: RunStore, observer: RunObserver, done: list[AttemptRecord]
) -> RunResult:
    meta = settings.meta
    task_ids = {t.id for t in settings.loaded.suite.tasks}
    records = [r for r in done if r.task_id in task_ids]
    done_keys = {(r.task_id, r.attempt) for r in records}
    observer.begin(meta.id, meta.attempts * len(task_ids) - len(done_keys), len(records))
    scope = getattr(executor, "scope", None)
    if isinstance(scope, ProcessScope):  # an executor whose processes live in this one: record them for resume
        scope.journal = leftovers.Journal(store.dir)
    status: RunStatus = "complete"
    error: str | None = None
    try:
        with sigterm_as_interrupt():
            try:
                error = _drain(settings, executor, store, observer, _plan(settings, done_keys), records)
                status = "aborted" if error else "complete"
            except KeyboardInterrupt:
                status = "stopped"
                executor.stop()
            executor.close(JOIN_TIMEOUT_SECS)
    except KeyboardInterrupt:
        # A second Ctrl-C while cleaning up: end every process now and leave at once (no envelope).
        executor.stop()
        raise
    envelope = envelope_from_records(meta, records, complete=status == "complete")
    store.write_envelope(envelope)
    return RunResult(
        envelope=envelope,
        status=status,
        store_dir=store.dir,
        kept_root=settings.work_root if settings.keep_worktrees else None,
        error=error,
    )


def _drain(
    settings: RunSettings,
    executor: Executor,
    store: RunStore,
    observer: RunObserver,
    plan: Iterator[AttemptJob],
    records: list[AttemptRecord],
) -> str | None:
    """Feed the executor lazily, persist each result as it arrives, decide retries; the abort reason or None."""
    meta = settings.meta
    stopping = False
    for job in itertools.islice(plan, 2 * meta.jobs):
        executor.submit(job)
    retry_reasons: dict[tuple[str, int], list[str]] = {}
    aborted: str | None = None
    for event in executor.events():
        job = event.job
        if event.kind == "phase":
            observer.phase(job.task.id, job.attempt, event.phase or "")
            continue
        if event.kind == "start":
            observer.start(job.task.id, job.attempt)
            if not stopping:
                for more in itertools.islice(plan, 1):  # keep the queue topped up, never the whole plan in memory
                    executor.submit(more)
            continue
        assert event.result is not None
        result = event.result
        record = result.record
        reasons = retry_reasons.setdefault(job.key, [])
        if (
            record.outcome == "error"
            and record.error_category in INFRA_ERROR_CATEGORIES
            and len(reasons) < meta.retry_errors
            and result.fatal is None
            and not stopping
        ):
            reasons.append(record.reason or record.error_category or "error")
            executor.submit(dataclasses.replace(job, try_number=job.try_number + 1))
            continue
        trace_path = write_trace(result.trace, settings.trace_dir)
        try:
            trace_ref = os.path.relpath(trace_path, settings.state_root)
        except ValueError:
            trace_ref = str(trace_path)
        update: dict[str, Any] = {"trace": trace_ref}
        if reasons:
            update |= {"retries": len(reasons), "retry_reasons": list(reasons)}
        record = record.model_copy(update=update)
        if result.artifacts is not None:
            try:
                write_artifacts(store.dir, result.artifacts)
            except OSError as exc:  # a full disk costs the logs, never the result
                observer.warning(f"could not store the artifacts of {job.task.id} #{job.attempt}: {exc.strerror}")
        store.append(record)
        records.append(record)
        observer.attempt(record)
        if result.fatal is not None and aborted is None:
            aborted = (
                f"stopping the run: {result.fatal.message} (it would repeat on every attempt); "
                f"finished attempts are stored in run {meta.id}"
            )
            stopping = True
            executor.stop()
    return aborted


def _display_path(path: Path) -> str:
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
    return str(path)
