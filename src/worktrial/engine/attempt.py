"""One attempt: private worktree -> setup -> agent -> verify -> an AttemptResult (record and trace, as data)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from worktrial.agents.base import Agent, AgentContext, AgentError, AgentOutput, AgentResult
from worktrial.agents.credentials import preset_credentials
from worktrial.agents.prompt import prompt_file_env, write_prompt_file
from worktrial.engine import containers
from worktrial.engine.executor import AttemptJob, AttemptResult, AttemptSpec, TaskBase
from worktrial.engine.model_gateway import apply_report, open_session
from worktrial.engine.verify import VerifyResult, run_verify
from worktrial.errors import WorktrialError
from worktrial.isolation import childenv, overlay, ownership, proc, safefs, verifier
from worktrial.isolation.alternates import read_alternates
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.isolation.environment import ENV_OBJECTS, EnvironmentSetupError, run_setup
from worktrial.isolation.patch import PatchData, agent_patch
from worktrial.isolation.pool import AdminSnapshot, AgentChange, Slot, admin_snapshot, remove_files
from worktrial.isolation.proc import ProcResult, run_command
from worktrial.isolation.sandbox import AttemptView, Sandbox, decide, open_sandbox
from worktrial.isolation.workspace import AttemptWorkspace, SourceRepo, create_attempt_workspace, remove_tree
from worktrial.model.artifacts import (
    COMMAND_TAIL_BYTES,
    PATCH_MAX_BYTES,
    AttemptArtifacts,
    CommandLog,
    Patch,
    StreamTail,
)
from worktrial.model.commands import Command, display
from worktrial.model.records import AttemptRecord, ErrorCategory, Outcome, Usage
from worktrial.model.suite import SUITE_DIR_ENV, Task
from worktrial.model.trace import build_trace, trace_filename
from worktrial.redaction import Redactor

if TYPE_CHECKING:
    from worktrial.gateway import Gateway

# An agent that returns this long after its deadline overran it, whatever it says.
DEADLINE_GRACE_SECS = 2.0


def suite_env(spec: AttemptSpec, root: Path) -> dict[str, str]:
    """The environment of environment setup, setup and verify commands: a minimal one (never the caller's keys)
    plus ``$WORKTRIAL_SUITE_DIR`` (never the agent's).

    ``HOME`` is a new, empty directory in the attempt's scratch directory under ``root``, made for this phase:
    verification never runs with a home the agent could have prepared (a ``usercustomize.py``, a ``.gitconfig``
    alias), since it did not exist while the agent ran.
    """
    extra = {**spec.env, SUITE_DIR_ENV: spec.suite_dir} if spec.suite_dir else dict(spec.env)
    return childenv.command_env(os.environ, root / "scratch" / f"home-{uuid.uuid4().hex[:12]}", extra)


def pass_env_patterns(spec: AttemptSpec) -> tuple[str, ...]:
    """What the user let the agent under test see besides its own provider's keys (--pass-env, ``pass_env``)."""
    options = spec.agent.options
    table = options.config.agents.get(spec.agent.name)
    return (*options.pass_env, *(table.pass_env if table is not None else ()))


def attempt_redactor(spec: AttemptSpec, env: Mapping[str, str]) -> Redactor:
    """Every secret of the harness's and the attempt's environment, and the value of every variable the agent was
    given beyond the allow-list, whatever its name: --pass-env's, a preset's providers' (``DATABASE_URL``, a proxy
    URL with a password, an endpoint with a token in it)."""
    patterns = (*pass_env_patterns(spec), *preset_credentials(spec.agent.name))
    names = [name for name in os.environ if childenv.matches(name, patterns)]
    return Redactor.from_environment(os.environ, env, names=names)


def environment_cache(spec: AttemptSpec) -> EnvironmentCache | None:
    return EnvironmentCache(Path(spec.environment_cache)) if spec.environment_cache else None


def setup_log(spec: AttemptSpec) -> Path | None:
    """A new file for one environment setup's output, kept with the run's records."""
    if not spec.artifacts_dir:
        return None
    return Path(spec.artifacts_dir) / "environment" / f"setup-{uuid.uuid4().hex[:10]}.log"


def attempt_sandbox(spec: AttemptSpec, ws: AttemptWorkspace, source: SourceRepo | None) -> Sandbox:
    """The sandbox of one attempt (or one slot's environment setup): its worktree, private git dir and scratch
    writable, the borrowed objects read-only, HOME fresh inside scratch. Not yet prepared."""
    scratch = ws.root / "scratch"
    scratch.mkdir(exist_ok=True)
    # The objects of a prepared environment's base commit (a suite inside the repository is hidden by one) live
    # next to the private git dir: without them git cannot read HEAD, so nothing that commits works.
    # Made before environment setup commits into it, so that its git (in this sandbox) reads what it moved there.
    (ws.root / ENV_OBJECTS).mkdir(exist_ok=True)
    borrowed = [source.objects_dir] if source is not None else []
    borrowed.append(ws.root / ENV_OBJECTS)
    view = AttemptView(
        writable=(ws.worktree, ws.git_dir, scratch),
        readonly=tuple(borrowed),
        home=scratch / "home",
        scratch=scratch,
        private=ws.root / SANDBOX_ETC,
        overlay=ws.layers,
    )
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return open_sandbox(spec.sandbox, decision, view)


@dataclass(frozen=True)
class Start:
    """Where an attempt's worktree started: the commit (after environment setup) and the store its objects are in
    (with the workspace's own ``env-objects``), as the harness knows them, never as the agent's repository says."""

    commit: str
    objects: Path | None
    snapshot: AdminSnapshot | None = None
    """The private repository's administrative state as the harness left it, for the verifier's room."""


SANDBOX_ETC = "sandbox-etc"
"""Next to the worktree, where only the harness writes: the files the sandbox sees in place of the host's /etc ones."""


def _container_sandbox(
    spec: AttemptSpec, task: Task, ws: AttemptWorkspace, source: SourceRepo | None
) -> containers.ContainerSandbox | None:
    """A container task's sandbox: its image, the run's network and limits (docs/environments.md)."""
    settings = spec.sandbox
    return containers.container_sandbox(
        spec.containers,
        task,
        ws,
        source,
        network=settings.network,
        max_memory=settings.limits.max_memory,
        max_procs=settings.limits.max_procs,
    )


def sandbox_owner(spec: AttemptSpec) -> int | None:
    """The uid the attempt's trees must belong to: the one its sandboxed programs run as when the harness is root."""
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.uid if decision.kind == "bubblewrap" else None


def slot_overlay(spec: AttemptSpec, agent: Agent, base: TaskBase | None = None) -> bool:
    """Whether a slot gives each attempt an overlay room (``isolation/overlay.py``): the sandbox is bubblewrap, the
    kernel mounts overlays in it, and every file the agent reads or writes goes through a sandboxed program (an
    agent that works on files from the harness's own process, like the builtin agent's tools, sees the host, where
    the room is never mounted). Never for a container task: its containers mount the worktree from the host."""
    if base is not None and base.container:
        return False
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.kind == "bubblewrap" and bool(getattr(agent, "sandboxed_files", False)) and overlay.usable()


def _harness_scope(scope: proc.ProcessScope | None, sandbox: Sandbox, spec: AttemptSpec) -> proc.ProcessScope:
    """Setup and verify run in the attempt's sandbox and also see the suite's declared files read-only."""
    shown = sandbox.widened([Path(spec.suite_dir)]) if spec.suite_dir else sandbox
    return (scope or proc.ProcessScope()).confined(shown)


def slot_preparer(
    base: TaskBase, spec: AttemptSpec, scope: proc.ProcessScope | None
) -> Callable[[AttemptWorkspace], str] | None:
    """What a slot runs once on its fresh checkout: the task base's environment setup, committed as the base."""
    if not base.prepared:
        return None

    def prepare(ws: AttemptWorkspace) -> str:
        sandbox = attempt_sandbox(spec, ws, _borrowed(base, ws))
        try:
            sandbox.prepare()
            return _environment_setup(spec, base, ws, sandbox, scope)
        finally:
            sandbox.cleanup()

    return prepare


def _environment_setup(
    spec: AttemptSpec, base: TaskBase, ws: AttemptWorkspace, sandbox: Sandbox, scope: proc.ProcessScope | None
) -> str:
    """The task base's environment setup on a fresh checkout, in the attempt's sandbox with a home of its own
    (removed afterwards); the commit it made the base."""
    env = suite_env(spec, ws.root)
    try:
        return run_setup(
            ws,
            base.environment,
            env,
            scope=_harness_scope(scope, sandbox, spec),
            log=setup_log(spec) if base.environment else None,
            hide=base.hide,
            cache=environment_cache(spec),
        )
    finally:
        remove_tree(Path(env["HOME"]))


def _borrowed(base: TaskBase, ws: AttemptWorkspace) -> SourceRepo | None:
    """The repository whose objects the workspace borrows (read from its alternates file)."""
    try:
        objects = read_alternates(ws.git_dir)
    except OSError:
        return None
    return (
        SourceRepo(path=Path(base.source.location), objects_dir=Path(objects[0]), shallow_file=None)
        if objects
        else None
    )


def deadline_env(timeout_secs: float, grace_secs: float) -> dict[str, str]:
    """The deadline contract every agent gets: when it will be sent SIGTERM (Unix seconds), how long it had, and
    the grace between SIGTERM and SIGKILL."""
    return {
        "WORKTRIAL_DEADLINE": str(int(time.time() + timeout_secs)),
        "WORKTRIAL_TIMEOUT_SECS": str(int(timeout_secs)) if float(timeout_secs).is_integer() else str(timeout_secs),
        "WORKTRIAL_GRACE_SECS": f"{grace_secs:g}",
    }


def _over_cost_cap(ctx: AgentContext, result: AgentResult) -> str | None:
    """Why the attempt ended at its cost cap (streamed, or found once the agent ended), or None."""
    cap = ctx.cost_cap
    if cap is None:
        return None
    spent = result.usage.cost_usd
    if ctx.cancel.is_set() or (spent is not None and spent > cap):
        said = f"spent ${spent:.4f}" if spent is not None else "its spend passed the cap as it streamed"
        return f"agent ended at its cost cap: {said}, over --max-cost-per-attempt ${cap:g}"
    return None


def _decide(task: Task, result: AgentResult, overran: bool) -> tuple[Outcome, str | None, bool]:
    """Outcome before verification, its reason, and whether verification decides it."""
    if result.timed_out or overran:
        return "timeout", f"agent exceeded its {task.timeout_secs}s timeout", False
    if result.error is not None:
        return "error", result.error.message, False
    if result.claimed is True:
        return "pass", None, True
    if result.claimed is False:
        return "fail", f"agent claimed failure{': ' + result.reason if result.reason else ''}", False
    return "fail", f"agent made no claim{': ' + result.reason if result.reason else ''}", False


@dataclass
class _Progress:
    """What an attempt has found out so far; filled in step by step."""

    outcome: Outcome = "error"
    reason: str | None = None
    error_category: ErrorCategory | None = None
    usage: Usage = field(default_factory=Usage)
    agent_secs: float = 0.0
    verify_secs: float = 0.0
    claimed: bool | None = None
    verified: bool | None = None
    fatal: AgentError | None = None
    over_budget: str | None = None
    """Why the run's ``--max-cost`` (kept at the gateway) cut the attempt short: it is not the attempt's result."""
    commands: list[CommandLog] = field(default_factory=list)
    output: AgentOutput | None = None
    patch: PatchData | None = None
    agent_ran: bool = False
    agent_ended: str | None = None
    reward: float | None = None
    """A container task's reward file (Harbor's verifiers): 1 passes."""
    agent_start: float | None = None
    """When the agent started (monotonic): setup is everything before, the attempt's duration everything after."""


def run_attempt(
    agent: Agent,
    job: AttemptJob,
    source: SourceRepo,
    work_root: Path,
    *,
    slot: Slot | None = None,
    scope: proc.ProcessScope | None = None,
    worker: str | None = None,
    on_phase: Callable[[str], None] | None = None,
    gateway: Gateway | None = None,
) -> AttemptResult:
    """Run one attempt to an outcome; never raises for anything the task or agent does.

    With a ``slot`` the attempt reuses that pooled workspace (reset first); without one it gets a fresh
    workspace of its own under ``work_root``, removed afterwards unless worktrees are kept. The trace comes
    back as data: the driver writes it and sets the record's ``trace`` path. With a ``gateway`` the attempt gets a
    session there (``AgentContext.gateway``), and what the gateway saw decides usage and provider failures.
    """
    task, attempt, spec = job.task, job.attempt, job.spec
    scope = scope or proc.ProcessScope()
    start = time.monotonic()
    root = work_root / f"{trace_filename(task.id, attempt)[:-5]}-{uuid.uuid4().hex[:8]}"
    env = childenv.agent_env(proc.clean_env(None), spec.env)
    progress = _Progress()
    workspace: AttemptWorkspace | None = None
    sandbox: Sandbox | None = None
    try:
        try:
            if slot is not None:
                workspace = slot.acquire()
                origin = Start(slot.base_commit, slot.source.objects_dir, slot.snapshot)
            else:
                base = job.resolved_base()
                workspace = create_attempt_workspace(source, base.commit, root)
                ownership.hand_over(workspace.root, sandbox_owner(spec))
                origin = Start(base.commit, source.objects_dir)
            sandbox = _container_sandbox(spec, task, workspace, source) or attempt_sandbox(spec, workspace, source)
            sandbox.prepare()
            if slot is None and base.prepared:
                origin = Start(_environment_setup(spec, base, workspace, sandbox, scope), source.objects_dir)
                ownership.hand_over(workspace.root, sandbox_owner(spec))
            if slot is None:
                origin = replace(origin, snapshot=admin_snapshot(workspace))
        except EnvironmentSetupError as exc:
            progress.reason, progress.error_category = str(exc).splitlines()[0], ErrorCategory.ENVIRONMENT
            progress.fatal = AgentError(ErrorCategory.ENVIRONMENT, str(exc), fatal=True)
        except (WorktrialError, OSError) as exc:
            progress.reason, progress.error_category = f"worktree creation failed: {exc}", ErrorCategory.WORKTREE
        else:
            _run_in(
                agent,
                job,
                workspace,
                env,
                progress,
                scope,
                sandbox,
                on_phase or (lambda _phase: None),
                slot,
                origin,
                gateway,
            )
    finally:
        if sandbox is not None:
            sandbox.cleanup()
        if slot is None and not spec.keep_worktrees:
            remove_tree(root)
        elif slot is None and sandbox_owner(spec) is not None:
            # A kept worktree is the user's to inspect: back to the harness's uid (the kernel clears any set-uid
            # bit the agent left on a file whose owner changes), so git there needs no safe.directory.
            ownership.hand_over(root, os.geteuid())
    end = time.monotonic()
    setup_end = progress.agent_start if progress.agent_start is not None else end
    setup_secs, duration = round(setup_end - start, 3), round(end - setup_end, 3)
    redactor = attempt_redactor(spec, env)  # one per attempt: building it scans the environment
    _sanitise(progress, redactor)
    usage = progress.usage
    trace = build_trace(
        task_id=task.id,
        attempt=attempt,
        outcome=progress.outcome,
        duration_secs=duration,
        agent_secs=round(progress.agent_secs, 3),
        verify_secs=round(progress.verify_secs, 3),
        usage=usage,
        setup_secs=setup_secs,
    )
    record = AttemptRecord(
        task_id=task.id,
        attempt=attempt,
        outcome=progress.outcome,
        claimed=progress.claimed,
        verified=progress.verified,
        reason=progress.reason,
        duration_secs=duration,
        agent_secs=round(progress.agent_secs, 3),
        verify_secs=round(progress.verify_secs, 3),
        setup_secs=setup_secs,
        cost_usd=usage.cost_usd,
        tokens=usage.tokens,
        turns=usage.turns,
        tool_calls=usage.tool_calls if usage.tool_counts or usage.turns is not None else None,
        error_category=progress.error_category,
        worktree=str(workspace.worktree) if spec.keep_worktrees and workspace else None,
        model=usage.model,
        agent_ended=progress.agent_ended,
        reward=progress.reward,
    )
    artifacts = _artifacts(task.id, attempt, progress, redactor) if spec.artifacts else None
    return AttemptResult(
        record=record,
        trace=trace,
        fatal=progress.fatal,
        worker=worker,
        artifacts=artifacts,
        over_budget=progress.over_budget,
    )


MAX_REASON_CHARS = 1000
MAX_NAME_CHARS = 200


def _sanitise(progress: _Progress, redactor: Redactor) -> None:
    """Agent-controlled text that goes into the record and trace: bounded and with every secret value redacted.

    A shell error can echo an API key (``$OPENAI_API_KEY: not found``), and a usage file can use one as a tool
    name; neither may reach the run store, the envelope or the report.
    """

    def clean(text: str, limit: int) -> str:
        text = redactor.redact(text)[0]
        return text if len(text) <= limit else text[: limit - 3] + "..."

    if progress.reason is not None:
        progress.reason = clean(progress.reason, MAX_REASON_CHARS)
    usage = progress.usage
    usage.tool_counts = {clean(k, MAX_NAME_CHARS): v for k, v in usage.tool_counts.items()}
    usage.error_counts = {clean(k, MAX_NAME_CHARS): v for k, v in usage.error_counts.items()}
    usage.notes = [clean(note, MAX_REASON_CHARS) for note in usage.notes]
    if usage.model is not None:
        usage.model = clean(usage.model, MAX_NAME_CHARS)


def _command_log(phase: Literal["setup", "verify"], index: int, command: Command, result: ProcResult) -> CommandLog:
    output = result.stdout_tail + (b"\n" if result.stdout_tail and result.stderr_tail else b"") + result.stderr_tail
    return CommandLog(
        phase=phase,
        index=index,
        command=display(command),
        exit_code=result.returncode,
        timed_out=result.timed_out,
        duration_secs=round(result.duration_secs, 3),
        output_tail=output[-COMMAND_TAIL_BYTES:].decode("utf-8", "replace"),
        output_bytes=result.output_bytes,
    )


def _artifacts(task_id: str, attempt: int, progress: _Progress, redactor: Redactor) -> AttemptArtifacts:
    """The attempt's logs and patch, with every secret of the harness's and the attempt's environment redacted."""
    count = 0

    def clean(text: str) -> str:
        nonlocal count
        text, found = redactor.redact(text)
        count += found
        return text

    def stream(data: bytes, total: int) -> StreamTail:
        return StreamTail(text=clean(data.decode("utf-8", "replace")), total_bytes=total, truncated=total > len(data))

    commands = [
        c.model_copy(update={"output_tail": clean(c.output_tail), "command": clean(c.command)})
        for c in progress.commands
    ]
    output = progress.output
    patch = progress.patch
    return AttemptArtifacts(
        task_id=task_id,
        attempt=attempt,
        commands=commands,
        agent_stdout=stream(output.stdout, output.stdout_bytes) if output else None,
        agent_stderr=stream(output.stderr, output.stderr_bytes) if output else None,
        patch=Patch(
            diff=clean(patch.diff.decode("utf-8", "replace")),
            total_bytes=patch.total_bytes,
            truncated=patch.truncated,
            files=[clean(f) for f in patch.files],
        )
        if patch
        else None,
        redactions=count,
    )


def _run_in(
    agent: Agent,
    job: AttemptJob,
    workspace: AttemptWorkspace,
    env: dict[str, str],
    progress: _Progress,
    run_scope: proc.ProcessScope,
    sandbox: Sandbox,
    on_phase: Callable[[str], None],
    slot: Slot | None,
    start: Start,
    gateway: Gateway | None = None,
) -> None:
    """Setup, agent and verification inside a created workspace, every process inside the attempt's sandbox;
    ``on_phase`` hears each step begin."""
    task = job.task
    scratch = workspace.root / "scratch"
    scope = _harness_scope(run_scope, sandbox, job.spec)
    if task.setup_commands:
        on_phase("setup")
        harness_env = suite_env(job.spec, workspace.root)
        try:
            for i, command in enumerate(task.setup_commands, start=1):
                setup = run_command(
                    command,
                    cwd=workspace.worktree,
                    env=harness_env,
                    timeout=task.verify_timeout_secs,
                    scope=scope,
                    tail_bytes=COMMAND_TAIL_BYTES,
                )
                progress.commands.append(_command_log("setup", i, command, setup))
                if setup.limit:
                    progress.reason, progress.error_category = setup.limit, ErrorCategory.LIMIT
                    return
                if not setup.ok:
                    progress.reason = f"setup failed: {setup.describe_failure(f'step {i} ({display(command)})')}"
                    progress.error_category = ErrorCategory.SETUP
                    return
        finally:
            remove_tree(Path(harness_env["HOME"]))  # the agent starts with a scratch directory of its own

    try:
        prompt_file = write_prompt_file(scratch, task.prompt)
    except OSError as exc:  # disk full: the harness's problem, not the agent's
        progress.reason, progress.error_category = (
            f"prompt file could not be written: {exc.strerror}",
            ErrorCategory.WORKTREE,
        )
        return
    on_phase("agent")
    agent_start = progress.agent_start = time.monotonic()
    deadline = agent_start + task.timeout_secs  # the agent's timeout starts now, after every setup
    cancel = threading.Event()
    # A task's container has no forwarder of its own yet: its agents call their providers directly, as before.
    routable = gateway is not None and not isinstance(sandbox, containers.ContainerSandbox)
    session = open_session(gateway, job.spec, cancel) if gateway is not None and routable else None
    # The gateway's unix socket (and the forwarder next to it) is what a sandbox with a network of its own reaches
    # the model through: shown read-only to the agent's processes, useless without the attempt's token.
    agent_sandbox = sandbox.widened([session.socket_dir]) if session is not None and session.socket_dir else sandbox
    ctx = AgentContext(
        task=task,
        attempt=job.attempt,
        worktree=workspace.worktree,
        deadline=deadline,
        env={**env, **prompt_file_env(prompt_file), **deadline_env(task.timeout_secs, job.spec.grace_secs)},
        credentials=childenv.withheld(proc.clean_env(None)),
        scratch=scratch,
        scope=run_scope.confined(agent_sandbox),
        suite_dir=Path(job.spec.suite_dir) if job.spec.suite_dir else None,
        prompt_file=prompt_file,
        grace_secs=job.spec.grace_secs,
        cancel=cancel,
        cost_cap=job.spec.max_cost_per_attempt,
        gateway=session,
    )
    report = None
    try:
        result = agent.run(ctx)
    except Exception as exc:  # an agent bug must cost one attempt, not the run
        result = AgentResult(
            claimed=None, error=AgentError(ErrorCategory.CRASHED, f"agent crashed: {type(exc).__name__}: {exc}")
        )
    finally:
        if session is not None:
            report = session.report()
            session.close()  # its token is worthless from now on
    if report is not None:
        apply_report(result, report, job.spec.agent.name)
    progress.agent_secs = time.monotonic() - agent_start
    if isinstance(sandbox, containers.ContainerSandbox):
        sandbox.end_containers()  # the verifier starts only once every agent container is gone
    progress.usage = result.usage
    progress.output = result.output
    progress.agent_ended = result.ended
    # What the agent changed, found once in O(the change) (its room's upper directory, or one walk of the
    # slot's checkout): the patch, and the ignored files neither the patch nor the verifier's room keeps.
    change: AgentChange | None = None
    if slot is not None:
        change = slot.agent_change(PATCH_MAX_BYTES if job.spec.artifacts else None)
    untouched = change is not None and change.untouched
    if job.spec.artifacts:
        # Taken before verification, which may leave caches behind that are not the agent's work.
        if change is not None:
            progress.patch = change.patch
        elif slot is None or not slot.overlay:
            borrowed = [p for p in (start.objects, workspace.root / ENV_OBJECTS) if p is not None and p.is_dir()]
            progress.patch = agent_patch(workspace, start.commit, PATCH_MAX_BYTES, borrowed)
    overran = time.monotonic() > deadline + DEADLINE_GRACE_SECS  # an in-process agent gets no SIGTERM grace
    progress.outcome, progress.reason, verify_decides = _decide(task, result, overran)
    if hit := sandbox.limit_hit():
        progress.outcome, progress.reason, progress.error_category, progress.claimed = (
            "error",
            hit,
            ErrorCategory.LIMIT,
            None,
        )
        return
    if report is not None and report.over_budget is not None:
        # The run's budget ended the agent, not its work or the provider: no verdict, and the driver keeps no record.
        progress.outcome, progress.reason, progress.claimed = "error", report.over_budget, None
        progress.over_budget = report.over_budget
        return
    if report is not None and (failure := report.failure) is not None:
        # The provider failed, not the agent: never scored as the agent's work (and a fatal one stops the run).
        progress.outcome, progress.error_category, progress.claimed = "error", failure.category, None
        progress.reason = f"model gateway: {failure.message}"
        if failure.fatal:
            progress.fatal = AgentError(failure.category, progress.reason, fatal=True)
        return
    if (capped := _over_cost_cap(ctx, result)) is not None:
        # Spending past the cap is the agent's failure to solve the task within it, like a timeout is: no verdict.
        progress.outcome, progress.reason, progress.claimed = "fail", capped, None
        return
    progress.claimed = None if progress.outcome == "timeout" else result.claimed
    if result.error is not None and progress.outcome == "error":
        progress.error_category = result.error.category
        if result.error.fatal:
            progress.fatal = result.error
    timeout_verified = progress.outcome == "timeout" and task.on_timeout == "verify"
    if verify_decides or timeout_verified or (job.spec.verify_always and progress.outcome in ("fail", "timeout")):
        on_phase("verify")
        verify_tree = workspace.worktree
        if task.verify_in != "worktree" and start.snapshot is not None:
            try:
                head = verifier.agent_head(workspace, start.snapshot.admin)
                room = workspace
                if slot is not None and slot.overlay:
                    room = slot.verifier_room(change.ignored if change is not None else [])
                elif change is not None:
                    _remove_ignored(workspace, change.ignored)
                kept = slot.index_id if slot is not None else None
                index = verifier.enter(
                    room,
                    start.snapshot,
                    head,
                    start.commit,
                    untouched,
                    sandbox_owner(job.spec),
                    clean=change is None,
                    index_id=kept,
                )
                if slot is not None:
                    slot.index_id = index
            except WorktrialError as exc:  # what the agent left cannot be verified (a replaced worktree or git dir)
                progress.outcome, progress.verified = "fail", False
                progress.reason = f"nothing to verify: the agent's worktree or repository is not the harness's ({exc})"
                return
            except OSError as exc:  # the harness's own trouble (a full disk)
                progress.outcome, progress.error_category, progress.claimed = "error", ErrorCategory.WORKTREE, None
                progress.reason = f"the verifier's room could not be built: {exc.strerror or exc}"
                return
            shown = [p for p in (job.spec.suite_dir, workspace.root / verifier.AGENT_OBJECTS) if p]
            room_sandbox = sandbox.in_room(workspace.worktree, room.worktree, room.layers)
            scope = run_scope.confined(room_sandbox.widened([Path(p) for p in shown]))
            verify_tree = room.worktree
        if slot is not None:
            slot.ran_in_place()
        harness_env = suite_env(job.spec, workspace.root)  # a home made after the agent ended
        scope, reward_dir = containers.verifier_scope(scope, job.spec.suite_dir, scratch)
        check: VerifyResult = run_verify(task, verify_tree, harness_env, scope, tail_bytes=COMMAND_TAIL_BYTES)
        if reward_dir is not None:  # a reward file decides, not the verifier's exit status (Harbor's convention)
            progress.reward, missing = containers.read_reward(reward_dir)
            if not any(run.timed_out for run in check.runs):
                won = progress.reward == 1
                why = missing or f"the verifier's reward is {progress.reward:g}, not 1"
                check = replace(check, passed=won, reason=None if won else f"verify failed: {why}")
        progress.commands += [
            _command_log("verify", i, command, run)
            for i, (command, run) in enumerate(zip(task.verify_commands, check.runs, strict=False), start=1)
        ]
        progress.verify_secs = check.secs
        progress.verified = check.passed
        if verify_decides and not check.passed:
            progress.outcome, progress.reason = "fail", check.reason


def _remove_ignored(ws: AttemptWorkspace, ignored: list[str]) -> None:
    """Copying path: the new untracked files the tree ignores leave the worktree before verification, as
    ``git clean -X`` would remove them, without its walk of the whole tree."""
    if ignored:
        with safefs.opened_dir(ws.worktree, ws.worktree_id) as work_fd:
            remove_files(work_fd, ignored)
