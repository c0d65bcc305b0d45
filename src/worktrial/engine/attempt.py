"""One attempt: a checkout -> setup -> agent -> verify -> an AttemptResult (record and trace, as data).

The attempt is a short story over its ``Checkout`` (``engine/checkout.py``): prepare the agent's room, run the
setup commands and the agent there, ask the checkout what the agent changed, judge, and verify in the room the
checkout gives for it. Each phase returns what it found; an attempt that ends early returns what it has so far.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from worktrial.agents.base import Agent, AgentContext, AgentError, AgentResult
from worktrial.agents.credentials import preset_credentials
from worktrial.agents.prompt import prompt_file_env, write_prompt_file
from worktrial.engine import containers, trajectory
from worktrial.engine.checkout import Checkout, Room, open_checkout, suite_env
from worktrial.engine.container_checkout import SetupFailed
from worktrial.engine.executor import AttemptJob, AttemptResult, AttemptSpec, Replay
from worktrial.engine.model_gateway import PROVIDER_CATEGORIES, apply_report, open_session
from worktrial.engine.verify import VerifyResult, run_verify
from worktrial.errors import WorktrialError
from worktrial.gateway import GatewayReport, Session
from worktrial.isolation import childenv, proc
from worktrial.isolation.change import AgentChange
from worktrial.isolation.environment import EnvironmentSetupError
from worktrial.isolation.patch import CHANGE_MAX_BYTES, PatchData, apply_change, change_result, holds_gitlink
from worktrial.isolation.pool import Slot
from worktrial.isolation.proc import ProcResult, run_command
from worktrial.isolation.workspace import SourceRepo, remove_tree
from worktrial.model.artifacts import (
    COMMAND_TAIL_BYTES,
    PATCH_MAX_BYTES,
    AttemptArtifacts,
    CommandLog,
    Patch,
    StreamTail,
)
from worktrial.model.commands import Command, display
from worktrial.model.records import AttemptRecord, ErrorCategory, Outcome, StoredChange, Usage
from worktrial.model.suite import Task
from worktrial.model.trace import build_trace
from worktrial.redaction import Redactor
from worktrial.safe_read import read_input

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from worktrial.gateway import Gateway

# An agent that returns this long after its deadline overran it, whatever it says.
DEADLINE_GRACE_SECS = 2.0


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


def deadline_env(timeout_secs: float, grace_secs: float) -> dict[str, str]:
    """The deadline contract every agent gets: when it will be sent SIGTERM (Unix seconds), how long it had, and
    the grace between SIGTERM and SIGKILL."""
    return {
        "WORKTRIAL_DEADLINE": str(int(time.time() + timeout_secs)),
        "WORKTRIAL_TIMEOUT_SECS": str(int(timeout_secs)) if float(timeout_secs).is_integer() else str(timeout_secs),
        "WORKTRIAL_GRACE_SECS": f"{grace_secs:g}",
    }


@dataclass(frozen=True)
class Verdict:
    """How the attempt ended, as far as it got: the record's outcome fields."""

    outcome: Outcome = "error"
    reason: str | None = None
    error_category: ErrorCategory | None = None
    claimed: bool | None = None
    verified: bool | None = None
    fatal: AgentError | None = None
    over_budget: str | None = None
    """Why the run's ``--max-cost`` (kept at the gateway) cut the attempt short: it is not the attempt's result."""
    reward: float | None = None
    """A container task's reward file (Harbor's verifiers): 1 passes."""
    rewards: dict[str, float] | None = None
    """Every key of a reward.json with several (the task's success rule decides ``reward``)."""
    unreplayed: str | None = None
    """A replayed job whose stored change could not be rebuilt: why (no verdict at all)."""


@dataclass(frozen=True)
class AgentRun:
    """The agent's phase: what it returned (the gateway's report applied), when it started and how it ended."""

    result: AgentResult
    started: float
    """Monotonic: setup is everything before, the attempt's duration everything after."""
    secs: float
    overran: bool
    """It returned well after its deadline (an in-process agent gets no SIGTERM grace)."""
    capped: str | None
    """Why it ended at its cost cap, or None."""
    report: GatewayReport | None
    trajectory: trajectory.Collected | None = None
    """The conversation with the model as recorded (``--trajectories``), sealed once the redactor is known."""


@dataclass(frozen=True)
class Findings:
    """Everything one attempt found, however far it got."""

    verdict: Verdict
    commands: tuple[CommandLog, ...] = ()
    agent: AgentRun | None = None
    patch: PatchData | None = None
    verify_secs: float = 0.0
    verifier_room: str | None = None
    """Where a container task's verifier ran (``shared``, ``separate``, ``fresh``); None for other tasks."""


def run_attempt(
    agent: Agent,
    job: AttemptJob,
    source: SourceRepo,
    work_root: Path,
    *,
    slot: Slot[Any] | None = None,
    scope: proc.ProcessScope | None = None,
    worker: str | None = None,
    on_phase: Callable[[str], None] | None = None,
    gateway: Gateway | None = None,
) -> AttemptResult:
    """Run one attempt to an outcome; never raises for anything the task or agent does.

    With a ``slot`` the attempt reuses that pooled checkout (reset first); without one it gets a fresh checkout
    of its own under ``work_root``, removed afterwards unless worktrees are kept. The trace comes back as data: the
    driver writes it and sets the record's ``trace`` path. With a ``gateway`` the attempt gets a session there
    (``AgentContext.gateway``), and what the gateway saw decides usage and provider failures.
    """
    started = time.monotonic()
    env = childenv.agent_env(proc.clean_env(None), job.spec.env)
    on_phase = on_phase or (lambda _phase: None)
    on_phase("setup")  # everything before the agent is setup: the checkout, the environment, setup_commands
    checkout = open_checkout(job, source, work_root, slot, scope or proc.ProcessScope())
    try:
        findings = _attempt(agent, job, checkout, env, on_phase, gateway)
    finally:
        checkout.release()
    ended = time.monotonic()
    redactor = attempt_redactor(job.spec, env)  # one per attempt: building it scans the environment
    return _result(job, findings, started, ended, redactor, worker, checkout.kept)


def _attempt(
    agent: Agent,
    job: AttemptJob,
    checkout: Checkout,
    env: dict[str, str],
    on_phase: Callable[[str], None],
    gateway: Gateway | None,
) -> Findings:
    try:
        room = checkout.prepare()
    except EnvironmentSetupError as exc:
        fatal = AgentError(ErrorCategory.ENVIRONMENT, str(exc), fatal=True)
        return Findings(Verdict(reason=str(exc).splitlines()[0], error_category=ErrorCategory.ENVIRONMENT, fatal=fatal))
    except SetupFailed as exc:  # the task's container never became ready for the agent (its healthcheck)
        return Findings(Verdict(reason=f"setup failed: {exc}", error_category=ErrorCategory.SETUP))
    except (WorktrialError, OSError) as exc:
        return Findings(Verdict(reason=f"worktree creation failed: {exc}", error_category=ErrorCategory.WORKTREE))
    return _run_in(agent, job, checkout, room, env, on_phase, gateway)


def _run_in(
    agent: Agent,
    job: AttemptJob,
    checkout: Checkout,
    room: Room,
    env: dict[str, str],
    on_phase: Callable[[str], None],
    gateway: Gateway | None,
) -> Findings:
    """Setup, agent and verification in a prepared checkout, every process inside its rooms' sandboxes;
    ``on_phase`` hears each step begin. A replayed job rebuilds its stored change instead of setup and agent."""
    commands: tuple[CommandLog, ...] = ()
    if job.replay is not None:
        replayed = _replayed(job.replay, room)
        if isinstance(replayed, Verdict):
            return Findings(replayed)
        ran = replayed
    else:
        commands, failed = _setup(job, room)
        if failed is not None:
            return Findings(failed, commands)
        try:
            prompt_file = write_prompt_file(room.scratch, job.task.prompt)
        except OSError as exc:  # disk full: the harness's problem, not the agent's
            why = f"prompt file could not be written: {exc.strerror}"
            return Findings(Verdict(reason=why, error_category=ErrorCategory.WORKTREE), commands)
        on_phase("agent")
        ran = _run_agent(agent, job, room, env, prompt_file, gateway)
    # What the agent changed, found once (in O(the change) where the checkout can): the patch, and the ignored files
    # neither the patch nor the verifier's room keeps. Taken before verification, which may leave caches behind.
    change = checkout.change(PATCH_MAX_BYTES if job.spec.artifacts else None)
    verdict, decides = _judge(job, ran, room.sandbox.limit_hit())
    found = Findings(verdict, commands, ran, change.patch, verifier_room=getattr(checkout, "verifier_mode", None))
    if decides is None:
        return found
    on_phase("verify")
    return _verified(job, checkout, change, found, decides)


def _replayed(replay: Replay, room: Room) -> AgentRun | Verdict:
    """The stored change rebuilt in the agent's room, as the agent's run ended then (no agent runs); a Verdict
    saying why it cannot be (the attempt is then no verdict: ``unreplayed``)."""
    started = time.monotonic()
    try:
        data = read_input(Path(replay.change), CHANGE_MAX_BYTES, follow_symlinks=False)
    except (OSError, ValueError) as exc:
        return _unreplayed(f"its stored change cannot be read ({exc})")
    if hashlib.sha256(data).hexdigest() != replay.sha256:
        return _unreplayed("its stored change was altered after the run (its digest is not the signed one)")
    try:
        apply_change(room.worktree, data)
    except (WorktrialError, OSError) as exc:
        return _unreplayed(f"its stored change does not apply to the task's base any more: {exc}")
    result = AgentResult(claimed=None if replay.timed_out else replay.claimed, timed_out=replay.timed_out)
    return AgentRun(result, started, 0.0, overran=False, capped=None, report=None)


def _unreplayed(why: str) -> Verdict:
    return Verdict(reason=why, error_category=ErrorCategory.WORKTREE, unreplayed=why)


def _setup(job: AttemptJob, room: Room) -> tuple[tuple[CommandLog, ...], Verdict | None]:
    """The task's setup commands in the agent's room, with a home of their own; how it ended if it failed."""
    task = job.task
    if not task.setup_commands:
        return (), None
    env = suite_env(job.spec, room.scratch)
    logs: list[CommandLog] = []
    try:
        for i, command in enumerate(task.setup_commands, start=1):
            ran = run_command(
                command,
                cwd=room.worktree,
                env=env,
                timeout=task.verify_timeout_secs,
                scope=room.scope,
                tail_bytes=COMMAND_TAIL_BYTES,
            )
            logs.append(_command_log("setup", i, command, ran))
            if ran.limit:
                return tuple(logs), Verdict(reason=ran.limit, error_category=ErrorCategory.LIMIT)
            if not ran.ok:
                why = f"setup failed: {ran.describe_failure(f'step {i} ({display(command)})')}"
                return tuple(logs), Verdict(reason=why, error_category=ErrorCategory.SETUP)
    finally:
        remove_tree(Path(env["HOME"]))  # the agent starts with a scratch directory of its own
    return tuple(logs), None


def _run_agent(
    agent: Agent, job: AttemptJob, room: Room, env: dict[str, str], prompt_file: Path, gateway: Gateway | None
) -> AgentRun:
    task, spec = job.task, job.spec
    started = time.monotonic()
    deadline = started + task.timeout_secs  # the agent's timeout starts now, after every setup
    cancel = threading.Event()
    reached = gateway is not None and room.sandbox.reaches_gateway
    session = open_session(gateway, spec, cancel, room.sandbox) if gateway is not None and reached else None
    # The gateway's unix socket (and the forwarder next to it) is what a sandbox with a network of its own reaches
    # the model through: shown read-only to the agent's processes, useless without the attempt's token.
    shown = [session.socket_dir] if session is not None and session.socket_dir else []
    recording = trajectory.start(spec, session)
    ctx = AgentContext(
        task=task,
        attempt=job.attempt,
        worktree=room.worktree,
        deadline=deadline,
        env={**env, **prompt_file_env(prompt_file), **deadline_env(task.timeout_secs, spec.grace_secs)},
        credentials=childenv.withheld(proc.clean_env(None)),
        scratch=room.scratch,
        scope=room.agent_scope(shown),
        suite_dir=Path(spec.suite_dir) if spec.suite_dir else None,
        prompt_file=prompt_file,
        grace_secs=spec.grace_secs,
        cancel=cancel,
        cost_cap=spec.max_cost_per_attempt,
        gateway=session,
        trajectory=recording.log if recording is not None else None,
    )
    result, report = _call(agent, ctx, session)
    if report is not None:
        report = apply_report(result, report, spec.agent.name, task.timeout_secs)
    ended = time.monotonic()
    overran = ended > deadline + DEADLINE_GRACE_SECS
    collected = _collected(spec, recording, session, room.scratch, result)
    return AgentRun(result, started, ended - started, overran, _over_cost_cap(ctx, result), report, collected)


def _collected(
    spec: AttemptSpec,
    recording: trajectory.Recording | None,
    session: Session | None,
    scratch: Path,
    result: AgentResult,
) -> trajectory.Collected | None:
    """The trajectory as recorded, taken while the agent's scratch directory (and a file it wrote there) is still
    there; a recorder's bug costs the trajectory, never the attempt."""
    try:
        return trajectory.collect(spec, recording, session, scratch, result.usage.model)
    except Exception:
        log.warning("the attempt's trajectory could not be collected; it is not stored", exc_info=True)
        return None


def _call(agent: Agent, ctx: AgentContext, session: Session | None) -> tuple[AgentResult, GatewayReport | None]:
    """The agent's run (a crash of its code costs one attempt, not the run) and the gateway's report of it."""
    report = None
    try:
        result = agent.run(ctx)
    except Exception as exc:
        error = AgentError(ErrorCategory.CRASHED, f"agent crashed: {type(exc).__name__}: {exc}")
        result = AgentResult(claimed=None, error=error)
    finally:
        if session is not None:
            report = session.report()
            session.close()  # its token is worthless from now on
    return result, report


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


def _judge(job: AttemptJob, ran: AgentRun, limit: str | None) -> tuple[Verdict, bool | None]:
    """The verdict once the agent ended, and whether verification then decides it (True), only records what the
    verify commands say (False), or does not run (None)."""
    task, result = job.task, ran.result
    if (stopped := _stopped(ran, limit)) is not None:
        return stopped, None
    error = result.error
    if _reward_decides(job) and (error is None or not (error.fatal or error.category in PROVIDER_CATEGORIES)):
        # Harbor's rule (docs/environments.md): the tests run however the agent ended (no claim asked, a timeout or
        # a failed agent graded too) and the reward alone decides; a provider's failure is never the agent's work.
        timed_out = result.timed_out or ran.overran
        return Verdict("pass", claimed=None if timed_out else result.claimed), True
    outcome, reason, decides = _decide(task, result, ran.overran)
    error = error if outcome == "error" else None
    verdict = Verdict(
        outcome,
        reason,
        error.category if error is not None else None,
        claimed=None if outcome == "timeout" else result.claimed,
        fatal=error if error is not None and error.fatal else None,
    )
    if decides:
        return verdict, True
    diagnosed = job.spec.verify_always and outcome in ("fail", "timeout")
    return verdict, (False if (outcome == "timeout" and task.on_timeout == "verify") or diagnosed else None)


def _stopped(ran: AgentRun, limit: str | None) -> Verdict | None:
    """The verdict of an agent that something else ended (a limit, the run's budget, the provider, its spending
    cap), never graded: None when the agent's own work ended it."""
    report = ran.report
    if limit:
        return Verdict("error", limit, ErrorCategory.LIMIT)
    if report is not None and report.over_budget is not None:
        # The run's budget ended the agent, not its work or the provider: no verdict, and the driver keeps no record.
        return Verdict("error", report.over_budget, over_budget=report.over_budget)
    if report is not None and (failure := report.failure) is not None:
        # The provider failed, not the agent: never scored as the agent's work (and a fatal one stops the run).
        why = f"model gateway: {failure.message}"
        fatal = AgentError(failure.category, why, fatal=True) if failure.fatal else None
        return Verdict("error", why, failure.category, fatal=fatal)
    if ran.capped is not None:
        # Spending past the cap is the agent's failure to solve the task within it, like a timeout is: no verdict.
        return Verdict("fail", ran.capped)
    return None


def _reward_decides(job: AttemptJob) -> bool:
    plan = job.spec.containers
    return plan is not None and job.task.id in plan.tasks and plan.tasks[job.task.id].reward_decides


def _verified(job: AttemptJob, checkout: Checkout, change: AgentChange, found: Findings, decides: bool) -> Findings:
    """The verify commands in the room the checkout gives for them; what they say decides a claimed pass."""
    try:
        room = checkout.verifier_room(change)
    except WorktrialError as exc:  # what the agent left cannot be verified (a replaced worktree or git dir)
        why = f"nothing to verify: the agent's worktree or repository is not the harness's ({exc})"
        return replace(found, verdict=replace(found.verdict, outcome="fail", verified=False, reason=why))
    except OSError as exc:  # the harness's own trouble (a full disk)
        why = f"the verifier's room could not be built: {exc.strerror or exc}"
        failed = replace(
            found.verdict, outcome="error", error_category=ErrorCategory.WORKTREE, claimed=None, reason=why
        )
        return replace(found, verdict=failed)
    env = suite_env(job.spec, room.scratch)  # a home made after the agent ended
    check = run_verify(job.task, room.worktree, env, room.scope, tail_bytes=COMMAND_TAIL_BYTES)
    reward = containers.Reward(None)
    if room.reward_dir is not None:  # a reward file decides, not the verifier's exit status (Harbor's convention)
        reward, check = _rewarded(check, room.reward_dir)
    runs = zip(job.task.verify_commands, check.runs, strict=False)
    logs = [_command_log("verify", i, command, run) for i, (command, run) in enumerate(runs, start=1)]
    verdict = replace(found.verdict, verified=check.passed, reward=reward.value, rewards=reward.rewards)
    if decides and not check.passed:
        verdict = replace(verdict, outcome="fail", reason=check.reason)
    return replace(found, verdict=verdict, commands=(*found.commands, *logs), verify_secs=check.secs)


def _rewarded(check: VerifyResult, reward_dir: Path) -> tuple[containers.Reward, VerifyResult]:
    reward = containers.read_reward(reward_dir)
    if any(run.timed_out for run in check.runs):
        return reward, check
    won = reward.value == 1
    why = reward.problem or f"the verifier's reward is {reward.value:g}, not 1"
    return reward, replace(check, passed=won, reason=None if won else f"verify failed: {why}")


def _result(
    job: AttemptJob,
    findings: Findings,
    started: float,
    ended: float,
    redactor: Redactor,
    worker: str | None,
    kept: Path | None,
) -> AttemptResult:
    """The record, trace and artifacts of what the attempt found, every agent-controlled text bounded and redacted."""
    task, attempt, spec, ran = job.task, job.attempt, job.spec, findings.agent
    setup_end = ran.started if ran is not None else ended
    setup_secs, duration = round(setup_end - started, 3), round(ended - setup_end, 3)
    agent_secs, verify_secs = round(ran.secs if ran is not None else 0.0, 3), round(findings.verify_secs, 3)
    verdict, usage = _sanitised(findings.verdict, ran.result.usage if ran is not None else Usage(), redactor)
    change, stored = _stored_change(findings, redactor) if spec.artifacts else (None, None)
    timings = {
        "duration_secs": duration,
        "agent_secs": agent_secs,
        "verify_secs": verify_secs,
        "setup_secs": setup_secs,
    }
    trace = build_trace(task_id=task.id, attempt=attempt, outcome=verdict.outcome, usage=usage, **timings)
    record = AttemptRecord(
        task_id=task.id,
        attempt=attempt,
        outcome=verdict.outcome,
        claimed=verdict.claimed,
        verified=verdict.verified,
        reason=verdict.reason,
        **timings,
        cost_usd=usage.cost_usd,
        tokens=usage.tokens,
        turns=usage.turns,
        tool_calls=usage.tool_calls if usage.tool_counts or usage.turns is not None else None,
        error_category=verdict.error_category,
        worktree=str(kept) if kept is not None else None,
        model=usage.model,
        agent_ended=ran.result.ended if ran is not None else None,
        reward=verdict.reward,
        rewards=verdict.rewards,
        verifier_room=findings.verifier_room if findings.verdict.verified is not None else None,
        change=stored,
    )
    artifacts = _artifacts(task.id, attempt, findings, redactor) if spec.artifacts else None
    return AttemptResult(
        record=record,
        trace=trace,
        fatal=verdict.fatal,
        worker=worker,
        artifacts=artifacts,
        over_budget=verdict.over_budget,
        unreplayed=verdict.unreplayed,
        trajectory=_sealed_trajectory(ran.trajectory if ran is not None else None, redactor),
        change=change,
    )


def _stored_change(findings: Findings, redactor: Redactor) -> tuple[bytes | None, StoredChange | None]:
    """The agent's exact change to keep, and what the record says of it. Kept byte for byte or not at all: a change
    holding a secret value of the harness's or the attempt's environment is never stored (redacting it would make
    it another change). Credential-shaped strings that are no such value (a test's fake key) are the agent's code."""
    patch = findings.patch
    if findings.agent is None:
        return None, None  # the agent never ran: there is no change of its
    if patch is None:
        return None, StoredChange(missing="git could not produce the change")
    if patch.exact is None:
        return None, StoredChange(missing=patch.exact_missing or "not kept")
    if holds_gitlink(patch.exact):
        return None, StoredChange(missing="it holds a nested repository, which a patch records only as a commit id")
    result = change_result(patch.exact)
    if patch.exact and redactor.holds_value(patch.exact):
        why = "it holds a secret value of the environment, which the run store never keeps"
        return None, StoredChange(result=result, missing=why)
    digest = hashlib.sha256(patch.exact).hexdigest()
    return patch.exact, StoredChange(sha256=digest, size=len(patch.exact), result=result)


def _sealed_trajectory(collected: trajectory.Collected | None, redactor: Redactor) -> str | None:
    """The recorded trajectory, redacted and bounded; a recorder's bug costs the trajectory, never the attempt."""
    try:
        sealed = trajectory.seal_attempt(collected, redactor)
    except Exception:
        log.warning("the attempt's trajectory could not be sealed; it is not stored", exc_info=True)
        return None
    return sealed.text if sealed is not None else None


MAX_REASON_CHARS = 1000
MAX_NAME_CHARS = 200


def _sanitised(verdict: Verdict, usage: Usage, redactor: Redactor) -> tuple[Verdict, Usage]:
    """Agent-controlled text that goes into the record and trace: bounded and with every secret value redacted.

    A shell error can echo an API key (``$OPENAI_API_KEY: not found``), and a usage file can use one as a tool
    name; neither may reach the run store, the envelope or the report.
    """

    def clean(text: str, limit: int) -> str:
        text = redactor.redact(text)[0]
        return text if len(text) <= limit else text[: limit - 3] + "..."

    if verdict.reason is not None:
        verdict = replace(verdict, reason=clean(verdict.reason, MAX_REASON_CHARS))
    usage.tool_counts = {clean(k, MAX_NAME_CHARS): v for k, v in usage.tool_counts.items()}
    usage.error_counts = {clean(k, MAX_NAME_CHARS): v for k, v in usage.error_counts.items()}
    usage.notes = [clean(note, MAX_REASON_CHARS) for note in usage.notes]
    if usage.model is not None:
        usage.model = clean(usage.model, MAX_NAME_CHARS)
    return verdict, usage


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


def _artifacts(task_id: str, attempt: int, findings: Findings, redactor: Redactor) -> AttemptArtifacts:
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
        for c in findings.commands
    ]
    output = findings.agent.result.output if findings.agent is not None else None
    patch = findings.patch
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
            ignored=[clean(f) for f in patch.ignored],
        )
        if patch
        else None,
        redactions=count,
    )
