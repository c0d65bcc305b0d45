"""The bundled agents that need no model: oracle, nop and command."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worktrial.agents.base import (
    Agent,
    AgentContext,
    AgentError,
    AgentOptions,
    AgentOutput,
    AgentResult,
    AgentSpec,
    launch_error,
)
from worktrial.agents.registry import hookimpl
from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.isolation.proc import run_command
from worktrial.model.artifacts import STREAM_TAIL_BYTES
from worktrial.model.commands import SHELL, display
from worktrial.model.records import Tokens, Usage
from worktrial.model.suite import SUITE_DIR_ENV


class OracleAgent:
    """Runs the task's reference ``solution``: proves a suite is solvable and its verifiers accept it."""

    name = "oracle"

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        if not ctx.task.solution:
            return AgentResult(claimed=None, error=AgentError("no_solution", "task has no solution"))
        usage = Usage(tokens=Tokens(input=0, output=0), cost_usd=0.0, turns=0)
        env = {**ctx.env, SUITE_DIR_ENV: str(ctx.suite_dir)} if ctx.suite_dir else ctx.env
        for i, command in enumerate(ctx.task.solution, start=1):
            result = run_command(command, cwd=ctx.worktree, env=env, timeout=ctx.remaining(), scope=ctx.scope)
            usage.output_bytes += result.output_bytes
            usage.tool_counts["solution_command"] = i
            if result.timed_out:
                return AgentResult(claimed=None, usage=usage, timed_out=True)
            if not result.ok:
                why = result.describe_failure(f"solution step {i} ({display(command)})")
                return AgentResult(claimed=False, usage=usage, reason=why)
        return AgentResult(claimed=True, usage=usage)


class NopAgent:
    """Does nothing and claims success: a verify command that then passes measures nothing."""

    name = "nop"

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        return AgentResult(claimed=True, usage=Usage(tokens=Tokens(input=0, output=0), cost_usd=0.0, turns=0))


USAGE_INT_FIELDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cached_input_tokens": "cached_input",
    "cache_creation_tokens": "cache_creation",
    "reasoning_tokens": "reasoning",
}


def _count_map(value: Any, key: str, notes: list[str]) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()
    ):
        notes.append(f"usage file: {key} must be an object of name -> non-negative integer; ignored")
        return {}
    return dict(value)


def read_usage_file(path: Path) -> Usage:
    """Usage a command agent wrote to ``$WORKTRIAL_USAGE_FILE``; problems become notes, never errors."""
    usage = Usage()
    if not path.exists():
        return usage
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        usage.notes.append(f"usage file is not valid JSON: {type(exc).__name__}")
        return usage
    except OSError as exc:
        usage.notes.append(f"usage file unreadable: {exc.strerror}")
        return usage
    if not isinstance(raw, dict):
        usage.notes.append("usage file must hold a JSON object; ignored")
        return usage
    tokens: dict[str, int] = {}
    for key, attr in USAGE_INT_FIELDS.items():
        if key in raw:
            value = raw[key]
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                tokens[attr] = value
            else:
                usage.notes.append(f"usage file: {key} must be a non-negative integer; ignored")
    usage.tokens = Tokens(**tokens)
    if "cost_usd" in raw:
        cost = raw["cost_usd"]
        if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
            usage.cost_usd = float(cost)
        else:
            usage.notes.append("usage file: cost_usd must be a non-negative number; ignored")
    if "turns" in raw:
        turns = raw["turns"]
        if isinstance(turns, int) and not isinstance(turns, bool) and turns >= 0:
            usage.turns = turns
        else:
            usage.notes.append("usage file: turns must be a non-negative integer; ignored")
    if "tool_calls" in raw:
        usage.tool_counts = _count_map(raw["tool_calls"], "tool_calls", usage.notes)
    if "errors" in raw:
        usage.error_counts = _count_map(raw["errors"], "errors", usage.notes)
    return usage


_SHELL_WORDS = frozenset(
    [
        "!",
        "{",
        "(",
        "[",
        "[[",
        ".",
        ":",
        "cd",
        "case",
        "command",
        "eval",
        "exec",
        "exit",
        "export",
        "for",
        "function",
        "if",
        "read",
        "set",
        "source",
        "test",
        "then",
        "time",
        "trap",
        "true",
        "false",
        "ulimit",
        "umask",
        "unset",
        "until",
        "while",
    ]
)


def command_program(cmd: str) -> str | None:
    """The program a simple command line starts, or None when the shell decides (builtins, syntax, variables)."""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return None
    first = words[0]
    if first in _SHELL_WORDS or any(ch in first for ch in "$`*?;&|<>(){}") or first.startswith("~"):
        return None
    return first


class CommandAgent:
    """Any program: ``/bin/sh -c CMD`` in the worktree, prompt on stdin; exit 0 claims success."""

    name = "command"

    def __init__(self, options: AgentOptions) -> None:
        if not options.agent_cmd or not options.agent_cmd.strip():
            raise BadInputError("--agent command needs --agent-cmd CMD (the command line that runs your agent)")
        self.cmd = options.agent_cmd
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.cmd}

    def preflight(self) -> None:
        """Refuse before the first attempt when the command's program does not resolve (not installed, typo)."""
        program = command_program(self.cmd)
        if program is None:
            return
        if "/" in program:
            path = Path(program)
            if path.is_absolute() and not (path.is_file() and os.access(path, os.X_OK)):
                raise BadInputError(f"--agent-cmd: {program} does not exist or is not executable")
            return
        if shutil.which(program) is None:
            raise BadInputError(
                f"--agent-cmd: {program!r} is not installed or not on PATH; install it, or give its full path"
            )

    def run(self, ctx: AgentContext) -> AgentResult:
        usage_file = ctx.scratch / "usage.json"
        env = dict(ctx.env)
        env.update(
            {
                "WORKTRIAL_PROMPT": ctx.task.prompt,
                "WORKTRIAL_TASK_ID": ctx.task.id,
                "WORKTRIAL_ATTEMPT": str(ctx.attempt),
                "WORKTRIAL_WORKTREE": str(ctx.worktree),
                "WORKTRIAL_USAGE_FILE": str(usage_file),
            }
        )
        result = proc.run(
            [SHELL, "-c", self.cmd],
            cwd=ctx.worktree,
            env=env,
            timeout=ctx.remaining(),
            stdin=ctx.task.prompt.encode("utf-8"),
            scope=ctx.scope,
            tail_bytes=STREAM_TAIL_BYTES,
        )
        usage = read_usage_file(usage_file)
        usage.output_bytes = result.output_bytes
        output = AgentOutput.of(result)
        if result.timed_out:
            return AgentResult(claimed=None, usage=usage, timed_out=True, output=output)
        if (error := launch_error(result, "agent")) is not None:
            return AgentResult(claimed=None, usage=usage, error=error, output=output)
        if result.ok:
            return AgentResult(claimed=True, usage=usage, output=output)
        return AgentResult(claimed=False, usage=usage, reason=result.describe_failure("agent"), output=output)


_BUNDLED: list[tuple[str, str, Callable[[AgentOptions], Agent]]] = [
    ("oracle", "runs each task's reference solution (suite self-check)", OracleAgent),
    ("nop", "does nothing and claims success (verifiers must fail on it)", NopAgent),
    ("command", "any program via --agent-cmd; exit 0 claims success", CommandAgent),
]


@hookimpl
def register_agents(register: Callable[[AgentSpec], None]) -> None:
    for name, summary, factory in _BUNDLED:
        register(AgentSpec(name, summary, factory, uses_model=False))
