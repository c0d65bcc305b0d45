"""One session of a run, new or resumed: resolve where it runs, start its executor, drain its attempts.

A run is started by ``engine/run.py`` (``run_suite``) and continued by ``engine/resume.py`` (``resume_run``); both
resolve a ``Session`` (the suite, the workspace and task bases, the agent, the containment asked for and how the
session executes) and hand it to ``run_session``, which is the same for both: the executor is started and the agent
preflighted there, the sandbox resolved on this machine, the run store told about the session (``record``: a new
run creates its store, a resumed one updates it), and the plan drained. Neither module imports the other.

One session is one scope: its settings are one frozen ``RunSettings``, its processes live in its executor's
``ProcessScope``, and what the caller wants to hear about it goes to a ``RunObserver``. Nothing here touches
process-wide state or exits the interpreter: a ``RunResult``'s ``status`` is what the CLI maps to an exit code.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

from worktrial.agents import AgentOptions
from worktrial.engine.budget import FREE_AGENTS, Budget, unpriced_reason
from worktrial.engine.concurrency import AutoLevel, Concurrency, FixedLevel, HostProbe, Probe
from worktrial.engine.confine import (
    ResolvedSandbox,
    SandboxChoice,
    loopback_url,
    resolve_sandbox,
    unreadable_objects,
    unwritable_shared,
)
from worktrial.engine.containers import containment, network_warning, with_agent_tools
from worktrial.engine.executor import (
    AgentRef,
    AttemptJob,
    AttemptResult,
    AttemptSpec,
    Executor,
    RepoSource,
    TaskBase,
)
from worktrial.engine.local import LocalExecutor
from worktrial.engine.model_gateway import RunGateway, routes_through_gateway, unreachable_config
from worktrial.engine.schedule import Scheduler
from worktrial.errors import BadInputError, WorkspaceError
from worktrial.isolation import cgroups
from worktrial.isolation.container import ContainerPlan
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.workspace import (
    SourceRepo,
    check_writable,
    fetch_pinned,
    find_workspace,
    open_source,
    remove_tree,
    resolve_commit,
    tracked_in,
    uncommitted,
    unwritable,
)
from worktrial.model.bundle import copy_bundle
from worktrial.model.config import Config
from worktrial.model.envelope import ConcurrencyInfo, Envelope, ReuseInfo, SandboxInfo, same_containment
from worktrial.model.records import AttemptRecord, StoredChange
from worktrial.model.run_config import RunConfig, SandboxRequest
from worktrial.model.suite import MAX_ATTEMPTS, LoadedSuite, Task
from worktrial.state import leftovers
from worktrial.state.artifacts import write_artifacts, write_change
from worktrial.state.config import cache_dir
from worktrial.state.history import envelope_from_records
from worktrial.state.roots import state_root
from worktrial.state.store import RunMeta, RunStore
from worktrial.state.traces import write_trace
from worktrial.state.trajectories import write_trajectory
from worktrial.util import public_url

JOIN_TIMEOUT_SECS = 30.0
MAX_JOBS = 256
MAX_RETRY_ERRORS = 100


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def default_max_jobs() -> int:
    """``--jobs auto``'s ceiling when ``--max-jobs`` is not given: four attempts per core (agents mostly wait on
    their model), within ``MAX_JOBS``."""
    return max(1, min(MAX_JOBS, 4 * (os.cpu_count() or 1)))


@dataclass(frozen=True)
class AutoJobs:
    """``--jobs auto`` as a session asked for it (``engine/concurrency.py``)."""

    max_jobs: int
    probe: Probe | None = None
    """Where the level reads the machine's pressure and the time (None: this machine's ``/proc``)."""


Jobs = int | Literal["auto"]
"""``--jobs``: attempts at once, or ``auto``."""


def session_jobs(
    jobs: Jobs | None,
    max_jobs: int | None,
    probe: Probe | None = None,
    stored: tuple[int, ConcurrencyInfo | None] | None = None,
) -> tuple[int, AutoJobs | None]:
    """The executor's workers and ``--jobs auto`` (None: a fixed level) for ``--jobs`` and ``--max-jobs`` as given
    (``--max-jobs`` alone means ``auto``); what is not given comes from ``stored`` (a resumed run's jobs and
    concurrency), then the defaults."""
    if isinstance(jobs, int) and max_jobs is not None:
        raise BadInputError(f"--max-jobs is the ceiling of --jobs auto; drop it or --jobs {jobs}")
    earlier = stored[1] if stored is not None else None
    if jobs is None and max_jobs is None and stored is not None:
        jobs = "auto" if earlier is not None else stored[0]
    if jobs == "auto" or max_jobs is not None:
        ceiling = max_jobs or (earlier.max_jobs if earlier is not None else default_max_jobs())
        return ceiling, AutoJobs(ceiling, probe)
    return (jobs if isinstance(jobs, int) else default_jobs()), None


def meta_concurrency(earlier: ConcurrencyInfo | None, auto: AutoJobs | None) -> ConcurrencyInfo | None:
    """What the run's record says of its concurrency as a session starts: the earlier sessions' levels (kept
    whatever this one does), under this session's ``--max-jobs`` when it runs ``auto``."""
    if auto is None:
        return earlier
    if earlier is None:
        return ConcurrencyInfo(max_jobs=auto.max_jobs)
    return earlier.model_copy(update={"max_jobs": auto.max_jobs})


ExecutorFactory = Callable[[int, Path, bool], Executor]
"""Builds the executor of one run from (jobs, the run's private work directory, keep worktrees)."""


def local_executor(jobs: int, work_root: Path, keep_worktrees: bool) -> Executor:
    return LocalExecutor(jobs, work_root, keep_worktrees=keep_worktrees)


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

    def spend(self, spent: float, max_cost: float | None) -> None:
        """Under a budget, after each attempt: USD spent so far and the budget."""

    def concurrency(self, level: int, why: str) -> None:
        """Under ``--jobs auto``: the level changed to ``level`` attempts at once, for the reason ``why``."""

    def stopping(self, waiting: bool = False) -> None:
        """The run was interrupted and is ending its attempts; called at once, before any cleanup (``waiting``:
        again, when an attempt is still finishing a step no signal ends and the run waits for it)."""


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
    stop_reason: str | None = None
    """Why the run stopped by itself (its budget), when ``status`` is ``stopped`` and no one interrupted it."""

    @property
    def run_id(self) -> str:
        return self.envelope.run.id

    @property
    def interrupted(self) -> bool:
        return self.status == "stopped"


@dataclass(frozen=True)
class ResolvedWorkspace:
    """Where a run's attempts start from and where it is stored."""

    state_root: Path
    source: SourceRepo
    base_commit: str
    dirty: bool
    dirty_excluded: tuple[str, ...] = ()
    """Uncommitted paths that did not make it dirty: the suite file, its declared files (``suite_changes``)."""


def resolve_workspace(loaded: LoadedSuite, workspace: Path | None, base_commit: str | None = None) -> ResolvedWorkspace:
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
    changed = uncommitted(repo) if user_repo and not (pin and pin.ref) else []
    excluded = suite_changes(loaded, repo, changed)
    dirty = any(path not in excluded for path in changed)
    return ResolvedWorkspace(root, open_source(repo), base, dirty, tuple(excluded))


def suite_changes(loaded: LoadedSuite, repo: Path, changed: list[str]) -> list[str]:
    """Of the workspace's uncommitted paths, those that are the suite itself: its file, its declared files, or a
    directory nothing of which is committed that holds the suite file (``evals/`` as ``worktrial init`` writes it).
    Attempts never see them (they start from the base commit) and the suite's digests pin them, so they do not make
    the workspace dirty."""
    try:
        suite_dir = loaded.suite_dir.relative_to(repo.resolve()).as_posix()
    except ValueError:
        return []
    prefix = "" if suite_dir == "." else f"{suite_dir}/"
    suite = {prefix + loaded.path.name, *(prefix + f.name for f in loaded.files)}
    return [p for p in changed if p in suite or (p.endswith("/") and (prefix + loaded.path.name).startswith(p))]


def task_bases(loaded: LoadedSuite, ws: ResolvedWorkspace) -> dict[str, TaskBase]:
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
    return task_bases(loaded, resolve_workspace(loaded, workspace, base_commit))


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


def check_counts(
    attempts: int, k: int, jobs: int, retry_errors: int, *, source: str = "", max_jobs: int | None = None
) -> None:
    """The same limits for flags, suite files and a stored run.json (which anyone could have edited)."""
    where = f"{source}: " if source else ""
    if max_jobs is not None and not 1 <= max_jobs <= MAX_JOBS:
        raise BadInputError(f"{where}--max-jobs must be between 1 and {MAX_JOBS} (got {max_jobs})")
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise BadInputError(f"{where}--attempts must be between 1 and {MAX_ATTEMPTS} per task (got {attempts})")
    if not 1 <= k <= attempts:
        raise BadInputError(f"{where}--k must be between 1 and the number of attempts ({attempts}); got {k}")
    if not 1 <= jobs <= MAX_JOBS:
        raise BadInputError(f"{where}--jobs must be between 1 and {MAX_JOBS} (got {jobs})")
    if not 0 <= retry_errors <= MAX_RETRY_ERRORS:
        raise BadInputError(f"{where}--retry-errors must be between 0 and {MAX_RETRY_ERRORS} (got {retry_errors})")


class Reusing(Protocol):
    """How a run made from another run's attempts plans and stores them (``engine/carry.py``, ``engine/reuse.py``):
    the session runs replayed jobs like any other and hands their results here."""

    replays: bool
    """Some jobs rebuild a stored change instead of running the agent."""

    def job(self, job: AttemptJob) -> AttemptJob:
        """The job as the run plans it (a regraded attempt replays its stored change)."""
        ...

    def skipped(self) -> set[tuple[str, int]]:
        """Attempts the run never runs (a regrade leaves out what it cannot judge again)."""
        ...

    def regraded(self, job: AttemptJob, result: AttemptResult) -> AttemptRecord | None:
        """The record a replayed job stores, with its provenance (its files copied); None when its change could not
        be rebuilt exactly (``rerun`` says whether the agent then runs it)."""
        ...

    def rerun(self, job: AttemptJob) -> AttemptJob | None:
        """The job that runs the agent instead of a replay that came to nothing, or None (a regrade runs no agent)."""
        ...

    def info(self) -> ReuseInfo:
        """What run.json says of it: the source, and what could not be regraded (as of now)."""
        ...


@dataclass(frozen=True)
class RunSettings:
    """Everything one session of a run needs once it has started, resolved and frozen (the stored ``meta``
    included); a resumed run is a new session of the same run."""

    loaded: LoadedSuite
    meta: RunMeta
    state_root: Path
    work_root: Path
    trace_dir: Path
    spec: AttemptSpec
    keep_worktrees: bool
    bases: Mapping[str, TaskBase] = field(default_factory=dict)
    """Task id -> where its attempts start (repository, commit, environment)."""
    sandbox_index: int = 0
    """This session's containment in ``meta.sandboxes``, recorded in each of its attempts."""
    task_sandbox: Mapping[str, int] = field(default_factory=dict)
    """A container task's own containment in ``meta.sandboxes`` (its runtime, user and network)."""
    reuse: Reusing | None = None
    """A run made from another run's attempts: what it carries over, regrades and leaves out."""


def _source_of(ws: ResolvedWorkspace) -> RepoSource:
    return RepoSource("path", str(ws.source.path))


def agent_tools_here(plan: ContainerPlan | None, executor: Executor, description: Mapping[str, Any],
                     say: Callable[[str], None]) -> ContainerPlan | None:  # fmt: skip
    """The plan with the agent's tools put in on this machine (``with_agent_tools``) for the local executor; a
    remote executor's workers put them in on their own nodes, from their own installation and environment
    (``engine/node_containers.py``), so the plan travels without them."""
    return with_agent_tools(plan, description, say) if isinstance(executor, LocalExecutor) else plan


def end_previous(state_root: Path, observer: RunObserver, own: Path | None = None) -> None:
    """Before anything runs: end what an earlier harness, killed with kill -9, left running here (one line)."""
    if (line := leftovers.describe(leftovers.end_previous(state_root, own=own))) is not None:
        observer.warning(line)
    if stale := cgroups.end_stale():  # what the signed record missed, or a killed run of another workspace
        observer.warning(f"ended {stale} process(es) left in the cgroup of a worktrial killed with kill -9")


@contextlib.contextmanager
def started(run_id: str, jobs: int, factory: ExecutorFactory, keep_worktrees: bool) -> Iterator[tuple[Executor, Path]]:
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
        executor = factory(jobs, work_root, keep_worktrees)
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
        if not keep_worktrees:
            remove_tree(work_root)


def resolve_run_sandbox(
    choice: SandboxChoice | SandboxRequest,
    base_url: str | None,
    ref: AgentRef,
    ws: ResolvedWorkspace,
    work_root: Path,
    bases: Mapping[str, TaskBase],
    observer: RunObserver,
) -> ResolvedSandbox:
    """The session's sandbox, hiding the user's repositories, the state root and the run's other slots."""
    repos = {ws.source.path, *(Path(b.source.location) for b in bases.values() if b.source.kind == "path")}
    table = ref.options.config.agents.get(ref.name)
    configured = table.command if table is not None else None
    command = " ".join(c for c in (ref.options.agent_cmd, configured) if c)
    resolved = resolve_sandbox(choice, [*repos, ws.state_root, work_root], command)
    routed = ref.name == "builtin" or routes_through_gateway(ref.name)
    if resolved.decision.network == "on" and not routed and (url := loopback_url(base_url)):
        # The built-in agent calls its model from the harness, and an agent routed through the model gateway reaches
        # it through the gateway's socket; every other agent calls it from inside the sandbox.
        raise BadInputError(
            f"--base-url {public_url(url)} is on this host's loopback, which attempts cannot reach on a network of "
            "their own (--network on, the default); pass --network host to share the host's network with them"
        )
    decision = resolved.decision
    objects = unreadable_objects(ws.source.objects_dir, decision) if ws.source.objects_dir.is_dir() else None
    for warning in (decision.warning, *unwritable_shared(resolved.settings, decision), objects):
        if warning:
            observer.warning(warning)
    return resolved


def session_settings(
    loaded: LoadedSuite,
    meta: RunMeta,
    ws: ResolvedWorkspace,
    ref: AgentRef,
    work_root: Path,
    keep_worktrees: bool,
    bases: Mapping[str, TaskBase],
    store_dir: Path,
    sandbox: ResolvedSandbox,
    containers: ContainerPlan | None = None,
    reuse: Reusing | None = None,
) -> RunSettings:
    suite_dir = work_root / "suite"
    copy_bundle(loaded.path, loaded.files, suite_dir)
    spec = AttemptSpec(
        run_id=meta.id,
        suite_sha256=meta.suite_sha256,
        base_commit=meta.base_commit,
        source=_source_of(ws),
        agent=ref,
        verify_always=meta.config.verify_always,
        keep_worktrees=keep_worktrees,
        artifacts=meta.config.artifacts,
        suite_dir=str(suite_dir),
        artifacts_dir=str(store_dir),
        sandbox=sandbox.settings,
        sandbox_decision=sandbox.decision,
        grace_secs=meta.config.grace_secs,
        max_cost_per_attempt=meta.config.max_cost_per_attempt,
        suite_digest=meta.suite_bundle_sha256 or meta.suite_sha256,
        environment_cache=str(cache_dir() / "environments"),
        containers=containers,
        trajectories=meta.config.trajectories,
        agent_version=str(meta.agent_description.get("version") or "") or None,
        replays=reuse is not None and reuse.replays,
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
        sandbox_index=session_index(meta.sandboxes, sandbox.info) if _has(meta.sandboxes, sandbox.info) else 0,
        reuse=reuse,
    )


def _has(sandboxes: list[SandboxInfo], info: SandboxInfo) -> bool:
    return any(same_containment(s, info) for s in sandboxes)


def session_index(sandboxes: list[SandboxInfo], info: SandboxInfo) -> int:
    """Where this session's containment is in the run's list (the same containment again reuses its entry)."""
    for index, known in enumerate(sandboxes):
        if same_containment(known, info):
            return index
    raise ValueError("the session's containment is not in the run's list")


def with_session(sandboxes: list[SandboxInfo], info: SandboxInfo) -> list[SandboxInfo]:
    """The run's containments with this session's added when it is new."""
    return sandboxes if any(same_containment(s, info) for s in sandboxes) else [*sandboxes, info]


def _plan(settings: RunSettings, done: set[tuple[str, int]]) -> Iterator[AttemptJob]:
    """The attempts still to run, lazily: attempt 1 of every task first, then attempt 2, ...

    Tasks with different bases (repository, commit, environment) run one base after the other, so each
    worker's slot for a base is set up once and reused instead of being rebuilt for every other attempt.
    """
    groups: dict[str, list[Task]] = {}
    for task in settings.loaded.suite.tasks:
        base = settings.bases.get(task.id)
        groups.setdefault(base.key if base else "", []).append(task)
    reuse = settings.reuse
    for tasks in groups.values():
        for number in range(1, settings.meta.config.attempts + 1):
            for task in tasks:
                if (task.id, number) not in done:
                    job = AttemptJob(spec=settings.spec, task=task, attempt=number, base=settings.bases.get(task.id))
                    yield reuse.job(job) if reuse is not None else job


def session_concurrency(settings: RunSettings, executor: Executor, auto: AutoJobs | None) -> Concurrency:
    """A fixed level of ``meta.jobs``, or ``--jobs auto``'s from the fixed default (the earlier sessions' levels
    kept before this one's). On a cluster this machine's pressure says nothing about the workers': there the level
    follows the provider's 429s only."""
    if auto is None:
        return FixedLevel(settings.meta.jobs, settings.meta.concurrency)
    return AutoLevel(
        auto.max_jobs,
        auto.probe or HostProbe(),
        start=default_jobs(),
        earlier=settings.meta.concurrency,
        machine=isinstance(executor, LocalExecutor),
    )


def rate_limits_seen(executor: Executor) -> Callable[[], int] | None:
    """The running count of the provider's 429s at the executor's gateway, when it is in this process."""
    gateway = getattr(executor, "gateway", None)
    return (lambda: gateway.rate_limited) if isinstance(gateway, RunGateway) else None


def execute(
    settings: RunSettings,
    executor: Executor,
    store: RunStore,
    observer: RunObserver,
    done: list[AttemptRecord],
    budget: Budget | None = None,
    auto: AutoJobs | None = None,
) -> RunResult:
    meta = settings.meta
    task_ids = {t.id for t in settings.loaded.suite.tasks}
    earlier = [r for r in done if r.task_id in task_ids]
    done_keys = {(r.task_id, r.attempt) for r in earlier}
    done_keys |= settings.reuse.skipped() if settings.reuse is not None else set()
    budget = budget or Budget(None)
    budget.count([r for r in earlier if r.provenance is None], free=meta.config.agent in FREE_AGENTS)
    observer.begin(meta.id, meta.config.attempts * len(task_ids) - len(done_keys), len(earlier))
    # Each record is on disk once it exists: none is held while the run goes on (the envelope is built from the
    # store at the end), so a run of any length keeps the same memory.
    finished = [len(earlier)]
    del earlier
    gateway = getattr(executor, "gateway", None)
    if isinstance(gateway, RunGateway) and budget.max_cost is not None:
        gateway.limit_run(budget.max_cost, budget.total)  # live, over every model call: no attempt overshoots far
    scope = getattr(executor, "scope", None)
    if isinstance(scope, ProcessScope):  # an executor whose processes live in this one: record them for resume
        scope.journal = leftovers.Journal(store.dir)
    concurrency = session_concurrency(settings, executor, auto)
    if concurrency.adaptive:
        observer.concurrency(concurrency.level, "start")
    plan = _plan(settings, done_keys)
    status, error = _run_plan(settings, executor, store, observer, plan, finished, budget, concurrency)
    return _finished(settings, store, observer, status, error, budget, concurrency)


def _run_plan(
    settings: RunSettings,
    executor: Executor,
    store: RunStore,
    observer: RunObserver,
    plan: Iterator[AttemptJob],
    finished: list[int],
    budget: Budget,
    concurrency: Concurrency,
) -> tuple[RunStatus, str | None]:
    """Every attempt of ``plan`` run (or the run stopped or aborted), and the executor closed: how it ended."""
    status: RunStatus = "complete"
    error: str | None = None
    total = settings.meta.config.attempts * len(settings.loaded.suite.tasks)
    try:
        with sigterm_as_interrupt():
            try:
                error = _drain(settings, executor, store, observer, plan, finished, budget, concurrency)
                status = "aborted" if error else "complete"
                if not error and budget.stopped and finished[0] < total:
                    status = "stopped"
            except KeyboardInterrupt:
                status = "stopped"
                observer.stopping()
                executor.stop()
            if not executor.close(JOIN_TIMEOUT_SECS) and status == "stopped":
                # A worker is inside a step no signal ends (the harness's own work between processes): wait for
                # it, so its files can be removed after it; a second Ctrl-C ends everything at once.
                observer.stopping(waiting=True)
                executor.close(None)
    except KeyboardInterrupt:
        # A second Ctrl-C while cleaning up: end every process now and leave at once (no envelope).
        executor.stop()
        raise
    return status, error


def _finished(
    settings: RunSettings,
    store: RunStore,
    observer: RunObserver,
    status: RunStatus,
    error: str | None,
    budget: Budget,
    concurrency: Concurrency,
) -> RunResult:
    """The session's end: what the run learned stored in its meta, the envelope built from the store and written."""
    meta = settings.meta
    update: dict[str, Any] = {}
    if budget.info() is not None:
        update["budget"] = budget.info()
    if concurrency.info() is not None:
        update["concurrency"] = concurrency.info()
    if settings.reuse is not None:
        update["reuse"] = settings.reuse.info()
    if update:
        meta = meta.model_copy(update=update)
        store.write_meta(meta)
    stored = store.load_records(meta)
    if (warning := stored.warning()) is not None:
        observer.warning(warning)
    task_ids = {t.id for t in settings.loaded.suite.tasks}
    records = [r for r in stored.records if r.task_id in task_ids]
    envelope = envelope_from_records(meta, records, complete=status == "complete")
    store.write_envelope(envelope)
    return RunResult(
        envelope=envelope,
        status=status,
        store_dir=store.dir,
        kept_root=settings.work_root if settings.keep_worktrees else None,
        error=error,
        stop_reason=budget.stopped if status == "stopped" else None,
    )


def _drain(
    settings: RunSettings,
    executor: Executor,
    store: RunStore,
    observer: RunObserver,
    plan: Iterator[AttemptJob],
    finished: list[int],
    budget: Budget,
    concurrency: Concurrency,
) -> str | None:
    """Feed the executor lazily (``Scheduler``), persist each result as it arrives (counted in ``finished[0]``),
    decide retries; the abort reason or None."""
    meta = settings.meta
    scheduler = Scheduler(
        executor,
        plan,
        budget,
        jobs=concurrency,
        retry_errors=meta.retry_errors,
        rate_limits=rate_limits_seen(executor),
        on_level=observer.concurrency,
    )
    scheduler.begin()
    aborted: str | None = None
    for event in executor.events():
        scheduler.tick()
        job = event.job
        if job is None:
            continue
        if event.kind == "phase":
            observer.phase(job.task.id, job.attempt, event.phase or "")
        elif event.kind == "start":
            observer.start(job.task.id, job.attempt)
            scheduler.started()
        elif event.kind == "done":
            assert event.result is not None
            scheduler.finished(event.result)
            fatal = _done(settings, store, observer, scheduler, job, event.result, finished, budget)
            if fatal is not None and aborted is None:
                aborted = (
                    f"stopping the run: {fatal} (it would repeat on every attempt); "
                    f"finished attempts are stored in run {meta.id}"
                )
                scheduler.stop(executor=True)
    return aborted


def _done(
    settings: RunSettings,
    store: RunStore,
    observer: RunObserver,
    scheduler: Scheduler,
    job: AttemptJob,
    result: AttemptResult,
    finished: list[int],
    budget: Budget,
) -> str | None:
    """One attempt's result: the budget's cut, a replayed attempt's regrade (or its run instead), a retry, or its
    record persisted and counted; the message of a fatal error that must stop the run, else None."""
    if result.over_budget is not None:
        budget.cut(result.over_budget, result.record.cost_usd)
        if budget.limited:
            observer.spend(budget.total, budget.max_cost)
        scheduler.stop()
    elif job.replay is not None and settings.reuse is not None:
        if (regraded := settings.reuse.regraded(job, result)) is not None:
            store.append(regraded)
            finished[0] += 1
            observer.attempt(regraded)
            scheduler.recorded()
        elif (instead := settings.reuse.rerun(job)) is not None:
            scheduler.instead(instead)
    elif not scheduler.retried(job, result):
        record = _persist(settings, store, observer, job, result, scheduler.retry_reasons(job))
        finished[0] += 1
        budget.add(record, free=settings.meta.config.agent in FREE_AGENTS)
        if budget.limited:
            observer.spend(budget.total, budget.max_cost)
        observer.attempt(record)
        scheduler.recorded()
        return result.fatal.message if result.fatal is not None else None
    return None


def _persist(
    settings: RunSettings,
    store: RunStore,
    observer: RunObserver,
    job: AttemptJob,
    result: AttemptResult,
    retry_reasons: list[str],
) -> AttemptRecord:
    """The attempt's trace, artifacts and record written to the run store; the record as stored."""
    trace_path = write_trace(result.trace, settings.trace_dir)
    try:
        trace_ref = os.path.relpath(trace_path, settings.state_root)
    except ValueError:
        trace_ref = str(trace_path)
    index = settings.task_sandbox.get(job.task.id, settings.sandbox_index)
    update: dict[str, Any] = {"trace": trace_ref, "sandbox": index}
    if retry_reasons:
        update |= {"retries": len(retry_reasons), "retry_reasons": retry_reasons}
    if result.trajectory is not None:
        try:
            update["trajectory"] = write_trajectory(
                store.dir, settings.state_root, job.task.id, job.attempt, result.trajectory
            )
        except (OSError, ValueError) as exc:  # a full disk costs the trajectory, never the result
            observer.warning(f"could not store the trajectory of {job.task.id} #{job.attempt}: {exc}")
    if result.change is not None and result.record.change is not None:
        try:
            write_change(store.dir, job.task.id, job.attempt, result.change)
        except OSError as exc:  # a full disk costs the change (it cannot be regraded), never the result
            update["change"] = StoredChange(missing=f"it could not be stored: {exc.strerror or exc}")
    record = result.record.model_copy(update=update)
    if result.artifacts is not None:
        try:
            write_artifacts(store.dir, result.artifacts)
        except OSError as exc:  # a full disk costs the logs, never the result
            observer.warning(f"could not store the artifacts of {job.task.id} #{job.attempt}: {exc.strerror}")
    store.append(record)
    return record


def agent_of(config: RunConfig, base_url: str | None, user_config: Config) -> AgentRef:
    """The agent a run's config names, as data, configured from the merged user and project config. ``base_url`` is
    the one given now, credentials included (the config keeps it without them)."""
    return AgentRef(
        name=config.agent,
        options=AgentOptions(
            model=config.model,
            agent_cmd=config.agent_cmd,
            base_url=base_url,
            settings=dict(config.agent_settings),
            pass_env=tuple(config.pass_env),
            config=user_config,
        ),
    )


def new_budget(
    max_cost: float | None, allow_unpriced: bool, config: RunConfig, description: Mapping[str, Any]
) -> Budget:
    """The session's budget; refuses to start one that cannot be kept (the agent's model has no price)."""
    budget = Budget(max_cost, config.max_cost_per_attempt, allow_unpriced)
    limited = max_cost is not None or config.max_cost_per_attempt is not None
    if limited and not allow_unpriced and (why := unpriced_reason(config.agent, dict(description))):
        raise BadInputError(why)
    return budget


@dataclass(frozen=True)
class Session:
    """One session of a run, resolved before anything runs; the same for a new run and a resumed one."""

    run_id: str
    loaded: LoadedSuite
    ws: ResolvedWorkspace
    bases: Mapping[str, TaskBase]
    config: RunConfig
    """What the run measures (a new run's sandbox request is filled in once this machine's is resolved)."""
    ref: AgentRef
    sandbox: SandboxChoice | SandboxRequest
    containers: ContainerPlan | None
    jobs: int
    """The executor's workers: ``--jobs N``, or ``--jobs auto``'s ``--max-jobs``."""
    executor: ExecutorFactory
    keep_worktrees: bool
    max_cost: float | None
    allow_unpriced: bool
    auto: AutoJobs | None = None
    """``--jobs auto``; None: a fixed level of ``jobs``."""


@dataclass(frozen=True)
class SessionStart:
    """What a session found once its executor was up, for the run store's record of it."""

    work_root: Path
    description: dict[str, Any]
    sandbox: ResolvedSandbox
    budget: Budget
    containers: ContainerPlan | None
    """The run's container plan with the agent's tools in its images."""
    stack: contextlib.ExitStack
    """Closes what the record opened (a new run's store) when the session ends."""
    containment: Mapping[str, SandboxInfo] = field(default_factory=dict)
    """How each container task's attempts are contained (the run's sandbox is for the others)."""

    def main_sandbox(self) -> SandboxInfo:
        """``run.sandbox``: the weakest container's when every task runs in one, else the run's sandbox."""
        found = list(self.containment.values())
        return min(found, key=SandboxInfo.weakness) if found and len(found) == self.tasks else self.sandbox.info

    def sandboxes(self, earlier: list[SandboxInfo]) -> list[SandboxInfo]:
        """The run's containments with this session's added where new: the sandbox (when a task runs in it) and
        each container task's."""
        infos = list(self.containment.values())
        found = earlier
        for info in ([self.sandbox.info] if len(infos) < self.tasks else []) + infos:
            found = with_session(found, info)
        return found or [self.sandbox.info]

    tasks: int = 0
    """How many tasks the session runs."""


@dataclass(frozen=True)
class Recorded:
    """What the run store knows once told about the session: its store, the run's meta as of this session, the
    records already done, and (a run made from another run's attempts) what it reuses."""

    store: RunStore
    meta: RunMeta
    done: list[AttemptRecord]
    reuse: Reusing | None = None


Record = Callable[[SessionStart], Recorded]
"""Tells the run store about the session."""


def run_session(session: Session, observer: RunObserver, record: Record) -> RunResult:
    """Start the session's executor, preflight the agent there, resolve the sandbox, record the session and run
    what is missing."""
    factory, keep = session.executor, session.keep_worktrees
    with started(session.run_id, session.jobs, factory, keep) as (executor, root), contextlib.ExitStack() as stack:
        description = executor.preflight(session.ref)  # bad agent input is one line, before any sandbox warning
        containers = agent_tools_here(session.containers, executor, description, observer.warning)
        base_url = session.ref.options.base_url
        sandbox = resolve_run_sandbox(session.sandbox, base_url, session.ref, session.ws, root, session.bases, observer)
        if (line := unreachable_config(session.ref.name, description, sandbox.decision)) is not None:
            observer.warning(line)
        if (line := network_warning(containers, sandbox.settings.network)) is not None:
            observer.warning(line)
        budget = new_budget(session.max_cost, session.allow_unpriced, session.config, description)
        contained = containment(containers, sandbox.settings.network, sandbox.settings.limits)
        tasks = len(session.loaded.suite.tasks)
        told = record(SessionStart(root, description, sandbox, budget, containers, stack, contained, tasks))
        settings = session_settings(
            session.loaded, told.meta, session.ws, session.ref, root, keep, session.bases, told.store.dir, sandbox,
            containers, told.reuse,
        )  # fmt: skip
        indices = {task_id: session_index(told.meta.sandboxes, info) for task_id, info in contained.items()}
        settings = replace(settings, task_sandbox=indices)
        return execute(settings, executor, told.store, observer, done=told.done, budget=budget, auto=session.auto)
