"""A new run: its measured config frozen from the flags and the suite, its run store created, its session run.

``RunOptions`` is what a caller asks for (the CLI's flags, or a Python caller's values): what the run measures
(``measured_request`` turns those into ``RunConfig`` fields, the one place that maps them) and how it executes
(jobs, executor, retries, budget, kept worktrees, runtime, workspace). ``run_suite`` freezes the config, creates the
run store and hands the session to ``engine/session.py``, which a resumed run (``engine/resume.py``) shares.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from worktrial.agents import AgentOptions, create_agent
from worktrial.agents.base import Agent
from worktrial.engine.carry import Carrier, source_containments
from worktrial.engine.concurrency import Probe
from worktrial.engine.confine import SandboxChoice, requested_sandbox
from worktrial.engine.containers import plan_containers
from worktrial.engine.executor import AgentRef
from worktrial.engine.reuse import Mode, SourceRun, definition_parts, open_source_run, refuse_config
from worktrial.engine.reuse import plan as reuse_plan
from worktrial.engine.session import (
    ExecutorFactory,
    Jobs,
    Recorded,
    RunObserver,
    RunResult,
    Session,
    SessionStart,
    agent_of,
    check_counts,
    end_previous,
    local_executor,
    meta_concurrency,
    new_run_id,
    resolve_workspace,
    run_session,
    session_jobs,
    task_bases,
    with_session,
)
from worktrial.errors import BadInputError
from worktrial.isolation.container import RuntimeChoice
from worktrial.isolation.workspace import ensure_state_dir
from worktrial.model.config import Config
from worktrial.model.envelope import Selection, SuiteFileInfo
from worktrial.model.records import RETRYABLE_ERRORS
from worktrial.model.run_config import RunConfig, TimeoutMultipliers
from worktrial.model.selection import select
from worktrial.model.suite import LoadedSuite, load_suite
from worktrial.model.task_digest import task_digest
from worktrial.state.config import load_config
from worktrial.state.store import RunMeta, RunStore, TaskMeta, checked_run_id
from worktrial.util import public_url, utc_now

__all__ = [
    "ExecutorFactory",
    "RunObserver",
    "RunOptions",
    "RunResult",
    "agent_ref",
    "build_agent",
    "choose_agent_name",
    "local_executor",
    "measured_request",
    "run_suite",
]

INFRA_ERROR_CATEGORIES = RETRYABLE_ERRORS
"""Errors --retry-errors may run again (model.records.RETRYABLE_ERRORS, documented in docs/results.md)."""


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
    jobs: Jobs | None = None
    """--jobs: attempts at once, or ``auto`` (``engine/concurrency.py``); None: min(4, CPU cores)."""
    max_jobs: int | None = None
    """--max-jobs: the most attempts at once under --jobs auto (given alone, it means auto)."""
    probe: Probe | None = None
    """Where --jobs auto reads the machine's pressure and the time (tests, embedders); None: this machine."""
    retry_errors: int = 0
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
    force_build: bool = False
    """--force-build: a task that names an image and has a Dockerfile builds it instead of pulling it (Harbor's)."""
    verifier_room: Literal["task", "fresh"] = "task"
    """--verifier-room: container tasks verify where each says (Harbor's environment_mode), or all in a fresh room."""
    timeout_multipliers: TimeoutMultipliers = field(default_factory=TimeoutMultipliers)
    """--timeout-multiplier and the per-phase ones: every task's limits multiplied for the whole run."""
    trajectories: bool | None = None
    """--trajectories: store each attempt's redacted ATIF trajectory (None: ``[run] trajectories`` of the config)."""
    reuse: str | None = None
    """--reuse RUN: carry over that run's attempts where the task is unchanged, regrade them where only its verifier
    changed, run the rest (``engine/reuse.py``)."""


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


_OWN_RULE = ("agent", "base_url", "agent_settings", "sandbox")
"""Config fields ``measured_request`` reads its own way; every other one is the ``RunOptions`` field of its name."""


def measured_request(options: RunOptions) -> dict[str, Any]:
    """The config fields these options give, by name: an option counts as given when it differs from its default
    (the command line and the Python API are judged alike). A new run completes them into its frozen config
    (``frozen_config``); a resumed run compares them with its stored one (``RunConfig.differences``)."""
    defaults = RunOptions()
    given: dict[str, Any] = {
        name: getattr(options, name)
        for name in RunConfig.model_fields
        if name not in _OWN_RULE and getattr(options, name) != getattr(defaults, name)
    }
    if options.agent or options.agent_cmd or options.model:
        given["agent"] = choose_agent_name(options)
    if options.base_url is not None:
        given["base_url"] = public_url(options.base_url)
    if options.agent_settings:
        given["agent_settings"] = dict(options.agent_settings)
    request = requested_sandbox(options.sandbox)
    if request.model_fields_set:
        given["sandbox"] = request
    return given


def frozen_config(options: RunOptions, loaded: LoadedSuite) -> RunConfig:
    """What a new run measures: the options given, the suite's attempts, and the defaults. Its sandbox request is
    filled in once the session resolved it on this machine (``run_suite``)."""
    given = measured_request(options)
    attempts = options.attempts or loaded.suite.attempts
    given.pop("sandbox", None)
    return RunConfig(**{**given, "agent": choose_agent_name(options), "attempts": attempts, "k": options.k or attempts})


def run_suite(
    suite: LoadedSuite | str | Path, options: RunOptions | None = None, observer: RunObserver | None = None
) -> RunResult:
    """Run every task of a suite ``attempts`` times and return the result (also for stopped or aborted runs).

    ``worktrial.engine.resume.resume_run`` continues a stored run instead.
    """
    options = options or RunOptions()
    observer = observer or RunObserver()
    loaded = suite if isinstance(suite, LoadedSuite) else load_suite(suite)
    loaded, selection = select(loaded, options.tasks, options.categories, options.limit)
    loaded = options.timeout_multipliers.apply(loaded)
    config = frozen_config(options, loaded)
    jobs, auto = session_jobs(options.jobs, options.max_jobs, options.probe)
    check_counts(config.attempts, config.k, jobs, options.retry_errors, max_jobs=options.max_jobs)
    ws = resolve_workspace(loaded, options.workspace, options.base_commit)
    user_config = load_config(ws.state_root)
    if options.trajectories is None and user_config.run.trajectories:  # what no flag said: the config's [run]
        config = config.model_copy(update={"trajectories": True})
    source = _reused(options, ws.state_root, config)
    ref = agent_of(config, options.base_url, user_config)
    if ws.dirty:
        observer.warning(
            f"{ws.source.path} has uncommitted changes; they are not part of the base commit "
            f"{ws.base_commit[:12]} that every attempt starts from"
        )
    bases = task_bases(loaded, ws)
    containers = plan_containers(
        loaded,
        options.container_runtime,
        observer.warning,
        force_build=options.force_build,
        verifier_room=options.verifier_room,
    )
    end_previous(ws.state_root, observer)
    session = Session(
        new_run_id(), loaded, ws, bases, config, ref, options.sandbox, containers, jobs, options.executor,
        options.keep_worktrees, options.max_cost, options.allow_unpriced, auto,
    )  # fmt: skip

    def record(start: SessionStart) -> Recorded:
        meta = new_meta(session, selection, start, options.base_url, options.retry_errors)
        return create_store(session, meta, start, observer, ("reuse", source) if source is not None else None)

    return run_session(session, observer, record)


def create_store(
    session: Session,
    meta: RunMeta,
    start: SessionStart,
    observer: RunObserver,
    reusing: tuple[Mode, SourceRun] | None = None,
) -> Recorded:
    """A new run's store, with each task's definition digest in its meta; made from another run's attempts
    (``reusing``), with what it carries over already stored."""
    ensure_state_dir(session.ws.state_root)
    images = start.containers.images() if start.containers is not None else {}
    parts = definition_parts(session.loaded, session.bases, images)
    tasks = [t.model_copy(update={"digest": task_digest(parts[t.id]), "parts": parts[t.id]}) for t in meta.tasks]
    meta = meta.model_copy(update={"tasks": tasks})
    plan = None
    if reusing is not None:
        mode, source = reusing
        if mode == "reuse":
            refuse_config(source.meta.id, source.meta.config, meta.config)
        plan = reuse_plan(mode, source, session.loaded, parts, meta.config)
        sandboxes = meta.sandboxes
        for info in source_containments(plan):
            sandboxes = with_session(sandboxes, info)
        meta = meta.model_copy(update={"reuse": plan.info(), "sandboxes": sandboxes})
    store = start.stack.enter_context(contextlib.closing(RunStore.create(session.ws.state_root, meta)))
    if plan is None:
        return Recorded(store, meta, [])
    trace_dir = session.ws.state_root / ".worktrial" / "eval" / "traces" / meta.id
    carrier = Carrier(plan, session.loaded, store, meta, session.ws.state_root, trace_dir, observer.warning)
    return Recorded(store, meta, carrier.carry(), carrier)


def _reused(options: RunOptions, state_root: Path, config: RunConfig) -> SourceRun | None:
    """The run ``--reuse`` names, refused up front when it measured something else (its containment is compared
    once this machine's is resolved)."""
    if options.reuse is None:
        return None
    if options.executor is not local_executor:
        raise BadInputError("--reuse runs on this machine (the stored changes it regrades are here); drop --executor")
    source = open_source_run(state_root, checked_run_id(options.reuse, "--reuse"))
    refuse_config(source.meta.id, source.meta.config, config)
    return source


def new_meta(
    session: Session, selection: Selection | None, start: SessionStart, base_url: str | None, retry_errors: int
) -> RunMeta:
    """A new run's record: its suite, workspace, agent, containment and frozen config."""
    loaded, ws = session.loaded, session.ws
    return RunMeta(
        id=session.run_id,
        started_at=utc_now(),
        suite_path=str(loaded.path.resolve()),
        suite_display_path=_display_path(loaded.path),
        suite_sha256=loaded.sha256,
        suite_bundle_sha256=loaded.digest,
        suite_files=[SuiteFileInfo(name=f.name, sha256=f.sha256, size=f.size) for f in loaded.files],
        suite_id=loaded.suite.id,
        suite_name=loaded.suite.display_name,
        tasks=[
            TaskMeta(id=t.id, name=t.display_name, category=t.category, cluster=t.cluster) for t in loaded.suite.tasks
        ],
        workspace=str(ws.state_root),
        source_repo=str(ws.source.path),
        base_commit=ws.base_commit,
        dirty=ws.dirty,
        dirty_excluded=list(ws.dirty_excluded),
        task_base_commits={task_id: base.commit for task_id, base in session.bases.items()},
        agent_description=start.description,
        base_url_redacted=bool(base_url) and public_url(base_url or "") != base_url,
        jobs=session.jobs,
        concurrency=meta_concurrency(None, session.auto),
        retry_errors=retry_errors,
        work_root=str(start.work_root),
        selection=selection,
        sandbox=start.main_sandbox(),
        sandboxes=start.sandboxes([]),
        environment_images=start.containers.images() if start.containers is not None else {},
        budget=start.budget.info(),
        config=session.config.model_copy(update={"sandbox": start.sandbox.request}),
    )


def _display_path(path: Path) -> str:
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
    return str(path)
