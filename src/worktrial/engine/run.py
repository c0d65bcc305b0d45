"""A whole run: resolve the workspace and agent, plan the attempts, drain the executor's events, clean up.

One run is one scope: its settings are one frozen ``RunSettings``, its processes live in its executor's
``ProcessScope``, and what the caller wants to hear about it goes to a ``RunObserver``. Nothing here touches
process-wide state or exits the interpreter: ``run_suite`` returns a ``RunResult`` whose ``status`` the CLI
maps to an exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
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
from worktrial.engine.budget import FREE_AGENTS, Budget, unpriced_reason
from worktrial.engine.confine import (
    ResolvedSandbox,
    SandboxChoice,
    loopback_url,
    resolve_sandbox,
    unreadable_objects,
    unwritable_shared,
)
from worktrial.engine.containers import plan_containers, with_agent_tools
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptSpec, Executor, RepoSource, TaskBase
from worktrial.engine.local import LocalExecutor
from worktrial.engine.model_gateway import RunGateway, routes_through_gateway
from worktrial.errors import BadInputError, WorkspaceError
from worktrial.isolation import cgroups
from worktrial.isolation.container import ContainerPlan, RuntimeChoice
from worktrial.isolation.proc import ProcessScope
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
from worktrial.model.envelope import Envelope, SandboxInfo, SuiteFileInfo, same_containment
from worktrial.model.records import RETRYABLE_ERRORS, AttemptRecord
from worktrial.model.run_config import DEFAULT_GRACE_SECS, RunConfig, SandboxRequest
from worktrial.model.selection import select
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
    grace_secs: float | None = None
    """--grace-secs: between SIGTERM at an agent's deadline and SIGKILL (None: ``DEFAULT_GRACE_SECS``)."""
    max_cost_per_attempt: float | None = None
    """--max-cost-per-attempt (USD): an attempt whose spend passes it ends as a failure."""
    max_cost: float | None = None
    """--max-cost (USD) for the run: no attempt starts once it would likely be passed; may change on resume."""
    allow_unpriced: bool = False
    """--allow-unpriced: a budget counts unknown costs as $0 instead of refusing them."""
    container_runtime: RuntimeChoice = "auto"
    """--runtime: the container CLI for tasks with a container environment (docker, podman, auto)."""


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
class ResolvedWorkspace:
    """Where a run's attempts start from and where it is stored."""

    state_root: Path
    source: SourceRepo
    base_commit: str
    dirty: bool


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
    dirty = is_dirty(repo) if user_repo and not (pin and pin.ref) else False
    return ResolvedWorkspace(state_root=root, source=open_source(repo), base_commit=base, dirty=dirty)


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


def _source_of(ws: ResolvedWorkspace) -> RepoSource:
    return RepoSource("path", str(ws.source.path))


def frozen_config(options: RunOptions, agent: str, attempts: int, k: int, sandbox: SandboxRequest) -> RunConfig:
    """What a new run measures, from its flags (the suite's attempts already applied)."""
    return RunConfig(
        agent=agent,
        agent_cmd=options.agent_cmd,
        model=options.model,
        base_url=public_url(options.base_url) if options.base_url else None,
        agent_settings=dict(options.agent_settings),
        pass_env=tuple(options.pass_env),
        attempts=attempts,
        k=k,
        verify_always=options.verify_always,
        artifacts=options.artifacts,
        label=options.label,
        tasks=tuple(options.tasks),
        categories=tuple(options.categories),
        limit=options.limit,
        grace_secs=DEFAULT_GRACE_SECS if options.grace_secs is None else options.grace_secs,
        max_cost_per_attempt=options.max_cost_per_attempt,
        sandbox=sandbox,
    )


def new_budget(options: RunOptions, config: RunConfig, agent: str, description: Mapping[str, Any]) -> Budget:
    """The session's budget; refuses to start one that cannot be kept (the agent's model has no price)."""
    budget = Budget(options.max_cost, config.max_cost_per_attempt, options.allow_unpriced)
    limited = options.max_cost is not None or config.max_cost_per_attempt is not None
    if limited and not options.allow_unpriced and (why := unpriced_reason(agent, dict(description))):
        raise BadInputError(why)
    return budget


def config_fields(config: RunConfig) -> dict[str, Any]:
    """The flat run.json fields the config decides (kept for readers of runs stored before the config existed)."""
    return {
        "agent": config.agent,
        "agent_cmd": config.agent_cmd,
        "model": config.model,
        "base_url": config.base_url,
        "agent_settings": dict(config.agent_settings),
        "pass_env": list(config.pass_env),
        "attempts": config.attempts,
        "k": config.k,
        "verify_always": config.verify_always,
        "label": config.label,
        "artifacts": config.artifacts,
        "config": config,
    }


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
        from worktrial.engine.resume import resume_run  # resume builds on this module

        return resume_run(options.resume, options, loaded, observer)
    loaded, selection = select(loaded, options.tasks, options.categories, options.limit)
    attempts, k, jobs = _validate_counts(loaded, options)
    ws = resolve_workspace(loaded, options.workspace, options.base_commit)
    ref = agent_ref(options, load_config(ws.state_root))
    if ws.dirty:
        observer.warning(
            f"{ws.source.path} has uncommitted changes; they are not part of the base commit "
            f"{ws.base_commit[:12]} that every attempt starts from"
        )
    bases = task_bases(loaded, ws)
    containers = plan_containers(loaded, options.container_runtime, observer.warning)
    end_previous(ws.state_root, observer)
    run_id = new_run_id()
    with started(run_id, jobs, options) as (executor, work_root):
        description = executor.preflight(ref)  # bad agent input is one line, before any sandbox warning
        refuse_remote(containers, executor)
        containers = with_agent_tools(containers, description, observer.warning)
        sandbox = resolve_run_sandbox(options.sandbox, options.base_url, ref, ws, work_root, bases, observer)
        config = frozen_config(options, ref.name, attempts, k, sandbox.request)
        budget = new_budget(options, config, ref.name, description)
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
            agent_description=description,
            base_url_redacted=bool(options.base_url) and public_url(options.base_url or "") != options.base_url,
            jobs=jobs,
            retry_errors=options.retry_errors,
            work_root=str(work_root),
            selection=selection,
            sandbox=sandbox.info,
            sandboxes=[sandbox.info],
            environment_images=containers.images() if containers is not None else {},
            budget=budget.info(),
            **config_fields(config),
        )
        store = RunStore.create(ws.state_root, meta)
        try:
            settings = session_settings(
                loaded, meta, ws, ref, work_root, options.keep_worktrees, bases, store.dir, sandbox, containers
            )
            return execute(settings, executor, store, observer, done=[], budget=budget)
        finally:
            store.close()


def refuse_remote(plan: ContainerPlan | None, executor: Executor) -> None:
    """Container tasks run where their images were built: on this machine, with the local executor."""
    if plan is not None and not isinstance(executor, LocalExecutor):
        raise BadInputError(
            "tasks with a container environment run on this machine only (their images are built here); "
            "drop --executor ray / --ray-address for this suite"
        )


def end_previous(state_root: Path, observer: RunObserver, own: Path | None = None) -> None:
    """Before anything runs: end what an earlier harness, killed with kill -9, left running here (one line)."""
    if (line := leftovers.describe(leftovers.end_previous(state_root, own=own))) is not None:
        observer.warning(line)
    if stale := cgroups.end_stale():  # what the signed record missed, or a killed run of another workspace
        observer.warning(f"ended {stale} process(es) left in the cgroup of a worktrial killed with kill -9")


@contextlib.contextmanager
def started(run_id: str, jobs: int, options: RunOptions) -> Iterator[tuple[Executor, Path]]:
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
        sandbox=sandbox.settings,
        sandbox_decision=sandbox.decision,
        grace_secs=meta.config.grace_secs if meta.config is not None else DEFAULT_GRACE_SECS,
        max_cost_per_attempt=meta.config.max_cost_per_attempt if meta.config is not None else None,
        suite_digest=meta.suite_bundle_sha256 or meta.suite_sha256,
        environment_cache=str(cache_dir() / "environments"),
        containers=containers,
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
        sandbox_index=session_index(meta.sandboxes, sandbox.info),
    )


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
    for tasks in groups.values():
        for number in range(1, settings.meta.attempts + 1):
            for task in tasks:
                if (task.id, number) not in done:
                    yield AttemptJob(spec=settings.spec, task=task, attempt=number, base=settings.bases.get(task.id))


def execute(
    settings: RunSettings,
    executor: Executor,
    store: RunStore,
    observer: RunObserver,
    done: list[AttemptRecord],
    budget: Budget | None = None,
) -> RunResult:
    meta = settings.meta
    task_ids = {t.id for t in settings.loaded.suite.tasks}
    earlier = [r for r in done if r.task_id in task_ids]
    done_keys = {(r.task_id, r.attempt) for r in earlier}
    budget = budget or Budget(None)
    budget.count(earlier, free=meta.agent in FREE_AGENTS)
    observer.begin(meta.id, meta.attempts * len(task_ids) - len(done_keys), len(earlier))
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
    status: RunStatus = "complete"
    error: str | None = None
    try:
        with sigterm_as_interrupt():
            try:
                error = _drain(settings, executor, store, observer, _plan(settings, done_keys), finished, budget)
                status = "aborted" if error else "complete"
                if not error and budget.stopped and finished[0] < meta.attempts * len(task_ids):
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
    if budget.info() is not None:
        meta = meta.model_copy(update={"budget": budget.info()})
        store.write_meta(meta)
    stored = store.load_records()
    if (warning := stored.warning()) is not None:
        observer.warning(warning)
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
) -> str | None:
    """Feed the executor lazily, persist each result as it arrives (counted in ``finished[0]``), decide retries; the
    abort reason or None.

    Under a budget only ``jobs`` attempts are in flight (none queued ahead), and each new one starts only while
    the budget allows it; once it does not, the running ones finish and nothing else starts.
    """
    meta = settings.meta
    stopping = False
    in_flight = 0
    free = meta.agent in FREE_AGENTS

    def feed(count: int) -> None:
        nonlocal in_flight, stopping
        for _ in range(count):
            if budget.limited and not budget.allows_start(in_flight):
                stopping = True
                return
            job = next(plan, None)
            if job is None:
                return
            executor.submit(job)
            in_flight += 1

    feed(meta.jobs if budget.limited else 2 * meta.jobs)
    retry_reasons: dict[tuple[str, int], list[str]] = {}
    aborted: str | None = None
    for event in executor.events():
        job = event.job
        if event.kind == "phase":
            observer.phase(job.task.id, job.attempt, event.phase or "")
            continue
        if event.kind == "start":
            observer.start(job.task.id, job.attempt)
            if not stopping and not budget.limited:
                feed(1)  # keep the queue topped up, never the whole plan in memory
            continue
        assert event.result is not None
        in_flight -= 1
        result = event.result
        record = result.record
        if result.over_budget is not None:
            budget.cut(result.over_budget, record.cost_usd)
            if budget.limited:
                observer.spend(budget.total, budget.max_cost)
            stopping = True
            continue
        reasons = retry_reasons.pop(job.key, [])  # kept only while the attempt may run again
        if (
            record.outcome == "error"
            and record.error_category in INFRA_ERROR_CATEGORIES
            and len(reasons) < meta.retry_errors
            and result.fatal is None
            and not stopping
            and (not budget.limited or budget.allows_start(in_flight))
        ):
            reasons.append(record.reason or record.error_category or "error")
            retry_reasons[job.key] = reasons
            executor.submit(dataclasses.replace(job, try_number=job.try_number + 1))
            in_flight += 1
            continue
        trace_path = write_trace(result.trace, settings.trace_dir)
        try:
            trace_ref = os.path.relpath(trace_path, settings.state_root)
        except ValueError:
            trace_ref = str(trace_path)
        update: dict[str, Any] = {"trace": trace_ref, "sandbox": settings.sandbox_index}
        if reasons:
            update |= {"retries": len(reasons), "retry_reasons": list(reasons)}
        record = record.model_copy(update=update)
        if result.artifacts is not None:
            try:
                write_artifacts(store.dir, result.artifacts)
            except OSError as exc:  # a full disk costs the logs, never the result
                observer.warning(f"could not store the artifacts of {job.task.id} #{job.attempt}: {exc.strerror}")
        store.append(record)
        finished[0] += 1
        budget.add(record, free=free)
        if budget.limited:
            observer.spend(budget.total, budget.max_cost)
        observer.attempt(record)
        if budget.limited:
            if budget.stopped is not None:
                stopping = True
            elif not stopping:
                feed(meta.jobs - in_flight)
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
