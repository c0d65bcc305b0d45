"""An attempt's trajectory (``--trajectories``): where it comes from, and how it is made safe to store.

Three sources, the first that has steps wins: the model gateway's recording of a routed agent's calls (what the
model really saw and said, whatever the agent claims), the built-in agent's own loop, and a command agent's own
file at ``$WORKTRIAL_TRAJECTORY_FILE`` (ATIF, or JSON Lines of ATIF steps). That file is hostile input: read as a
regular file only, bounded, parsed field by field, and rebuilt as a valid trajectory of worktrial's own.

Before anything is stored the trajectory is sealed (``model.trajectory.seal``): every string redacted with the
attempt's redactor (plus the attempt's gateway token and the keys the gateway sent upstream), every text cut to its
limit, the document to its size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worktrial.agents.simple import TRAJECTORY_FILE
from worktrial.engine.executor import AttemptSpec
from worktrial.gateway import Session
from worktrial.gateway.recorder import Recorder
from worktrial.isolation.safefs import read_regular
from worktrial.model.trajectory import (
    TIMESTAMP,
    AgentInfo,
    Budget,
    Metrics,
    Observation,
    ObservationResult,
    Sealed,
    Step,
    StepLog,
    ToolCall,
    Trajectory,
    final_metrics,
    seal,
)
from worktrial.redaction import Redactor
from worktrial.version import __version__

MAX_AGENT_FILE_BYTES = 32 * 1024 * 1024
"""The largest trajectory file a command agent may write; a larger one is ignored with a note."""
MAX_AGENT_STEPS = 20_000
MAX_AGENT_SUBAGENTS = 50
MAX_NAME_CHARS = 200


@dataclass
class Recording:
    """What records one attempt's trajectory while it runs: a step log for an agent that runs its loop in the
    harness, the gateway's recorder for a routed one, one memory budget for both."""

    budget: Budget
    log: StepLog
    recorder: Recorder | None = None


def start(spec: AttemptSpec, session: Session | None) -> Recording | None:
    """Start recording (None when the run records no trajectories); the gateway's session hears every call."""
    if not spec.trajectories:
        return None
    budget = Budget()
    recorder = Recorder(budget) if session is not None else None
    if session is not None:
        session.recorder = recorder
    return Recording(budget, StepLog(budget), recorder)


@dataclass
class Collected:
    """An attempt's trajectory as recorded, not yet redacted, and what else must never be stored."""

    trajectory: Trajectory
    secrets: list[str] = field(default_factory=list)
    dropped: int = 0


def collect(
    spec: AttemptSpec, recording: Recording | None, session: Session | None, scratch: Path, model: str | None
) -> Collected | None:
    """The attempt's trajectory from its first source with steps (see the module), or None."""
    if recording is None:
        return None
    secrets = [session.token, *(r.key for r in session.routes.values() if r.key)] if session is not None else []
    agent = AgentInfo(
        name=spec.agent.name,
        version=(__version__ if spec.agent.name == "builtin" else spec.agent_version) or "unknown",
        model_name=model or spec.agent.options.model,
    )
    notes: list[str] = []
    found: Trajectory | None = None
    if recording.recorder is not None:
        found = recording.recorder.trajectory(agent)
    if found is None and len(recording.log):
        steps = recording.log.steps()
        found = Trajectory(
            agent=agent,
            steps=steps,
            final_metrics=final_metrics(steps),
            notes="recorded by worktrial's built-in agent",
            extra={"worktrial": {"source": "builtin"}},
        )
    own, note = read_agent_file(scratch / TRAJECTORY_FILE, agent)
    if note:
        notes.append(note)
    if found is None and own is not None:
        found = own
    elif own is not None:
        notes.append("the agent also wrote its own trajectory file; the harness's recording is kept instead")
    if found is None:
        if not notes:
            return None
        found = Trajectory(agent=agent, steps=[Step(step_id=1, source="system", message=notes[0])])
    elif notes:
        found = found.model_copy(update={"notes": "; ".join(filter(None, [found.notes, *notes]))})
    return Collected(found, secrets, recording.budget.dropped)


def seal_attempt(collected: Collected | None, redactor: Redactor) -> Sealed | None:
    """The trajectory ready to store: redacted (the attempt's secrets and its gateway token) and bounded."""
    if collected is None:
        return None
    values = {*redactor.values, *(s for s in collected.secrets if len(s) >= 8)}
    full = Redactor(tuple(sorted(values, key=len, reverse=True)))
    return seal(collected.trajectory, full.redact, dropped_before=collected.dropped)


# -- a command agent's own file (hostile input) -----------------------------------------------------------------


def read_agent_file(path: Path, agent: AgentInfo) -> tuple[Trajectory | None, str | None]:
    """What the agent wrote to ``$WORKTRIAL_TRAJECTORY_FILE`` as a trajectory of worktrial's own; problems become a
    note, never an error (the file is the agent's word, and it may be anything)."""
    try:
        data = read_regular(path, MAX_AGENT_FILE_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the agent's trajectory file could not be read ({exc.strerror or exc}); ignored"
    except ValueError as exc:  # a FIFO, a device, or larger than the limit
        return None, f"the agent's trajectory file was ignored: {exc}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the agent's trajectory file is not UTF-8; ignored"
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None  # JSON Lines, or not JSON at all
    try:
        if isinstance(document, dict) and isinstance(document.get("steps"), list):
            own = _import_atif(document, agent, depth=0)
        else:
            own = _import_lines(text, agent)
    except (ValueError, RecursionError) as exc:
        return None, f"the agent's trajectory file is neither ATIF nor JSON Lines of ATIF steps ({exc}); ignored"
    if own is None:
        return None, "the agent's trajectory file holds no step; ignored"
    extra = {**(own.extra or {}), "worktrial": {"source": "agent_file"}}
    return own.model_copy(update={"extra": extra}), None


def _import_lines(text: str, agent: AgentInfo) -> Trajectory | None:
    steps: list[Step] = []
    for line in text.splitlines():
        if len(steps) >= MAX_AGENT_STEPS:
            break
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError("a line is not JSON") from None
        step = _step(value, len(steps) + 1)
        if step is not None:
            steps.append(step)
    if not steps:
        return None
    return Trajectory(agent=agent, steps=steps, final_metrics=final_metrics(steps))


def _import_atif(document: dict[str, Any], agent: AgentInfo, depth: int) -> Trajectory | None:
    raw_steps = document["steps"] if isinstance(document.get("steps"), list) else []
    steps = [s for s in (_step(raw, 0) for raw in raw_steps[:MAX_AGENT_STEPS]) if s is not None]
    if not steps:
        return None
    steps = [s.model_copy(update={"step_id": i}) for i, s in enumerate(steps, start=1)]
    own = _dict(document.get("agent"))
    info = AgentInfo(
        name=_name(own.get("name")) or agent.name,
        version=_name(own.get("version")) or agent.version,
        model_name=_name(own.get("model_name")) or agent.model_name,
    )
    subs: list[Trajectory] = []
    if depth == 0:
        for number, raw in enumerate(_list(document.get("subagent_trajectories"))[:MAX_AGENT_SUBAGENTS]):
            sub = _import_atif(raw, info, depth + 1) if isinstance(raw, dict) else None
            if sub is not None:
                subs.append(sub.model_copy(update={"trajectory_id": f"agent-{number}"}))
    return Trajectory(
        session_id=_name(document.get("session_id")),
        agent=info,
        steps=steps,
        notes=_str(document.get("notes")),
        final_metrics=final_metrics(steps),
        subagent_trajectories=subs or None,
    )


def _step(raw: Any, step_id: int) -> Step | None:
    """One ATIF step of the agent's, rebuilt from the fields worktrial understands (others are left out)."""
    raw = _dict(raw)
    source = raw.get("source")
    if source not in ("system", "user", "agent"):
        return None
    calls = (
        [c for c in (_tool_call(c) for c in _list(raw.get("tool_calls"))) if c is not None] if source == "agent" else []
    )
    known = {c.tool_call_id for c in calls}
    results = []
    for result in _list(_dict(raw.get("observation")).get("results")):
        result = _dict(result)
        call_id = _name(result.get("source_call_id"))
        extra = _dict(result.get("extra")) or None
        if call_id is not None and call_id not in known:
            extra, call_id = {**(extra or {}), "tool_call_id": call_id}, None
        results.append(ObservationResult(source_call_id=call_id, content=_content(result.get("content")), extra=extra))
    agent = source == "agent"
    return Step(
        step_id=max(step_id, 1),
        timestamp=_timestamp(raw.get("timestamp")),
        source=source,
        model_name=_name(raw.get("model_name")) if agent else None,
        message=_content(raw.get("message")) or "",
        reasoning_content=_str(raw.get("reasoning_content")) if agent else None,
        tool_calls=calls or None,
        observation=Observation(results=results) if results else None,
        metrics=_metrics(raw.get("metrics")) if agent else None,
        extra=_dict(raw.get("extra")) or None,
    )


def _tool_call(raw: Any) -> ToolCall | None:
    raw = _dict(raw)
    call_id, name = _name(raw.get("tool_call_id")), _name(raw.get("function_name"))
    if call_id is None or name is None:
        return None
    arguments = raw.get("arguments")
    return ToolCall(
        tool_call_id=call_id,
        function_name=name,
        arguments=arguments if isinstance(arguments, dict) else {"input": arguments},
    )


def _metrics(raw: Any) -> Metrics | None:
    raw = _dict(raw)

    def count(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12 else None

    cost = raw.get("cost_usd")
    cost = cost if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < 1e6 else None
    found = Metrics(
        prompt_tokens=count("prompt_tokens"),
        completion_tokens=count("completion_tokens"),
        cached_tokens=count("cached_tokens"),
        cost_usd=float(cost) if cost is not None else None,
    )
    return found if found != Metrics() else None


def _content(value: Any) -> str | None:
    """A message or result: a string, or ATIF's content parts (text kept, images and audio named)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            part = _dict(part)
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif part.get("type") in ("image", "audio"):
                parts.append(f"[{part['type']}]")
        return "\n".join(parts)
    return None


def _timestamp(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= 40 and TIMESTAMP.match(value) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _name(value: Any) -> str | None:
    return value[:MAX_NAME_CHARS] if isinstance(value, str) and value else None
