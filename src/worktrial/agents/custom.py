"""Custom agents declared in worktrial.toml, no Python needed::

    [agents.my-agent]
    command = "my-agent --yes --json {prompt}"   # {prompt} is replaced shell-quoted; without it, stdin
    env = { MY_AGENT_HOME = "/tmp/x" }          # added to the agent's environment
    parser = "claude-code"                      # a preset's parser, or "usage-file" (the default)
    model_flag = "--model"                      # how --model reaches the agent (optional)

The command runs with ``/bin/sh -c`` in the worktree, with the same ``WORKTRIAL_*`` variables as the
command agent plus ``WORKTRIAL_SCRATCH`` (the per-attempt directory where the file-based parsers look:
``aider-analytics.jsonl`` for ``aider``, ``mini-trajectory.json`` for ``mini-swe-agent``).
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from worktrial.agents.base import Agent, AgentContext, AgentError, AgentOptions, AgentResult, launch_error
from worktrial.agents.presets import PARSERS
from worktrial.agents.presets.parsing import ExitInfo, OutputParser, Verdict, exit_reason
from worktrial.agents.simple import read_usage_file
from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.model.commands import SHELL

USAGE_FILE_PARSER = "usage-file"
KNOWN_KEYS = {"command", "env", "parser", "model_flag", "description"}


def parser_names() -> list[str]:
    return [USAGE_FILE_PARSER, *PARSERS]


class UsageFileParser:
    """The command-agent contract: exit 0 claims success; usage from ``$WORKTRIAL_USAGE_FILE`` if written."""

    def feed(self, chunk: bytes) -> None:
        return None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        usage = read_usage_file(exit_info.scratch / "usage.json")
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if exit_info.returncode == 0:
            return Verdict(claimed=True, usage=usage)
        return Verdict(claimed=False, usage=usage, reason=exit_reason("agent", exit_info))


def custom_tables(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``[agents.NAME]`` tables that define a command (preset override tables have none)."""
    agents = config.get("agents") if isinstance(config, dict) else None
    if not isinstance(agents, dict):
        return {}
    return {name: table for name, table in agents.items() if isinstance(table, dict) and "command" in table}


class CustomAgent:
    """An agent defined by a command template in worktrial.toml and one of the built-in parsers."""

    def __init__(self, name: str, table: dict[str, Any], options: AgentOptions) -> None:
        where = f"[agents.{name}]"
        unknown = sorted(set(table) - KNOWN_KEYS)
        if unknown:
            raise BadInputError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KNOWN_KEYS))}")
        command = table.get("command")
        if not isinstance(command, str) or not command.strip():
            raise BadInputError(f"{where}.command must be a non-empty string")
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BadInputError(f"{where}.env must be a table of string values")
        parser = table.get("parser", USAGE_FILE_PARSER)
        if parser not in parser_names():
            raise BadInputError(f"{where}.parser must be one of: {', '.join(parser_names())} (got {parser!r})")
        model_flag = table.get("model_flag")
        if model_flag is not None and (not isinstance(model_flag, str) or not model_flag.strip()):
            raise BadInputError(f"{where}.model_flag must be a non-empty string")
        self.name = name
        self.command = command
        self.env: dict[str, str] = dict(env)
        self.parser_name: str = parser
        self.model_flag: str | None = model_flag
        self.options = options
        self.stdin_prompt = "{prompt}" not in command

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "name": self.name,
            "custom": True,
            "command": self.command,
            "parser": self.parser_name,
            "prompt": "stdin" if self.stdin_prompt else "argument",
        }
        if self.options.model:
            described["model"] = self.options.model
        if self.env:
            described["env_keys"] = sorted(self.env)  # values may be secrets
        return described

    def program(self) -> str | None:
        """The program the command starts with, when it is a plain word that can be looked up on PATH."""
        try:
            words = shlex.split(self.command)
        except ValueError:
            return None
        if not words or "=" in words[0] or any(ch in words[0] for ch in "$`;|&<>(){}"):
            return None
        return words[0]

    def preflight(self) -> None:
        program = self.program()
        if program is not None and shutil.which(program) is None:
            raise BadInputError(f"agent {self.name}: `{program}` (from [agents.{self.name}].command) is not on PATH")

    def render(self, prompt: str) -> str:
        """The shell command line for one attempt: prompt and model spliced in, shell-quoted."""
        command = self.command
        model_args = ""
        if self.model_flag and self.options.model:
            model_args = f"{self.model_flag} {shlex.quote(self.options.model)}"
        if "{model_args}" in command:
            command = command.replace("{model_args}", model_args)
        elif model_args:
            head, sep, tail = command.strip().partition(" ")
            command = f"{head} {model_args}{sep}{tail}"
        return command.replace("{prompt}", shlex.quote(prompt))

    def new_parser(self) -> OutputParser:
        if self.parser_name == USAGE_FILE_PARSER:
            return UsageFileParser()
        return PARSERS[self.parser_name]()

    def run(self, ctx: AgentContext) -> AgentResult:
        env = dict(ctx.env)
        env.update(
            {
                "WORKTRIAL_PROMPT": ctx.task.prompt,
                "WORKTRIAL_TASK_ID": ctx.task.id,
                "WORKTRIAL_ATTEMPT": str(ctx.attempt),
                "WORKTRIAL_WORKTREE": str(ctx.worktree),
                "WORKTRIAL_SCRATCH": str(ctx.scratch),
                "WORKTRIAL_USAGE_FILE": str(ctx.scratch / "usage.json"),
            }
        )
        env.update(self.env)
        parser = self.new_parser()
        result = proc.run(
            [SHELL, "-c", self.render(ctx.task.prompt)],
            cwd=ctx.worktree,
            env=env,
            timeout=ctx.remaining(),
            stdin=ctx.task.prompt.encode("utf-8") if self.stdin_prompt else None,
            on_stdout=parser.feed,
            scope=ctx.scope,
        )
        verdict = parser.finish(ExitInfo(result.returncode, result.timed_out, Path(ctx.scratch)))
        usage = verdict.usage
        usage.output_bytes = result.output_bytes
        if result.timed_out:
            return AgentResult(claimed=None, usage=usage, timed_out=True)
        if (error := launch_error(result, self.name)) is not None:
            return AgentResult(claimed=None, usage=usage, error=error)
        if verdict.error_category:
            error = AgentError(verdict.error_category, verdict.reason or f"{self.name} failed")
            return AgentResult(claimed=None, usage=usage, error=error)
        return AgentResult(claimed=verdict.claimed, usage=usage, reason=verdict.reason)


def create_custom_agent(name: str, options: AgentOptions) -> Agent | None:
    """The custom agent ``name`` from the merged config, or None when there is no such table."""
    table = custom_tables(options.config).get(name)
    return None if table is None else CustomAgent(name, table, options)
