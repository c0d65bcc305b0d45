"""A whole run: resolve the workspace and agent, run every attempt, and build the envelope."""

from __future__ import annotations

import contextlib
import os
import platform
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

from worktrial import __version__, proc
from worktrial.agents import AgentOptions, create_agent
from worktrial.agents.base import Agent
from worktrial.attempt import AttemptSettings, run_attempt
from worktrial.config import cache_dir, load_config
from worktrial.envelope import Envelope, RunInfo, WorkspaceInfo, split_route
from worktrial.errors import BadInputError, RunAborted
from worktrial.metrics import TaskInfo, build_report
from worktrial.records import AttemptRecord
from worktrial.suite import LoadedSuite, load_suite
from worktrial.util import utc_now
from worktrial.workspace import (
    SourceRepo,
    ensure_state_dir,
    fetch_pinned,
    find_workspace,
    is_dirty,
    open_source,
    remove_tree,
    resolve_commit,
)


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
    jobs: int = 1
    agent_settings: dict[str, object] = field(default_factory=dict)
    on_attempt: Callable[[AttemptRecord], None] | None = None
    on_warning: Callable[[str], None] | None = None


@dataclass(frozen=True)
class RunResult:
    envelope: Envelope
    interrupted: bool
    kept_root: Path | None


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


def _resolve_workspace(loaded: LoadedSuite, options: RunOptions) -> _Workspace:
    pin = loaded.suite.workspace
    if pin is not None and pin.repo:
        repo = fetch_pinned(pin.repo, pin.ref, loaded.path.resolve().parent, cache_dir())
        try:
            state_root = find_workspace(options.workspace)
        except BadInputError:
            state_root = (options.workspace or Path.cwd()).resolve()
        user_repo = repo == state_root
    else:
        repo = find_workspace(options.workspace)
        state_root = repo
        user_repo = True
    base = resolve_commit(repo, pin.ref if pin is not None and pin.ref else "HEAD")
    dirty = is_dirty(repo) if user_repo and not (pin and pin.ref) else False
    return _Workspace(state_root=state_root, source=open_source(repo), base_commit=base, dirty=dirty)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def host_info() -> dict[str, object]:
    return {
        "os": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends a run the same way Ctrl-C does (only possible from the main thread)."""
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


def run_suite(suite: LoadedSuite | str | Path, options: RunOptions | None = None) -> RunResult:
    """Run every task of a suite ``attempts`` times and return the envelope (also for interrupted runs)."""
    options = options or RunOptions()
    loaded = suite if isinstance(suite, LoadedSuite) else load_suite(suite)
    attempts = options.attempts or loaded.suite.attempts
    if attempts < 1:
        raise BadInputError(f"--attempts must be at least 1 (got {attempts})")
    k = options.k or attempts
    if not 1 <= k <= attempts:
        raise BadInputError(f"--k must be between 1 and the number of attempts ({attempts}); got {k}")
    choose_agent_name(options)
    ws = _resolve_workspace(loaded, options)
    agent = build_agent(options, load_config(ws.state_root))
    if ws.dirty and options.on_warning:
        options.on_warning(
            f"{ws.source.path} has uncommitted changes; they are not part of the base commit "
            f"{ws.base_commit[:12]} that every attempt starts from"
        )
    agent.preflight()

    run_id = new_run_id()
    started_at = utc_now()
    state = ensure_state_dir(ws.state_root)
    work_root = Path(tempfile.mkdtemp(prefix=f"worktrial-{run_id}-"))
    settings = AttemptSettings(
        source=ws.source,
        base_commit=ws.base_commit,
        work_root=work_root,
        trace_dir=state / "eval" / "traces" / run_id,
        workspace=ws.state_root,
        verify_always=options.verify_always,
        keep_worktrees=options.keep_worktrees,
    )
    records: list[AttemptRecord] = []
    interrupted = False
    try:
        with _sigterm_as_interrupt():
            for attempt in range(1, attempts + 1):
                for task in loaded.suite.tasks:
                    result = run_attempt(agent, task, attempt, settings)
                    records.append(result.record)
                    if options.on_attempt:
                        options.on_attempt(result.record)
                    if result.fatal is not None:
                        raise RunAborted(
                            f"stopping the run: {result.fatal.message} (this would repeat on every attempt)"
                        )
    except KeyboardInterrupt:
        interrupted = True
        proc.kill_all_live()
    finally:
        if not options.keep_worktrees:
            remove_tree(work_root)
    provider, model = split_route(options.model)
    info = RunInfo(
        id=run_id,
        started_at=started_at,
        finished_at=utc_now(),
        complete=not interrupted and len(records) == attempts * len(loaded.suite.tasks),
        workspace=WorkspaceInfo(path=str(ws.source.path), base_commit=ws.base_commit, dirty=ws.dirty),
        attempts=attempts,
        k=k,
        jobs=options.jobs,
        verify_always=options.verify_always,
        host=host_info(),
    )
    tasks = [TaskInfo(t.id, t.display_name, t.category) for t in loaded.suite.tasks]
    envelope = Envelope(
        harness_version=__version__,
        provider=provider,
        model=model,
        agent=agent.describe(),
        suite_path=_display_path(loaded.path),
        suite_sha256=loaded.sha256,
        run=info,
        report=build_report(loaded.suite.id, loaded.suite.display_name, tasks, records, k),
    )
    return RunResult(
        envelope=envelope, interrupted=interrupted, kept_root=work_root if options.keep_worktrees else None
    )


def _display_path(path: Path) -> str:
    if path.is_absolute():
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
    return str(path)
