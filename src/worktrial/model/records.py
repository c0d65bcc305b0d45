"""Records shared by the execution side and the reporting side: usage figures and attempt results."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["pass", "fail", "timeout", "error"]
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "timeout", "error")


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
    """The model the agent says it ran (its init or metadata events), or None when it does not say."""

    @property
    def tool_calls(self) -> int:
        return sum(self.tool_counts.values())


class AttemptRecord(BaseModel):
    """The result of one attempt, as stored in the envelope (enough to recompute every metric)."""

    model_config = ConfigDict(allow_inf_nan=False)

    task_id: str
    attempt: int
    outcome: Outcome
    claimed: bool | None
    verified: bool | None
    reason: str | None = None
    duration_secs: float
    agent_secs: float
    verify_secs: float
    cost_usd: float | None = None
    tokens: Tokens = Field(default_factory=Tokens)
    turns: int | None = None
    tool_calls: int | None = None
    error_category: str | None = None
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
    sandbox: int | None = Field(
        default=None,
        description="Which of the run's containments (run.sandboxes, when a resumed run used more than one) the "
        "attempt ran under; null in runs recorded before containment was recorded per attempt.",
    )
    retries: int = 0
    """How many times an infrastructure error made this attempt run again (see --retry-errors)."""
    retry_reasons: list[str] = Field(default_factory=list)
