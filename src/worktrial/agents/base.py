"""The agent protocol: what an agent is given for one attempt and what it returns.

The harness, not the agent, decides the outcome: an agent only reports whether it *claims* success,
what it used, and whether it broke.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from worktrial.gateway import Session
from worktrial.isolation import childenv, proc
from worktrial.model.config import Config
from worktrial.model.records import ErrorCategory, Usage
from worktrial.model.run_config import DEFAULT_GRACE_SECS
from worktrial.model.suite import Task
from worktrial.model.trajectory import StepLog


@dataclass(frozen=True)
class AgentOptions:
    """What the user chose on the command line or in config for the agent under test."""

    model: str | None = None
    agent_cmd: str | None = None
    base_url: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """Agent-specific settings from the command line (e.g. max turns)."""
    pass_env: tuple[str, ...] = ()
    """``--pass-env``: credential-like variables (names or ``PREFIX_*``) the agent receives besides its own."""
    config: Config = field(default_factory=Config)
    """The merged user + project configuration (``worktrial.state.config.load_config``)."""


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent gets for one attempt."""

    task: Task
    attempt: int
    worktree: Path
    deadline: float
    """``time.monotonic()`` value at which the attempt times out."""
    env: dict[str, str]
    """Environment for child processes: the allow-list of the caller's (``worktrial.isolation.childenv``) and the
    contract variables; an agent adds what it needs of the rest with ``env_with``."""
    scratch: Path
    """A per-attempt directory outside the worktree for usage files, agent config and session state."""
    scope: proc.ProcessScope = field(default_factory=proc.ProcessScope)
    """The run's processes: start every child with ``scope=ctx.scope`` so stopping the run ends it."""
    suite_dir: Path | None = None
    """The run's read-only copy of the suite's declared files. Only the oracle uses it (reference solutions may
    apply shipped patches); it is never in ``env``, so an agent under test is not told where hidden tests are."""
    prompt_file: Path | None = None
    """The task's prompt in a file in ``scratch`` (also ``$WORKTRIAL_PROMPT_FILE`` in ``env``): prompts of any size
    reach an agent this way, where an argument or environment variable has a size limit (``agents.prompt``)."""

    credentials: Mapping[str, str] = field(default_factory=dict)
    """The caller's variables held back from ``env`` (all but the allow-list): pick the ones the agent needs."""
    grace_secs: float = DEFAULT_GRACE_SECS
    """At the deadline the agent's processes get SIGTERM, then this long before SIGKILL (pass as ``term_grace``)."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set when the attempt must end before its deadline (its cost cap was passed): pass as ``cancel``."""
    cost_cap: float | None = None
    """``--max-cost-per-attempt`` in USD: an agent that sees its spend as it streams sets ``cancel`` past it."""
    gateway: Session | None = None
    """The attempt's session at the run's model gateway (``worktrial.gateway``): an agent that routes its provider
    through it gives its program the session's URL and token in place of the provider's base URL and key; the
    harness then counts usage and provider failures from the traffic. None where no gateway runs."""
    trajectory: StepLog | None = None
    """Set when the run records trajectories (``--trajectories``): an agent that runs its own loop in the harness
    (the built-in agent) adds each step here; a command agent is told ``$WORKTRIAL_TRAJECTORY_FILE`` instead."""

    def env_with(self, patterns: Iterable[str]) -> dict[str, str]:
        """``env`` plus the credentials the patterns name (``OPENAI_API_KEY``, ``ANTHROPIC_*``)."""
        return {**self.env, **childenv.selected(self.credentials, patterns)}

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def limits(self) -> dict[str, Any]:
        """The deadline contract for ``proc.run`` of the agent's program: its timeout, the grace between SIGTERM and
        SIGKILL, the cancel event and the run's process scope."""
        return {"timeout": self.remaining(), "term_grace": self.grace_secs, "cancel": self.cancel, "scope": self.scope}

    def over_cap(self, cost_usd: float | None) -> bool:
        """Whether spend seen so far passed the attempt's cost cap (then ``cancel`` is set: the agent is ended)."""
        if self.cost_cap is not None and cost_usd is not None and cost_usd > self.cost_cap:
            self.cancel.set()
            return True
        return False

    def cancelled(self) -> bool:
        """True once the run is being interrupted: an in-process agent loop should stop at once."""
        return self.scope.stopping.is_set()


@dataclass(frozen=True)
class AgentError:
    """The agent itself broke (not a failed task). ``fatal`` stops the whole run: it would repeat."""

    category: ErrorCategory
    message: str
    fatal: bool = False

    def __post_init__(self) -> None:
        # Closed: a plugin's unknown category fails here (the attempt ends as `crashed`), not in a report.
        object.__setattr__(self, "category", ErrorCategory(self.category))


def launch_error(result: proc.ProcResult, label: str) -> AgentError | None:
    """Why an agent's program never ran (not found, also as reported by ``/bin/sh``, or not executable)."""
    missing = result.missing_command()
    if missing:
        return AgentError(ErrorCategory.NOT_INSTALLED, f"command not found: {missing}")
    if result.start_error:
        return AgentError(ErrorCategory.NOT_INSTALLED, f"{label}: {result.start_error}")
    return None


@dataclass(frozen=True)
class AgentOutput:
    """Tails of what the agent's program printed, with the full sizes: kept as local artifacts, never published."""

    stdout: bytes = b""
    stderr: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @classmethod
    def of(cls, result: proc.ProcResult) -> AgentOutput:
        return cls(result.stdout_tail, result.stderr_tail, result.stdout_bytes, result.stderr_bytes)


@dataclass
class AgentResult:
    claimed: bool | None
    usage: Usage = field(default_factory=Usage)
    error: AgentError | None = None
    timed_out: bool = False
    reason: str | None = None
    """Short, content-free explanation of a claimed failure or missing claim."""
    output: AgentOutput | None = None
    """The program's stdout/stderr tails, for the attempt's artifacts (agents without a program leave it None)."""
    ended: proc.Ended | None = None
    """How the agent's program ended: by itself, on SIGTERM within the grace, or killed (None: no program)."""


@runtime_checkable
class Agent(Protocol):
    """One agent configuration; ``run`` is called once per attempt, possibly from several threads."""

    name: str

    def describe(self) -> dict[str, Any]:
        """Settings for the envelope's ``agent`` object (never secrets)."""
        ...

    def preflight(self) -> None:
        """Check before the first attempt that the agent can run; raise BadInputError if not."""
        ...

    def run(self, ctx: AgentContext) -> AgentResult: ...


@dataclass(frozen=True)
class AgentSpec:
    """A registered agent: its short name, a one-line summary and how to build it."""

    name: str
    summary: str
    factory: Callable[[AgentOptions], Agent]
    uses_model: bool = True
    """Whether ``--model`` reaches the agent; a matrix runs an agent that uses none once, as a reference row."""
