"""A trajectory for people: ``worktrial show RUN TASK N --trajectory`` in the terminal, and the shortened texts
the HTML view shows per step.

Every step on one numbered line with its source; an agent step's tool calls with their arguments and each call's
result underneath, shortened; errors (a failed tool call, a failed model call, an agent that stopped without
finishing) in red. Every text in a trajectory came from an agent, a model or a tool: it reaches rich only as
``safe_text.terminal_text``, control characters shown, markup literal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from worktrial.model.trajectory import Step, Trajectory
from worktrial.safe_text import terminal_text
from worktrial.util import plural

MESSAGE_CHARS = 600
MESSAGE_LINES = 12
RESULT_CHARS = 500
RESULT_LINES = 8
ARGUMENT_CHARS = 160
SOURCE_STYLE = {"system": "dim", "user": "cyan", "agent": "bold"}


def shorten(text: str, chars: int, lines: int) -> str:
    """At most ``lines`` lines and about ``chars`` characters of ``text``, with a note of what was left out."""
    kept = text.splitlines()
    cut_lines = max(0, len(kept) - lines)
    short = "\n".join(kept[:lines])
    cut_chars = max(0, len(short) - chars)
    if cut_chars:
        short = short[:chars]
    if cut_lines or cut_chars:
        left = len(text) - len(short)
        short += f" … ({left} more characters)"
    return short


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """``name(key=value, ...)`` with each value shortened to one line."""
    parts = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        shown = " ".join(shown.split("\n"))
        if len(shown) > ARGUMENT_CHARS:
            shown = shown[:ARGUMENT_CHARS] + f"… ({len(shown) - ARGUMENT_CHARS} more)"
        parts.append(f"{key}={json.dumps(shown, ensure_ascii=False) if isinstance(value, str) else shown}")
    return f"{name}({', '.join(parts)})"


def is_error(step: Step) -> bool:
    return bool((step.extra or {}).get("error"))


@dataclass(frozen=True)
class ShownCall:
    """One tool call as the view and the terminal show it: the call, its result, whether the tool failed."""

    call: str
    result: str | None
    failed: bool


def shown_calls(step: Step) -> Iterator[ShownCall]:
    results = {r.source_call_id: r for r in (step.observation.results if step.observation else [])}
    for call in step.tool_calls or []:
        result = results.pop(call.tool_call_id, None)
        failed = bool(result is not None and (result.extra or {}).get("is_error"))
        content = shorten(result.content or "", RESULT_CHARS, RESULT_LINES) if result is not None else None
        yield ShownCall(call_text(call.function_name, call.arguments), content, failed)
    for result in results.values():  # results of no call of this step (an agent's own file may have them)
        failed = bool((result.extra or {}).get("is_error"))
        yield ShownCall("(result)", shorten(result.content or "", RESULT_CHARS, RESULT_LINES), failed)


def step_facts(step: Step) -> str:
    """Model, tokens and latency of an agent step, or the status of a failed call, in one short line."""
    facts = []
    if step.model_name:
        facts.append(step.model_name)
    if step.metrics is not None and step.metrics.prompt_tokens is not None:
        facts.append(f"{step.metrics.prompt_tokens}→{step.metrics.completion_tokens} tokens")
    extra = step.extra or {}
    if isinstance(extra.get("latency_ms"), int | float):
        facts.append(f"{extra['latency_ms']:.0f} ms")
    if extra.get("from_request"):
        facts.append("from the agent's request, not an answer the gateway saw")
    return " · ".join(str(f) for f in facts)


def _steps(trajectory: Trajectory) -> list[RenderableType]:
    out: list[RenderableType] = []
    width = len(str(len(trajectory.steps)))
    for step in trajectory.steps:
        error = is_error(step)
        head = Text(f"{step.step_id:>{width}} ", style="dim")
        head.append(f"{step.source:<6} ", style="bold red" if error else SOURCE_STYLE[step.source])
        if facts := step_facts(step):
            head.append_text(_styled(terminal_text(facts), "dim"))
        body: list[RenderableType] = []
        if step.message:
            message = terminal_text(shorten(step.message, MESSAGE_CHARS, MESSAGE_LINES), multiline=True)
            body.append(_styled(message, "red" if error else ""))
        if step.reasoning_content:
            thought = terminal_text("thinking: " + shorten(step.reasoning_content, 300, 4), multiline=True)
            body.append(_styled(thought, "dim italic"))
        for shown in shown_calls(step):
            body.append(_styled(terminal_text("→ " + shown.call), "yellow"))
            if shown.result is not None:
                result = terminal_text(("✗ " if shown.failed else "← ") + shown.result, multiline=True)
                body.append(Padding(_styled(result, "red" if shown.failed else "dim"), (0, 0, 0, 2)))
        out.append(head)
        if body:
            out.append(Padding(Group(*body), (0, 0, 0, width + 8)))
    return out


def _styled(text: Text, style: str) -> Text:
    if style:
        text.stylize(style)
    return text


def trajectory_view(trajectory: Trajectory, title: str) -> RenderableType:
    """The whole trajectory: its agent and model, every step, then each side conversation."""
    agent = trajectory.agent
    model = f" · model {agent.model_name}" if agent.model_name else ""
    head = Text.assemble(
        Text("trajectory ", style="bold"),
        terminal_text(f"of {title}: {agent.name} {agent.version}{model} · {plural(len(trajectory.steps), 'step')}"),
    )
    parts: list[RenderableType] = [head]
    if trajectory.notes:
        parts.append(Text.assemble(Text("notes: ", style="dim"), terminal_text(trajectory.notes, multiline=True)))
    parts += _steps(trajectory)
    for sub in trajectory.subagent_trajectories or []:
        side = f"side conversation {sub.trajectory_id or ''} ({plural(len(sub.steps), 'step')})"
        parts += [Text(""), Text.assemble(Text("── ", style="dim"), terminal_text(side))]
        parts += _steps(sub)
    worktrial = (trajectory.extra or {}).get("worktrial")
    if isinstance(worktrial, dict):
        said = [
            f"{plural(worktrial[k], noun)} {verb}"
            for k, noun, verb in (("redactions", "secret value", "redacted"), ("cut_texts", "text", "cut"))
            if isinstance(worktrial.get(k), int) and worktrial[k]
        ]
        if isinstance(worktrial.get("dropped_steps"), int) and worktrial["dropped_steps"]:
            said.append(f"{plural(worktrial['dropped_steps'], 'step')} not kept (size limit)")
        if said:
            parts.append(Text(" · ".join(said), style="dim"))
    return Group(*parts)
