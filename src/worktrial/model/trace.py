"""Per-attempt trace files: aggregate facts only, never transcript content."""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel, Field

from worktrial.model.records import GatewayCounts, Outcome, Tokens, Usage

# Keys that would carry transcript content; a trace must never contain any of them (audits check this).
FORBIDDEN_KEYS = frozenset({"prompt", "messages", "content", "output", "stdout", "stderr", "arguments", "transcript"})


class Latency(BaseModel):
    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    max: float | None = None


class Trace(BaseModel):
    task_id: str
    attempt: int
    outcome: Outcome
    duration_secs: float
    agent_secs: float
    verify_secs: float
    setup_secs: float | None = None
    turns: int | None
    tool_calls: int
    tool_counts: dict[str, int]
    error_counts: dict[str, int]
    repeated_tool_calls: int
    latency_ms: Latency
    tokens: Tokens
    cost_usd: float | None
    output_bytes: int
    notes: list[str] = Field(default_factory=list)
    gateway: GatewayCounts | None = None
    """Requests and statuses the model gateway saw, where the agent's calls went through it."""


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_stats(samples: list[float]) -> Latency:
    if not samples:
        return Latency()
    values = sorted(samples)
    return Latency(
        count=len(values),
        mean=round(sum(values) / len(values), 3),
        p50=round(percentile(values, 50), 3),
        p95=round(percentile(values, 95), 3),
        max=round(values[-1], 3),
    )


def build_trace(
    *,
    task_id: str,
    attempt: int,
    outcome: Outcome,
    duration_secs: float,
    agent_secs: float,
    verify_secs: float,
    usage: Usage,
    setup_secs: float | None = None,
) -> Trace:
    return Trace(
        task_id=task_id,
        attempt=attempt,
        outcome=outcome,
        duration_secs=duration_secs,
        agent_secs=agent_secs,
        verify_secs=verify_secs,
        setup_secs=setup_secs,
        turns=usage.turns,
        tool_calls=usage.tool_calls,
        tool_counts=dict(usage.tool_counts),
        error_counts=dict(usage.error_counts),
        repeated_tool_calls=usage.repeated_tool_calls,
        latency_ms=latency_stats(usage.latency_ms),
        tokens=usage.tokens,
        cost_usd=usage.cost_usd,
        output_bytes=usage.output_bytes,
        notes=list(usage.notes),
        gateway=usage.gateway,
    )


def trace_filename(task_id: str, attempt: int) -> str:
    """A readable file name, unique per (task, attempt): ``a/b``, ``a_b`` and ``a b`` differ by a short hash."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._") or "task"
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[:80]}-{digest}-{attempt}.json"
