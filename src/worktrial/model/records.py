"""Records shared by the execution side and the reporting side: usage figures and attempt results."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from worktrial.model.newer_fields import NewerFieldsOmitted
from worktrial.model.trajectory import TrajectoryRef

Outcome = Literal["pass", "fail", "timeout", "error"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "timeout", "error")


class ErrorCategory(StrEnum):
    """Why an attempt ended in ``error``: one closed list, each documented in docs/results.md.

    Records store the value string. A record read from an older run may hold a string that is no member (its
    ``error_category`` stays a plain string on read); everything worktrial produces now is a member.
    """

    # The harness, before or around the agent
    WORKTREE = "worktree"
    """The attempt's workspace could not be created, reset or verified in (a full disk, a git failure)."""
    ENVIRONMENT = "environment"
    """The suite's ``environment.setup`` failed: every attempt would fail alike."""
    SETUP = "setup"
    """A task's ``setup_commands`` failed."""
    LIMIT = "limit"
    """The attempt hit ``--max-memory`` or ``--max-procs``."""
    WORKER_LOST = "worker_lost"
    """A remote executor lost the worker process or node the attempt ran on."""
    SOURCE_MISMATCH = "source_mismatch"
    """What arrived on a remote worker is not what the driver pinned (suite digest, base commit, container image)."""
    NODE_RUNTIME = "node_runtime"
    """A remote worker's node cannot run the task's container (no runtime, or an image it cannot pull or build)."""
    CRASHED = "crashed"
    """The agent's adapter inside worktrial raised (a bug, or a plugin's), or a worker lost its agent."""
    # The agent itself
    NOT_INSTALLED = "not_installed"
    """The agent's program was not found or could not be started."""
    NO_SOLUTION = "no_solution"
    """The oracle agent on a task without a ``solution``."""
    PROMPT_TOO_LONG = "prompt_too_long"
    """The prompt is too long to pass the way the agent takes it."""
    AGENT_FAILED = "agent_failed"
    """An agent CLI exited with an error and reported no result and no provider failure."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The built-in agent's conversation outgrew the model's context window."""
    # The model provider, after the agent's (or SDK's) own retries
    PROVIDER_AUTH = "provider_auth"
    """The provider refused the credentials."""
    MODEL_NOT_FOUND = "model_not_found"
    """The provider does not know the model."""
    PROVIDER_RATE_LIMIT = "provider_rate_limit"
    """Rate limited or out of quota."""
    PROVIDER_SERVER = "provider_server"
    """The provider's server failed (5xx, an unusable response, a timeout or lost connection of the built-in agent)."""
    PROVIDER_UNREACHABLE = "provider_unreachable"
    """The provider could not be reached (connection refused, DNS): seen by the model gateway, or an agent CLI."""
    PROVIDER_SLOW = "provider_slow"
    """The attempt ended while a model call waited on the provider past a threshold (seen by the model gateway)."""
    PROVIDER_STREAM_CUT = "provider_stream_cut"
    """The provider answered 200 and its stream ended before the answer did (seen by the model gateway)."""
    PROVIDER_BAD_REQUEST = "provider_bad_request"
    """The provider rejected the request (a 4xx other than the above)."""
    PROVIDER_ERROR = "provider_error"
    """mini-swe-agent reported a model error worktrial does not recognise."""


RETRYABLE_ERRORS: frozenset[ErrorCategory] = frozenset(
    {
        ErrorCategory.WORKTREE,
        ErrorCategory.PROVIDER_SERVER,
        ErrorCategory.PROVIDER_RATE_LIMIT,
        ErrorCategory.PROVIDER_UNREACHABLE,
        ErrorCategory.PROVIDER_SLOW,
        ErrorCategory.PROVIDER_STREAM_CUT,
        ErrorCategory.WORKER_LOST,
        ErrorCategory.NODE_RUNTIME,
    }
)
"""Errors the harness itself observed and caused by infrastructure, not by the agent's work: ``--retry-errors`` runs
them again without biasing results. Never ``crashed``: an agent adapter that fails on what the agent wrote (its
usage file, its output) would let the agent choose which attempts are re-rolled."""

FATAL_ERRORS: frozenset[ErrorCategory] = frozenset(
    {
        ErrorCategory.ENVIRONMENT,
        ErrorCategory.SOURCE_MISMATCH,
        ErrorCategory.PROVIDER_AUTH,
        ErrorCategory.MODEL_NOT_FOUND,
    }
)
"""Errors that always stop the run (they would repeat on every attempt). Others stop it only in a named case:
``not_installed`` from a preset, ``provider_bad_request`` on the very first model call."""


class Tokens(BaseModel):
    """Token counts as the provider reported them; None means not reported."""

    model_config = ConfigDict(extra="forbid")
    input: int | None = None
    output: int | None = None
    cached_input: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None

    def total(self) -> int | None:
        """Input plus output tokens, or None when neither is known."""
        if self.input is None and self.output is None:
            return None
        return (self.input or 0) + (self.output or 0)

    def add(self, other: Tokens) -> Tokens:
        def plus(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Tokens(
            input=plus(self.input, other.input),
            output=plus(self.output, other.output),
            cached_input=plus(self.cached_input, other.cached_input),
            cache_creation=plus(self.cache_creation, other.cache_creation),
            reasoning=plus(self.reasoning, other.reasoning),
        )


class GatewayCounts(BaseModel):
    """What the run's model gateway saw of one attempt's model calls (counts only, never content)."""

    model_config = ConfigDict(extra="forbid")
    requests: int = 0
    """Model calls forwarded to the provider (those the gateway answered itself are not counted)."""
    statuses: dict[str, int] = Field(default_factory=dict)
    """The model calls' HTTP statuses -> how many answers had each ("0": no answer)."""
    failure: str | None = None
    """The ErrorCategory of the provider failure that decided the attempt's outcome, if any."""
    other_requests: int = 0
    """Forwarded requests that were no model call (a model list, a HEAD probe, a WebSocket upgrade)."""
    agent_startup_secs: float | None = None
    """Seconds from the agent's start to its first model call (None: it made none)."""
    upstream: str | None = None
    """Where the model calls went: the upstream's public URL (no credentials)."""


class Usage(BaseModel):
    """What an agent consumed during one attempt (aggregate facts only, never content)."""

    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    turns: int | None = None
    tool_counts: dict[str, int] = Field(default_factory=dict)
    error_counts: dict[str, int] = Field(default_factory=dict)
    repeated_tool_calls: int = 0
    latency_ms: list[float] = Field(default_factory=list)
    output_bytes: int = 0
    notes: list[str] = Field(default_factory=list)
    model: str | None = None
    """The model the agent says it ran (its init or metadata events), or None when it does not say; where the model
    gateway saw the calls, the model the provider answered with."""
    gateway: GatewayCounts | None = None
    """The model gateway's counts, where the agent's calls went through it."""

    @property
    def tool_calls(self) -> int:
        return sum(self.tool_counts.values())


class StoredChange(BaseModel):
    """The agent's change as the run store keeps it, byte for byte (``change.diff`` beside the attempt's artifacts):
    what ``regrade`` and ``eval --reuse`` rebuild the agent's tree from. Its digest is in the signed record, so a
    stored change edited afterwards is refused."""

    model_config = ConfigDict(extra="forbid")
    sha256: str | None = Field(
        default=None, description="SHA-256 of change.diff; null when the change was not kept (missing says why)."
    )
    size: int = Field(default=0, description="Bytes of change.diff.")
    result: str | None = Field(
        default=None,
        description="What the change leaves, as one digest (each path with its new mode and object id, or deleted): "
        "a regrade's rebuilt tree must leave the same.",
    )
    missing: str | None = Field(default=None, description="Why the change was not kept (too large, a secret in it).")


class Provenance(BaseModel):
    """Where a record's verdict came from when no agent ran for it in this run (``regrade``, ``eval --reuse``)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["reused", "regraded"] = Field(
        description="reused: the record of an attempt on the same task definition, carried over; regraded: an "
        "attempt whose verifier changed, judged again against this run's suite."
    )
    run: str = Field(description="The run the attempt ran in.")
    attempt: int = Field(description="Its attempt number there (the task id is the same).")
    suite_digest: str = Field(description="The suite bundle digest that run measured.")
    reverified: bool = Field(
        default=False,
        description="regraded: its stored change was verified again here (false: verification never decided its "
        "outcome, a timeout, an error or a claimed failure, which it keeps).",
    )
    change_sha256: str | None = Field(default=None, description="The stored change it was verified from.")


class AttemptRecord(NewerFieldsOmitted):
    """The result of one attempt, as stored in the envelope (enough to recompute every metric)."""

    model_config = ConfigDict(allow_inf_nan=False)
    NEWER_FIELDS = ("rewards", "trajectory", "verifier_room", "change", "provenance")

    task_id: str
    attempt: int
    outcome: Outcome
    claimed: bool | None
    verified: bool | None
    reason: str | None = None
    duration_secs: float = Field(
        description="From the agent's start to the verdict (agent, patch, verification); setup is not in it (runs "
        "recorded before setup_secs existed include it)."
    )
    agent_secs: float
    verify_secs: float
    setup_secs: float | None = Field(
        default=None,
        description="Before the agent started: the workspace (a slot's build with its environment setup, or its "
        "reset), the task's setup_commands; null in runs recorded before it was measured.",
    )
    cost_usd: float | None = None
    tokens: Tokens = Field(default_factory=Tokens)
    turns: int | None = None
    tool_calls: int | None = None
    error_category: str | None = Field(
        default=None,
        description="Why an outcome is error: an ErrorCategory value (docs/results.md); older runs may hold others.",
    )
    model: str | None = Field(
        default=None, description="The model the agent says it ran (from its own events); null when it did not say."
    )
    worktree: str | None = None
    trace: str | None = None
    agent_ended: Literal["exit", "sigterm", "killed"] | None = Field(
        default=None,
        description="How the agent's program ended: by itself (exit), within the grace after SIGTERM at its deadline "
        "or cost cap (sigterm), or by SIGKILL (killed); null for agents without a program.",
    )
    reward: float | None = Field(
        default=None,
        description="The reward a container task's verifier wrote (Harbor's reward.txt or reward.json); the attempt "
        "passed its verification only with 1. Null for tasks that verify by exit status. From a reward.json with "
        'several keys: its "reward" key, else the lowest of them (the task passes when every key is 1).',
    )
    rewards: dict[str, float] | None = Field(
        default=None, description="Every key of a reward.json with several (null otherwise): nothing is dropped."
    )
    verifier_room: Literal["shared", "separate", "fresh"] | None = Field(
        default=None,
        description="Where a container task's verifier ran: in the agent's own container once it ended (shared, "
        "Harbor's default: the agent can shape its verdict), in a new one on the worktree as the agent left it "
        "(separate), or in a new one on the agent's files rebuilt from the base (fresh); absent for other tasks.",
    )
    sandbox: int | None = Field(
        default=None,
        description="Which of the run's containments (run.sandboxes, when a resumed run used more than one) the "
        "attempt ran under; null in runs recorded before containment was recorded per attempt.",
    )
    retries: int = 0
    """How many times an infrastructure error made this attempt run again (see --retry-errors)."""
    retry_reasons: list[str] = Field(default_factory=list)
    trajectory: TrajectoryRef | None = Field(
        default=None,
        description="The attempt's stored ATIF trajectory (--trajectories): path, sha256, size and steps; absent "
        "from records of runs without trajectories, which stay as they were.",
    )
    change: StoredChange | None = Field(
        default=None,
        description="The agent's change as the run store keeps it for regrading (its digest); absent with "
        "--no-artifacts and in runs recorded before changes were kept.",
    )
    provenance: Provenance | None = Field(
        default=None, description="Where the verdict came from when no agent ran for it in this run; absent otherwise."
    )
