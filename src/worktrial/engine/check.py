"""``worktrial check``: validate a suite before anyone spends money on it.

Three runs and a lint pass. The ``oracle`` agent must pass every task that has a reference solution (else
the task is unsolvable or its verifier wrong); the ``nop`` agent must fail every task (a verifier that
passes an untouched worktree measures nothing); and each verifier is re-run several times on the oracle's
result, rebuilt on the task's own base (see ``check_rebuild``), so a verdict that changes without any change to
the files shows up as flaky, and the classic mistakes of suites for real repositories are named.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from worktrial.analysis.agent_code import NOTE as AGENT_CODE_NOTE
from worktrial.analysis.check_report import (
    FLAKE_RATE,
    CheckReport,
    TaskCheck,
    default_repeats,
    detection_probability,
    flake_upper_bound,
)
from worktrial.analysis.lint import Lint
from worktrial.analysis.suite_paths import static_lints
from worktrial.engine.check_rebuild import Rebuild, dirty_setup_message, rebuilder
from worktrial.engine.confine import SandboxChoice
from worktrial.engine.run import RunObserver, RunOptions, run_suite
from worktrial.engine.session import resolve_task_bases
from worktrial.isolation.container import RuntimeChoice
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.isolation.workspace import remove_tree
from worktrial.model.commands import display
from worktrial.model.envelope import Envelope, TaskReport
from worktrial.model.records import Outcome
from worktrial.model.suite import LoadedSuite, Task
from worktrial.state.artifacts import read_artifacts
from worktrial.state.config import cache_dir
from worktrial.util import plural

DEFAULT_REPEATS = default_repeats()
"""15: with the oracle's own verification, 16 verdicts catch a 10% flaky verifier with 81% probability per task."""


@dataclass(frozen=True)
class CheckPhase:
    """One phase of a check: the oracle's run, the nop's, the container tasks' re-runs, the verifier re-runs."""

    number: int
    of: int
    title: str
    """What it does, e.g. "running the oracle agent on 4 tasks"."""
    total: int
    """Its attempts (a run) or verifier re-runs."""


class CheckObserver:
    """What a caller hears while ``check`` runs (a progress display); every method is optional.

    Each phase is either a run of an agent, watched by the ``RunObserver`` that ``run`` gives, or the verifier
    re-runs on the oracle's rebuilt result, told by ``begin_reruns``, ``rerun`` per step and ``end_reruns``.
    """

    def warning(self, message: str) -> None:
        """Something the user should know that does not stop the check."""

    def run(self, phase: CheckPhase) -> contextlib.AbstractContextManager[RunObserver]:
        """The observer of a phase that runs an agent."""
        return contextlib.nullcontext(_Warnings(self.warning))

    def begin_reruns(self, phase: CheckPhase) -> None:
        """The verifier re-runs begin; ``phase.total`` of them (the probes after them are not counted)."""

    def rerun(self, task_id: str, activity: str, done: int) -> None:
        """On ``task_id`` now ``activity`` (``rebuilding``, ``re-run 3 of 15``, ``probing``); ``done`` re-runs of
        the phase's total have finished."""

    def end_reruns(self) -> None:
        """The verifier re-runs are over (also when one broke)."""


@dataclass
class CheckOptions:
    workspace: Path | None = None
    repeats: int = DEFAULT_REPEATS
    observer: CheckObserver = field(default_factory=CheckObserver)
    """Hears every phase as it runs: a progress display with counts and an ETA, and warnings."""
    sandbox: SandboxChoice = field(default_factory=SandboxChoice)
    jobs: int | Literal["auto"] | None = None
    """Attempts of the oracle and nop runs to run at once (default: as eval's)."""
    container_runtime: RuntimeChoice = "auto"
    """--runtime, for tasks with a container environment."""


def _flaky(task: Task, repeats: Rebuild, oracle_verified: bool | None) -> list[str]:
    """Every verify command whose verdict changed while the files it looked at did not."""
    problems: list[str] = []
    n = len(repeats.rounds)
    for i, command in enumerate(task.verify_commands):
        passes = sum(r[i] for r in repeats.rounds)
        if 0 < passes < n:
            problems.append(
                f"flaky verifier: verify_commands[{i}] ({display(command)}) passed {passes} of {n} re-runs "
                "on the oracle's unchanged result"
            )
    if problems or oracle_verified is None or not repeats.rounds:
        return problems
    passed = [all(r) for r in repeats.rounds]
    if oracle_verified and not any(passed):
        problems.append(f"flaky verifier: passed on the oracle's attempt but failed all {n} re-runs of its result")
    elif not oracle_verified and all(passed):
        problems.append(f"flaky verifier: failed on the oracle's attempt but passed all {n} re-runs of its result")
    return problems


def _first_attempt(report: TaskReport) -> tuple[Outcome, str | None, bool | None]:
    if not report.attempts:
        return "error", "not run", None
    a = report.attempts[0]
    return a.outcome, a.reason, a.verified


def _task_check(task: Task, oracle: TaskReport, nop: TaskReport, repeats: Rebuild | None, lints: int) -> TaskCheck:
    has_solution = bool(task.solution)
    o_outcome, o_reason, o_verified = _first_attempt(oracle)
    n_outcome, n_reason, _ = _first_attempt(nop)
    problems: list[str] = []
    if has_solution and o_outcome != "pass":
        problems.append(f"oracle does not pass ({o_outcome}: {o_reason or 'no reason'}): unsolvable or wrong verifier")
    if n_outcome == "pass":
        problems.append("passes with no change (nop agent): the verifier measures nothing")
    elif n_outcome == "error":
        problems.append(f"nop attempt errored: {n_reason or 'no reason'}")
    verdicts: list[bool] = []
    if repeats is not None:
        if repeats.error and o_outcome == "pass":
            # The oracle's own attempt succeeded, so a failing rebuild means the solution is not repeatable.
            problems.append(repeats.error)
        verdicts = ([o_verified] if o_verified is not None else []) + [all(r) for r in repeats.rounds]
        problems += _flaky(task, repeats, o_verified)
        problems += repeats.problems
    return TaskCheck(
        task_id=task.id,
        has_solution=has_solution,
        oracle=o_outcome if has_solution else None,
        oracle_reason=o_reason if has_solution else None,
        nop=n_outcome,
        nop_reason=n_reason,
        verify_runs=len(verdicts),
        verify_passes=sum(verdicts) if verdicts else None,
        problems=problems,
        lints=lints,
    )


def _in_containers(loaded: LoadedSuite) -> list[Task]:
    """Tasks with a solution and a container environment: their verifier re-runs are runs of the oracle."""
    suite = loaded.suite
    return [t for t in suite.tasks if t.solution and (e := suite.environment_for(t)) is not None and e.container]


def _container_repeats(
    loaded: LoadedSuite, repeats: int, run: Callable[[str, LoadedSuite, int], Envelope]
) -> dict[str, Rebuild]:
    """A container task's verifier re-runs: the oracle again ``repeats`` times, each attempt in fresh containers of
    the task's image (its verifier never runs on the host)."""
    tasks = _in_containers(loaded)
    if not tasks:
        return {}
    narrowed = replace(loaded, suite=loaded.suite.model_copy(update={"tasks": tasks}))
    envelope = run("oracle", narrowed, repeats)
    out: dict[str, Rebuild] = {}
    for task in envelope.report.tasks:
        rounds = [[a.verified is True] for a in task.attempts]
        broken = [a.reason for a in task.attempts if a.outcome == "error"]
        out[task.task_id] = Rebuild(rounds, f"the oracle's re-run broke: {broken[0]}" if broken else None)
    return out


def _setup_left(task: Task, nop_store: Path | None) -> list[str]:
    """A container task's setup commands that leave the tree dirty (the host path's rebuild finds it with git): the
    do-nothing agent changed nothing, so whatever its patch holds, setup put there."""
    if not task.setup_commands or nop_store is None:
        return []
    artifacts = read_artifacts(nop_store, task.id, 1)
    files = artifacts.patch.files if artifacts is not None and artifacts.patch is not None else []
    return [dirty_setup_message(files, container=True)] if files else []


def _forgery_lints(loaded: LoadedSuite, task: Task, repeats: Rebuild | None) -> list[Lint]:
    """What forging the verifier found (``check_rebuild``), as warnings next to the static ones of the same task."""
    if repeats is None or not repeats.forgeable:
        return []
    where = f"$.tasks[{loaded.suite.tasks.index(task)}].verify_commands"
    return [
        Lint(task_id=task.id, where=where, message=m, severity="warning", note=AGENT_CODE_NOTE)
        for m in repeats.forgeable
    ]


def _by_id(envelope: Envelope) -> dict[str, TaskReport]:
    return {t.task_id: t for t in envelope.report.tasks}


class _Warnings(RunObserver):
    def __init__(self, on_warning: Callable[[str], None] | None) -> None:
        self.on_warning = on_warning

    def warning(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)


def check_suite(loaded: LoadedSuite, options: CheckOptions | None = None) -> CheckReport:
    """Run oracle and nop once per task, re-verify the oracle's results, and lint; never raises for findings."""
    options = options or CheckOptions()
    if options.repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {options.repeats})")
    observer = options.observer
    lints = static_lints(loaded)
    in_containers = {t.id for t in _in_containers(loaded)}
    on_host = [t for t in loaded.suite.tasks if t.solution and t.id not in in_containers]
    phases = 2 + bool(in_containers) + bool(on_host)
    number = 0

    def next_phase(title: str, total: int) -> CheckPhase:
        nonlocal number
        number += 1
        return CheckPhase(number, phases, title, total)

    stores: dict[str, Path] = {}

    def run(agent: str, suite: LoadedSuite = loaded, attempts: int = 1) -> Envelope:
        tasks = plural(len(suite.suite.tasks), "task")
        title = f"running the {agent} agent on {tasks}" + (f", {attempts} times each" if attempts > 1 else "")
        opts = RunOptions(
            agent=agent,
            attempts=attempts,
            k=1,
            workspace=options.workspace,
            sandbox=options.sandbox,
            jobs=options.jobs,
            container_runtime=options.container_runtime,
        )
        with observer.run(next_phase(title, len(suite.suite.tasks) * attempts)) as watching:
            result = run_suite(suite, opts, watching)
        stores.setdefault(agent, result.store_dir)  # the first run of each agent: nop's shows what setup left
        return result.envelope

    oracle, nop = run("oracle"), run("nop")
    oracle_tasks, nop_tasks = _by_id(oracle), _by_id(nop)
    repeats_in_containers = _container_repeats(loaded, options.repeats, run)
    base_commit = oracle.run.workspace.base_commit
    bases = resolve_task_bases(loaded, options.workspace, base_commit)
    work_root = Path(tempfile.mkdtemp(prefix="worktrial-check-"))
    checks: list[TaskCheck] = []
    if on_host:
        times = plural(options.repeats, "time") + (" each" if len(on_host) > 1 else "")
        title = f"re-running the verifier of {plural(len(on_host), 'task')} {times} on the oracle's result"
        observer.begin_reruns(next_phase(title, len(on_host) * options.repeats))
    done = 0
    try:
        with rebuilder(loaded, work_root, EnvironmentCache(cache_dir() / "environments")) as builder:
            for task in loaded.suite.tasks:
                repeats = None
                if task.id in repeats_in_containers:
                    repeats = repeats_in_containers[task.id]
                    left = _setup_left(task, stores.get("nop"))
                    repeats = replace(repeats, problems=[*repeats.problems, *left]) if left else repeats
                elif task.solution:

                    def heard(activity: str, finished: int, task_id: str = task.id, before: int = done) -> None:
                        observer.rerun(task_id, activity, before + finished)

                    repeats = builder.rebuild(task, bases[task.id], options.repeats, heard)
                    done += options.repeats
                count = sum(1 for lint in lints if lint.task_id == task.id and lint.severity == "problem")
                checks.append(_task_check(task, oracle_tasks[task.id], nop_tasks[task.id], repeats, count))
                lints += _forgery_lints(loaded, task, repeats)
    finally:
        if on_host:
            observer.end_reruns()
        remove_tree(work_root)
    order = {t.id: i for i, t in enumerate(loaded.suite.tasks)}
    lints.sort(key=lambda lint: order.get(lint.task_id or "", -1))  # each task's forgeries next to its static lints
    problems = sum(len(c.problems) for c in checks) + sum(1 for lint in lints if lint.severity == "problem")
    return CheckReport(
        suite_path=str(loaded.path),
        suite_sha256=loaded.sha256,
        suite_id=loaded.suite.id,
        repeats=options.repeats,
        flake_upper_bound=flake_upper_bound(options.repeats + 1),
        detects_10pct_flake=detection_probability(FLAKE_RATE, options.repeats + 1),
        base_commit=base_commit,
        tasks=checks,
        lints=lints,
        without_solution=[t.id for t in loaded.suite.tasks if not t.solution],
        problems=problems,
        warnings=sum(1 for lint in lints if lint.severity == "warning"),
        ok=problems == 0,
    )
