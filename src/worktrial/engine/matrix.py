"""Model and agent matrices: run one suite under several configurations, one stored run each.

A configuration is an agent and (for agents that use one) a model; the matrix is the cartesian product of the
agents and models given. Agents that never see the model (oracle, nop, command, a custom agent without a
model flag) run once, without a model, as a reference row: running them once per model would produce identical
runs under different labels, which is exactly the kind of number a leaderboard must not invent.

Configurations run one after another with the same suite, workspace, attempts, k and jobs. Every agent is built
and preflighted before the first attempt, so a missing key or program fails the whole matrix before any money is
spent. An agent that breaks fatally mid-run (a rejected key, an unknown model) fails only its configuration; the
others still run and keep their results. Ctrl-C (or SIGTERM) stops the matrix after the running configuration
has stored what finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from worktrial.agents import agent_specs
from worktrial.agents.custom import custom_tables
from worktrial.analysis.leaderboard import Contender, Status
from worktrial.engine.run import RunObserver, RunOptions, build_agent, choose_agent_name, run_suite
from worktrial.engine.session import sigterm_as_interrupt
from worktrial.errors import EXIT_BUDGET, EXIT_INTERRUPTED, BadInputError, RunAborted, WorktrialError
from worktrial.model.config import Config
from worktrial.model.envelope import Envelope
from worktrial.model.records import AttemptRecord
from worktrial.model.suite import LoadedSuite
from worktrial.state.config import load_config
from worktrial.state.history import stored_envelope
from worktrial.state.roots import state_root


@dataclass(frozen=True)
class Configuration:
    """One row of the matrix: which agent, on which model (None when the agent uses none)."""

    agent: str
    model: str | None = None
    agent_cmd: str | None = None

    @property
    def label(self) -> str:
        return self.agent if self.model is None else f"{self.agent} ({self.model})"


def uses_model(agent: str, config: Config) -> bool:
    """Whether ``--model`` reaches the agent; plugins and dotted paths get it in their options, so they may."""
    spec = agent_specs().get(agent)
    if spec is not None:
        return spec.uses_model
    table = custom_tables(config).get(agent)
    if table is not None:
        return bool(table.model_flag) or "{model_args}" in (table.command or "")
    return True


def plan_configurations(
    agents: Sequence[str], models: Sequence[str], agent_cmd: str | None, config: Config
) -> list[Configuration]:
    """The configurations of a matrix, in the order given (agents outer, models inner); bad input says why."""
    names = _agent_names(agents, models, agent_cmd)
    model_users = [n for n in names if uses_model(n, config)]
    if models and not model_users:
        who = f"--agent {names[0]} does not" if len(names) == 1 else f"none of the agents ({', '.join(names)})"
        raise BadInputError(
            f"{who} use a model, so each --model would only relabel the same runs; drop --model, "
            "or add an agent that takes one (builtin, a preset, a custom agent with model_flag)"
        )
    configurations = []
    for name in names:
        if name not in model_users:
            configurations.append(Configuration(name, None, agent_cmd if name == "command" else None))
        else:
            configurations += [Configuration(name, model) for model in models] if models else [Configuration(name)]
    return configurations


def _agent_names(agents: Sequence[str], models: Sequence[str], agent_cmd: str | None) -> list[str]:
    """The agents of a matrix: those given, else the one ``--agent-cmd`` or ``--model`` implies."""
    for flag, values in (("--agent", agents), ("--model", models)):
        repeated = sorted({v for v in values if list(values).count(v) > 1})
        if repeated:
            raise BadInputError(f"{flag} {repeated[0]} is given more than once; each configuration runs once")
    names = list(agents) or (["command"] if agent_cmd else ["builtin"] if models else [])
    if not names:
        choose_agent_name(RunOptions())  # raises the usual "choose an agent" message
    if agent_cmd and "command" not in names:
        raise BadInputError(f"--agent-cmd only works with --agent command, not --agent {names[0]}")
    return names


def options_for(base: RunOptions, configuration: Configuration) -> RunOptions:
    """The shared options with this configuration's agent and model (callbacks are the caller's to set)."""
    return dataclasses.replace(
        base,
        agent=configuration.agent,
        model=configuration.model,
        agent_cmd=configuration.agent_cmd,
        agent_settings=dict(base.agent_settings),
        label=f"{base.label}: {configuration.label}" if base.label else None,
    )


def matrix_config(workspace: Path | None) -> Config:
    """The merged user and project configuration the agents of a matrix are built with."""
    return load_config(state_root(workspace))


def preflight_all(configurations: Sequence[Configuration], base: RunOptions) -> None:
    """Build and preflight every agent before any attempt runs: bad input costs nothing when caught here."""
    config = matrix_config(base.workspace)
    for configuration in configurations:
        try:
            build_agent(options_for(base, configuration), config).preflight()
        except BadInputError as exc:
            raise BadInputError(f"{configuration.label}: {exc}") from None


@dataclass(frozen=True)
class ConfigurationOutcome:
    configuration: Configuration
    status: Status
    envelope: Envelope | None
    run_id: str | None
    store_dir: Path | None
    error: WorktrialError | None = None
    kept_root: Path | None = None
    stop_reason: str | None = None
    """Why the run stopped by itself (the matrix's budget)."""

    def contender(self) -> Contender:
        return Contender(
            agent=self.configuration.agent,
            model=self.configuration.model,
            status=self.status,
            envelope=self.envelope,
            error=None if self.error is None else str(self.error),
        )


@dataclass(frozen=True)
class MatrixResult:
    outcomes: list[ConfigurationOutcome]
    interrupted: bool
    stop_reason: str | None = None
    """Why the matrix stopped before every configuration ran to the end: its budget (--max-cost)."""

    @property
    def exit_code(self) -> int:
        """130 when interrupted, 3 when the budget stopped it, else the first failed configuration's code (2 for a
        fatal agent error), else 0."""
        if self.stop_reason is not None:
            return EXIT_BUDGET
        if self.interrupted:
            return EXIT_INTERRUPTED
        failed = [o.error for o in self.outcomes if o.error is not None]
        return failed[0].exit_code if failed else 0


def _stored(base: RunOptions, run_id: str | None) -> Envelope | None:
    """What a run that raised left in its store (None when it never started or the store is unreadable)."""
    if run_id is None:
        return None
    with contextlib.suppress(WorktrialError, OSError, ValueError):
        return stored_envelope(state_root(base.workspace), run_id)
    return None


Prepare = Callable[[int, Configuration, RunOptions], RunObserver | None]
"""Called before a configuration starts; returns the observer for its run (e.g. a progress display)."""
Finished = Callable[[ConfigurationOutcome], None]


class _RunIdObserver(RunObserver):
    """Passes everything on, and remembers the run id (so a configuration whose run raised still names it)."""

    def __init__(self, inner: RunObserver) -> None:
        self.inner = inner
        self.run_id: str | None = None

    def warning(self, message: str) -> None:
        self.inner.warning(message)

    def begin(self, run_id: str, to_run: int, done: int) -> None:
        self.run_id = run_id
        self.inner.begin(run_id, to_run, done)

    def start(self, task_id: str, attempt: int) -> None:
        self.inner.start(task_id, attempt)

    def attempt(self, record: AttemptRecord) -> None:
        self.inner.attempt(record)


def _run_one(
    loaded: LoadedSuite, configuration: Configuration, options: RunOptions, observer: RunObserver
) -> ConfigurationOutcome:
    """One configuration; its failure or interruption becomes its outcome instead of ending the matrix."""
    seen = _RunIdObserver(observer)
    try:
        result = run_suite(loaded, options, seen)
    except KeyboardInterrupt:
        return ConfigurationOutcome(configuration, "interrupted", _stored(options, seen.run_id), seen.run_id, None)
    except WorktrialError as exc:
        return ConfigurationOutcome(configuration, "failed", _stored(options, seen.run_id), seen.run_id, None, exc)
    if result.status == "aborted":
        error = RunAborted(result.error or "the run was aborted")
        return ConfigurationOutcome(configuration, "failed", result.envelope, result.run_id, result.store_dir, error)
    status: Status = "interrupted" if result.status == "stopped" else "complete"
    return ConfigurationOutcome(
        configuration,
        status,
        result.envelope,
        result.run_id,
        result.store_dir,
        kept_root=result.kept_root,
        stop_reason=result.stop_reason,
    )


def run_matrix(
    loaded: LoadedSuite,
    configurations: Sequence[Configuration],
    base: RunOptions,
    *,
    prepare: Prepare | None = None,
    finished: Finished | None = None,
) -> MatrixResult:
    """Run each configuration in turn and return every outcome, stopping early only when interrupted.

    ``prepare`` returns the observer of a configuration's run (e.g. a live display); its ``close()`` method, if
    it has one, is always called when the configuration ends. ``finished`` receives each outcome at once, so a
    caller can print its run id while the next configuration runs.
    """
    outcomes: list[ConfigurationOutcome] = []
    spent = 0.0
    with sigterm_as_interrupt():
        try:
            for index, configuration in enumerate(configurations, start=1):
                options = options_for(base, configuration)
                if base.max_cost is not None:
                    # One budget for the whole matrix: each configuration gets what the earlier ones left.
                    left = base.max_cost - spent
                    if left <= 0:
                        why = f"the matrix budget --max-cost ${base.max_cost:g} is spent (${spent:.4f})"
                        return MatrixResult(outcomes=outcomes, interrupted=False, stop_reason=why)
                    options = dataclasses.replace(options, max_cost=left)
                observer = (prepare(index, configuration, options) if prepare is not None else None) or RunObserver()
                try:
                    outcome = _run_one(loaded, configuration, options, observer)
                finally:
                    close = getattr(observer, "close", None)
                    if callable(close):
                        close()
                outcomes.append(outcome)
                if outcome.envelope is not None and outcome.envelope.run.budget is not None:
                    spent += outcome.envelope.run.budget.spent + outcome.envelope.run.budget.spent_unrecorded
                if base.base_commit is None and outcome.envelope is not None:
                    # Every later configuration starts from the commit the first one used, even if HEAD moves.
                    base = dataclasses.replace(base, base_commit=outcome.envelope.run.workspace.base_commit)
                if finished is not None:
                    finished(outcome)
                if outcome.stop_reason is not None:
                    return MatrixResult(outcomes=outcomes, interrupted=False, stop_reason=outcome.stop_reason)
                if outcome.status == "interrupted":
                    return MatrixResult(outcomes=outcomes, interrupted=True)
        except KeyboardInterrupt:  # between two configurations: nothing was running
            return MatrixResult(outcomes=outcomes, interrupted=True)
    return MatrixResult(outcomes=outcomes, interrupted=False)
