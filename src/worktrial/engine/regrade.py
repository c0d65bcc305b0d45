"""``worktrial regrade RUN [--suite NEW]``: every stored attempt of a run judged again, and no agent run.

The regrade is a new run of the suite (the file the run names as it is now, or ``NEW``) over the run's tasks, with
the run's frozen config and agent description: each attempt whose verdict depended on verification has its stored
change rebuilt in a fresh checkout of its base (environment setup included, per-attempt setup commands not: their
effects are in the change) and verified by this suite's verify commands in a fresh verifier's room; an attempt
whose verdict never reached verification keeps it. Every record says where it came from (``provenance``: the run,
the attempt, the suite digest it measured). What cannot be judged again faithfully is left out, each attempt with
why (``run.reuse.not_regraded``): ``worktrial resume`` of the new run runs the agent for those.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.agents.base import AgentContext, AgentOptions, AgentResult
from worktrial.engine.confine import SandboxChoice
from worktrial.engine.containers import plan_containers
from worktrial.engine.executor import AgentRef
from worktrial.engine.reuse import open_source_run
from worktrial.engine.run import create_store, new_meta
from worktrial.engine.session import (
    Recorded,
    RunObserver,
    RunResult,
    Session,
    SessionStart,
    check_counts,
    default_jobs,
    end_previous,
    local_executor,
    new_run_id,
    resolve_workspace,
    run_session,
    state_root_for,
    task_bases,
)
from worktrial.errors import BadInputError, HarnessError, SuiteError
from worktrial.isolation.container import RuntimeChoice
from worktrial.model.envelope import Selection
from worktrial.model.suite import LoadedSuite, load_suite

NO_AGENT = f"{__name__}:no_agent"
"""The agent a regrade's executor is given: every job replays a stored change, so it is never run."""


class NoAgent:
    """The agent of a regrade, which runs none (a job that reached it would be a bug)."""

    name = "regrade"
    sandboxed_files = False

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        """Nothing to check: no agent runs."""

    def run(self, ctx: AgentContext) -> AgentResult:
        raise HarnessError("internal error: a regrade runs no agent")


def no_agent(_options: AgentOptions) -> NoAgent:
    return NoAgent()


@dataclass(frozen=True)
class RegradeOptions:
    """How a regrade runs (what it measures is the stored run's)."""

    workspace: Path | None = None
    jobs: int | None = None
    keep_worktrees: bool = False
    container_runtime: RuntimeChoice = "auto"


def regrade_run(
    run_id: str,
    suite: LoadedSuite | None = None,
    options: RegradeOptions | None = None,
    observer: RunObserver | None = None,
) -> RunResult:
    """A new run of ``suite`` (default: the suite file ``run_id`` names, as it is now) made of ``run_id``'s attempts
    judged again; see the module docstring."""
    options = options or RegradeOptions()
    observer = observer or RunObserver()
    source = open_source_run(state_root_for(options.workspace), run_id)
    meta, config = source.meta, source.meta.config
    if suite is None:
        try:
            suite = load_suite(meta.suite_path)
        except SuiteError as exc:
            raise BadInputError(f"cannot regrade {run_id}: {exc} (give the suite with --suite)") from None
    loaded, selection = _its_tasks(suite, {t.id for t in meta.tasks}, run_id)
    loaded = config.timeout_multipliers.apply(loaded)
    jobs = options.jobs or default_jobs()
    check_counts(config.attempts, config.k, jobs, 0)
    ws = resolve_workspace(loaded, Path(meta.workspace), meta.base_commit)
    bases = task_bases(loaded, ws)
    # only attempts verified in a fresh room are regradable (reuse.not_regradable): they are judged in one again
    containers = plan_containers(
        loaded, options.container_runtime, observer.warning, force_build=config.force_build, verifier_room="fresh"
    )
    end_previous(ws.state_root, observer)
    sandbox = config.sandbox if config.sandbox is not None else SandboxChoice()
    ref = AgentRef(NO_AGENT, AgentOptions())
    session = Session(
        new_run_id(), loaded, ws, bases, config, ref, sandbox, containers, jobs, local_executor,
        options.keep_worktrees, None, True,
    )  # fmt: skip

    def record(start: SessionStart) -> Recorded:
        made = new_meta(session, selection, start, config.base_url, 0)
        made = made.model_copy(update={"agent_description": meta.agent_description, "dirty": meta.dirty})
        return create_store(session, made, start, observer, ("regrade", source))

    return run_session(session, observer, record)


def _its_tasks(loaded: LoadedSuite, ran: set[str], run_id: str) -> tuple[LoadedSuite, Selection | None]:
    """The suite narrowed to the tasks the run ran (a task added since has no attempt to regrade)."""
    chosen = [t for t in loaded.suite.tasks if t.id in ran]
    if not chosen:
        raise BadInputError(f"no task of run {run_id} is in {loaded.path}; there is nothing to regrade")
    if len(chosen) == len(loaded.suite.tasks):
        return loaded, None
    narrowed = dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"tasks": chosen}))
    ids = [t.id for t in chosen]
    return narrowed, Selection(task_ids=ids, suite_tasks=len(loaded.suite.tasks))
