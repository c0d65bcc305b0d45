"""Trajectories: one attempt's conversation with its model in Harbor's Agent Trajectory Interchange Format (ATIF).

Recorded only when a run asks for them (``--trajectories``); a separate, local artifact next to the attempt's logs,
never part of a trace or an envelope (DESIGN.md, "Trajectories"). The models follow the ATIF specification (RFC
0001 of the Harbor project, schema ``ATIF-v1.8``): a root with the agent and its steps; each step from the
``system``, the ``user`` or the ``agent``, an agent step with its tool calls, the observation that answered them and
the model call's metrics. Text-only: worktrial never records images or audio, and reads an agent's own multimodal
parts as short placeholders.

``StepLog`` collects one conversation's steps as they happen, bounded in memory; ``seal`` redacts secrets and
bounds every text and the whole document before anything is written.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ATIF_VERSION = "ATIF-v1.8"
"""The ATIF schema version worktrial writes (text-only documents are also valid ATIF-v1.7)."""

MAX_TEXT_BYTES = 32 * 1024
"""One message, reasoning, tool result or tool-call argument in the stored file: a longer one keeps its head and
tail around a mark saying how much was cut."""
MAX_TRAJECTORY_BYTES = 4 * 1024 * 1024
"""One attempt's stored file: steps past it are dropped, and a last system step says how many."""
MAX_STEPS = 5000
"""Steps of one attempt's stored file (all its conversations together)."""
RECORD_TEXT_BYTES = 4 * MAX_TEXT_BYTES
"""What a recorder keeps of one text while the attempt runs (redaction comes before the final cut, so a secret
that straddles this cut lies outside what the final one keeps)."""
RECORD_TOTAL_BYTES = 2 * MAX_TRAJECTORY_BYTES
"""What one attempt's recorders keep in memory at most; past it they count the steps they drop."""
CUT_MARK = "[... {n} bytes cut by worktrial ...]"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$")
"""An ISO 8601 date or time, as ATIF's ``timestamp`` holds one."""
_MARK = re.compile(r"\[\.\.\. (\d{1,15}) bytes cut by worktrial \.\.\.\]")
StepSource = Literal["system", "user", "agent"]


class _Atif(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Atif):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class ObservationResult(_Atif):
    source_call_id: str | None = None
    """The ``tool_call_id`` of the same step's call this answers (None: not a tool call's result)."""
    content: str | None = None
    extra: dict[str, Any] | None = None
    """``is_error``: the tool reported a failure."""


class Observation(_Atif):
    results: list[ObservationResult]


class Metrics(_Atif):
    prompt_tokens: int | None = None
    """Every prompt token, cached ones included."""
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class Step(_Atif):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: StepSource
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class AgentInfo(_Atif):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Trajectory(_Atif):
    schema_version: str = ATIF_VERSION
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AgentInfo
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None
    """Side conversations (a CLI's title or summary calls, its subagents), each with its own ``trajectory_id``."""

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True, indent=1) + "\n"

    def all_steps(self) -> Iterator[Step]:
        yield from self.steps
        for sub in self.subagent_trajectories or ():
            yield from sub.all_steps()


class TrajectoryRef(BaseModel):
    """Where an attempt's trajectory is stored, and its digest (in the attempt's record, so ``audit`` checks it)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Relative to the state root, like the record's trace path.")
    sha256: str
    bytes: int
    steps: int = Field(description="Steps of the main conversation and of every side conversation.")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clip(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` UTF-8 bytes: its head and tail around a mark saying how much was cut
    (of the original: a mark an earlier cut left in the part cut now adds what it had cut)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    half = max(0, (limit - 64) // 2)
    head = data[:half].decode("utf-8", "ignore")
    tail = data[len(data) - half :].decode("utf-8", "ignore")
    cut = len(data) - 2 * half
    for earlier in _MARK.finditer(data[half : len(data) - half].decode("utf-8", "ignore")):
        cut += int(earlier.group(1)) - len(earlier.group(0).encode())
    return head + CUT_MARK.format(n=cut) + tail


# -- recording --------------------------------------------------------------------------------------------------


@dataclass
class _Step:
    source: StepSource
    message: str
    timestamp: str
    model: str | None = None
    reasoning: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ObservationResult] = field(default_factory=list)
    metrics: Metrics | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Budget:
    """What the recorders of one attempt may keep in memory, shared by all its conversations."""

    def __init__(self, total_bytes: int = RECORD_TOTAL_BYTES, text_bytes: int = RECORD_TEXT_BYTES) -> None:
        self.total_bytes = total_bytes
        self.text_bytes = text_bytes
        self.used = 0
        self.dropped = 0
        self.lock = threading.RLock()

    def take(self, size: int) -> bool:
        """Whether a step of about ``size`` bytes may still be kept (False: count it as dropped)."""
        with self.lock:
            if self.used + size > self.total_bytes:
                self.dropped += 1
                return False
            self.used += size
            return True


class StepLog:
    """One conversation's steps as they happen: texts cut to the budget's size, steps past its total dropped (and
    counted). Thread-safe."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self._steps: list[_Step] = []
        self._calls: dict[str, _Step] = {}
        self._pending: list[tuple[str, str]] = []
        """(name, call id) of calls without a result yet, oldest first (results that name only their tool)."""

    def _text(self, text: str | None) -> str | None:
        return None if text is None else clip(text, self.budget.text_bytes)

    def _add(self, step: _Step) -> _Step | None:
        size = len(step.message) + len(step.reasoning or "") + sum(len(json.dumps(c.arguments)) for c in step.calls)
        with self.budget.lock:
            if not self.budget.take(size + 200):
                return None
            self._steps.append(step)
            for call in step.calls:
                self._calls[call.tool_call_id] = step
                self._pending.append((call.function_name, call.tool_call_id))
        return step

    def __len__(self) -> int:
        return len(self._steps)

    def system(self, text: str, *, extra: dict[str, Any] | None = None) -> None:
        self._add(_Step("system", self._text(text) or "", now_iso(), extra=dict(extra or {})))

    def user(self, text: str, *, extra: dict[str, Any] | None = None) -> None:
        self._add(_Step("user", self._text(text) or "", now_iso(), extra=dict(extra or {})))

    def error(self, text: str, **extra: Any) -> None:
        """Something went wrong outside the model's answer (a failed model call): a system step marked as an error."""
        self._add(_Step("system", self._text(text) or "", now_iso(), extra={"error": True, **extra}))

    def agent(
        self,
        text: str,
        calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
        *,
        reasoning: str | None = None,
        model: str | None = None,
        metrics: Metrics | None = None,
        started: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """One model answer: its text, reasoning, tool calls as (id, name, arguments) and the call's metrics."""
        tool_calls = [
            ToolCall(tool_call_id=call_id, function_name=name, arguments=self._arguments(args))
            for call_id, name, args in calls
        ]
        step = _Step(
            "agent",
            self._text(text) or "",
            started or now_iso(),
            model=model,
            reasoning=self._text(reasoning) if reasoning else None,
            calls=tool_calls,
            metrics=metrics,
            extra=dict(extra or {}),
        )
        self._add(step)

    def _arguments(self, args: dict[str, Any]) -> dict[str, Any]:
        clipped: dict[str, Any] = _map_strings(args, lambda s: clip(s, self.budget.text_bytes))
        return clipped

    def has_call(self, call_id: str) -> bool:
        with self.budget.lock:
            return call_id in self._calls

    def observe(
        self,
        call_id: str | None,
        content: str,
        *,
        is_error: bool = False,
        name: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """A tool's result, attached to the step whose call it answers (by id, else the oldest open call of that
        tool); a result of a call this log never saw becomes a user step of its own."""
        content = self._text(content) or ""
        extra = {**({"is_error": True} if is_error else {}), **(extra or {})} or None
        with self.budget.lock:
            if (call_id is None or call_id not in self._calls) and name is not None:
                # A result naming only its tool (Gemini), or an id the call never had (Gemini CLI adds its own).
                call_id = next((cid for n, cid in self._pending if n == name), call_id)
            step = self._calls.get(call_id) if call_id is not None else None
            if step is not None:
                assert call_id is not None
                if not self.budget.take(len(content) + 100):
                    return
                self._pending = [(n, c) for n, c in self._pending if c != call_id]
                step.results.append(ObservationResult(source_call_id=call_id, content=content, extra=extra))
                return
        orphan = _Step("user", "", now_iso(), extra={"unmatched_tool_result": call_id or name or True})
        orphan.results.append(ObservationResult(content=content, extra=extra))
        self._add(orphan)

    def steps(self) -> list[Step]:
        with self.budget.lock:
            return [
                Step(
                    step_id=i,
                    timestamp=s.timestamp,
                    source=s.source,
                    model_name=s.model if s.source == "agent" else None,
                    message=s.message,
                    reasoning_content=s.reasoning,
                    tool_calls=list(s.calls) or None if s.source == "agent" else None,
                    observation=Observation(results=list(s.results)) if s.results else None,
                    metrics=s.metrics if s.source == "agent" else None,
                    extra=dict(s.extra) or None,
                )
                for i, s in enumerate(self._steps, start=1)
            ]


def final_metrics(steps: list[Step]) -> FinalMetrics:
    def total(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    metrics = [s.metrics for s in steps if s.metrics is not None]
    costs = [m.cost_usd for m in metrics]
    return FinalMetrics(
        total_prompt_tokens=total([m.prompt_tokens for m in metrics]),
        total_completion_tokens=total([m.completion_tokens for m in metrics]),
        total_cached_tokens=total([m.cached_tokens for m in metrics]),
        total_cost_usd=round(sum(c for c in costs if c is not None), 8) if costs and None not in costs else None,
        total_steps=len(steps),
    )


# -- sealing: redaction and bounds before anything is written ---------------------------------------------------


@dataclass(frozen=True)
class Sealed:
    """A trajectory ready to store: its JSON text and what sealing did to it."""

    text: str
    steps: int
    redactions: int
    cut_texts: int
    dropped_steps: int


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(str(k)): _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


def seal(
    trajectory: Trajectory,
    redact: Callable[[str], tuple[str, int]],
    *,
    text_bytes: int = MAX_TEXT_BYTES,
    total_bytes: int = MAX_TRAJECTORY_BYTES,
    max_steps: int = MAX_STEPS,
    dropped_before: int = 0,
) -> Sealed:
    """Every string redacted, then cut to ``text_bytes``; steps past ``total_bytes`` or ``max_steps`` (over all
    conversations) dropped, with a last system step saying so. The result is valid ATIF by construction."""
    redactions = cuts = 0

    def clean(text: str) -> str:
        nonlocal redactions, cuts
        text, found = redact(text)
        redactions += found
        bounded = clip(text, text_bytes)
        cuts += bounded is not text
        return bounded

    budget = {"bytes": total_bytes, "steps": max_steps, "dropped": 0}

    def bounded(doc: Trajectory) -> Trajectory:
        data = _map_strings(doc.model_dump(exclude_none=True, exclude={"subagent_trajectories"}), clean)
        kept: list[dict[str, Any]] = []
        for step in data["steps"]:
            size = len(json.dumps(step, ensure_ascii=False).encode("utf-8"))
            if budget["steps"] <= 0 or size > budget["bytes"]:
                budget["dropped"] += 1
                budget["steps"] = 0  # once one is dropped, every later one is: no holes in the middle
                continue
            budget["bytes"] -= size
            budget["steps"] -= 1
            kept.append(step)
        if not kept:
            kept = [{"step_id": 1, "source": "system", "message": "(no step fitted the trajectory's size limit)"}]
        for index, step in enumerate(kept, start=1):
            step["step_id"] = index
        data["steps"] = kept
        subs = [bounded(sub) for sub in doc.subagent_trajectories or ()]
        if subs:
            data["subagent_trajectories"] = [s.model_dump(exclude_none=True) for s in subs]
        return Trajectory.model_validate(data)

    sealed = bounded(trajectory)
    dropped = budget["dropped"] + dropped_before
    if dropped:
        note = (
            f"{dropped} step(s) not kept: the trajectory passed worktrial's limit of {total_bytes // 1024} KiB or "
            f"{max_steps} steps per attempt"
        )
        last = Step(step_id=len(sealed.steps) + 1, source="system", message=note, extra={"truncated": True})
        sealed = sealed.model_copy(update={"steps": [*sealed.steps, last]})
    if sealed.final_metrics is not None:
        counted = sealed.final_metrics.model_copy(update={"total_steps": len(sealed.steps)})
        sealed = sealed.model_copy(update={"final_metrics": counted})
    extra = dict(sealed.extra or {})
    extra["worktrial"] = {**extra.get("worktrial", {}), "redactions": redactions, "cut_texts": cuts}
    if dropped:
        extra["worktrial"]["dropped_steps"] = dropped
    sealed = sealed.model_copy(update={"extra": extra})
    steps = sum(1 for _ in sealed.all_steps())
    return Sealed(sealed.to_json(), steps, redactions, cuts, dropped)
