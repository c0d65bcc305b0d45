"""Static lints of a suite: mistakes that make a suite measure something else than its author meant.

Pure functions of the parsed suite; ``worktrial check`` reports them next to what running the suite finds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Literal

from pydantic import BaseModel

from worktrial.analysis.agent_code import NOTE as AGENT_CODE_NOTE
from worktrial.analysis.agent_code import agent_code_warning
from worktrial.model.commands import Command
from worktrial.model.suite import Suite, Task

# An agent gets at least this long in any realistic suite; less and most attempts are timeouts.
MIN_AGENT_TIMEOUT_SECS = 60
# A verify command on a loaded CI machine easily takes a few seconds; less makes verdicts depend on load.
MIN_VERIFY_TIMEOUT_SECS = 10

_OPERATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "<<", "2>", "2>&1", ">&2", "1>&2", "2>/dev/null"})
_VARIABLE = re.compile(r"\$[A-Za-z_{(?#@*0-9]")
_ASSIGNED_QUOTE = re.compile(r"=['\"]")


class Lint(BaseModel):
    """One finding: where it is, what is wrong, and (when there is one) the fix."""

    task_id: str | None
    where: str
    message: str
    suggestion: str | None = None
    severity: Literal["problem", "warning"] = "problem"
    """A warning is shown but does not fail ``worktrial check`` (a risk the author may have accepted)."""
    note: str | None = None
    """What the finding risks and how to avoid it, when many lints share it: reports say it once, under them."""


def shell_syntax(command: str) -> list[str]:
    """Tokens of a plain string command that a shell would interpret but worktrial passes literally.

    A plain string is split on whitespace with no shell, so ``a && b`` runs ``a`` with the arguments
    ``&&`` and ``b``. JSON-looking arguments such as ``{"a":1}`` are deliberately not flagged: passing them
    through unchanged is exactly what the plain form is for.
    """
    found: list[str] = []
    for token in command.split():
        if (
            token in _OPERATORS
            or token[0] in "|<>'\"`~"
            or token.startswith(("2>", "&&", "1>"))
            or token.endswith((";", "|", "&&", "'", "`"))
            or "`" in token
            or _VARIABLE.search(token)
            or _ASSIGNED_QUOTE.search(token)
        ):
            found.append(token)
    return found


def _commands(task: Task) -> Iterator[tuple[str, int, Command]]:
    for field, commands in (
        ("setup_commands", task.setup_commands),
        ("solution", task.solution or []),
        ("verify_commands", task.verify_commands),
    ):
        for i, command in enumerate(commands):
            yield field, i, command


def lint_task(task: Task, index: int) -> list[Lint]:
    lints: list[Lint] = []
    for field, i, command in _commands(task):
        if not isinstance(command, str):
            continue
        tokens = shell_syntax(command)
        if tokens:
            shown = " ".join(dict.fromkeys(tokens))
            lints.append(
                Lint(
                    task_id=task.id,
                    where=f"$.tasks[{index}].{field}[{i}]",
                    message=f"plain string command contains shell syntax that is NOT interpreted: {shown}",
                    suggestion=json.dumps({"sh": " ".join(command.split())}),
                )
            )
    for i, command in enumerate(task.verify_commands):
        warning = agent_code_warning(command)
        if warning:
            where = f"$.tasks[{index}].verify_commands[{i}]"
            lints.append(Lint(task_id=task.id, where=where, message=warning, severity="warning", note=AGENT_CODE_NOTE))
    if task.timeout_secs < MIN_AGENT_TIMEOUT_SECS:
        lints.append(
            Lint(
                task_id=task.id,
                where=f"$.tasks[{index}].timeout_secs",
                message=f"timeout_secs {task.timeout_secs} is very short for an agent (under "
                f"{MIN_AGENT_TIMEOUT_SECS}s): attempts would measure speed, not ability",
            )
        )
    if task.verify_timeout_secs < MIN_VERIFY_TIMEOUT_SECS:
        lints.append(
            Lint(
                task_id=task.id,
                where=f"$.tasks[{index}].verify_timeout_secs",
                message=f"verify_timeout_secs {task.verify_timeout_secs} is very short (under "
                f"{MIN_VERIFY_TIMEOUT_SECS}s): verdicts would depend on machine load",
            )
        )
    return lints


def duplicate_prompts(tasks: Sequence[Task]) -> list[Lint]:
    """Tasks whose prompts are the same text (ignoring whitespace) ask the agent the same thing twice."""
    seen: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        seen.setdefault(" ".join(task.prompt.split()), []).append(i)
    lints: list[Lint] = []
    for indices in seen.values():
        if len(indices) < 2:
            continue
        ids = ", ".join(tasks[i].id for i in indices)
        for i in indices:
            lints.append(
                Lint(
                    task_id=tasks[i].id,
                    where=f"$.tasks[{i}].prompt",
                    message=f"duplicate prompt: tasks {ids} have the same prompt",
                )
            )
    return lints


def lint_suite(suite: Suite) -> list[Lint]:
    """Every lint of the suite, in task order."""
    lints = [lint for i, task in enumerate(suite.tasks) for lint in lint_task(task, i)]
    lints += duplicate_prompts(suite.tasks)
    order = {t.id: i for i, t in enumerate(suite.tasks)}
    return sorted(lints, key=lambda lint: order.get(lint.task_id or "", -1))
