"""Custom agents declared in worktrial.toml, no Python needed::

    [agents.my-agent]
    command = "my-agent --yes --json {prompt}"   # {prompt} is replaced shell-quoted; without it, stdin
                                                # ({prompt_file}: the path of the prompt's file, for any size)
    env = { MY_AGENT_HOME = "/tmp/x" }          # added to the agent's environment
    parser = "claude-code"                      # a preset's parser, or "usage-file" (the default)
    model_flag = "--model"                      # how --model reaches the agent (optional)
    price_model = "openai/gpt-5.1"              # price reported tokens by this route when no cost is reported
    pass_env = ["MY_AGENT_API_KEY"]             # credential variables of the caller it receives (none otherwise)

The command runs with ``/bin/sh -c`` in the worktree, with the same ``WORKTRIAL_*`` variables as the
command agent plus ``WORKTRIAL_SCRATCH`` (the per-attempt directory where the file-based parsers look:
``aider-analytics.jsonl`` for ``aider``, ``mini-trajectory.json`` for ``mini-swe-agent``).
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from worktrial.agents.base import Agent, AgentContext, AgentError, AgentOptions, AgentOutput, AgentResult, launch_error
from worktrial.agents.presets import PARSERS
from worktrial.agents.presets.parsing import ExitInfo, OutputParser, Verdict, exit_reason, watch_spend
from worktrial.agents.pricing import ResolvedPrice, cost_usd, resolve_price
from worktrial.agents.prompt import prompt_file_of
from worktrial.agents.simple import (
    USAGE_FILE,
    command_env,
    read_usage_file,
    splice_prompt,
    too_long_for_command_line,
)
from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.isolation.childenv import check_patterns
from worktrial.model.artifacts import STREAM_TAIL_BYTES
from worktrial.model.commands import SHELL
from worktrial.model.config import AgentConfig, Config

USAGE_FILE_PARSER = "usage-file"


def parser_names() -> list[str]:
    return [USAGE_FILE_PARSER, *PARSERS]


class UsageFileParser:
    """The command-agent contract: exit 0 claims success; usage from ``$WORKTRIAL_USAGE_FILE`` if written."""

    def feed(self, chunk: bytes) -> None:
        return None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        usage = read_usage_file(exit_info.scratch / USAGE_FILE)
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if exit_info.returncode == 0:
            return Verdict(claimed=True, usage=usage)
        return Verdict(claimed=False, usage=usage, reason=exit_reason("agent", exit_info))


def custom_tables(config: Config) -> dict[str, AgentConfig]:
    """``[agents.NAME]`` tables that define a command (preset override tables have none)."""
    return config.custom_agents()


class CustomAgent:
    """An agent defined by a command template in worktrial.toml and one of the built-in parsers."""

    sandboxed_files = True

    def __init__(self, name: str, table: AgentConfig, options: AgentOptions) -> None:
        """``table`` is already type-checked (``worktrial.model.config``); what is left needs the agent registry."""
        where = f"[agents.{name}]"
        if table.command is None:
            raise BadInputError(f"{where}.command is required for a custom agent")
        misplaced = [key for key in AgentConfig.PRESET_ONLY if key in table.model_fields_set]
        if misplaced:
            raise BadInputError(f"{where}: {', '.join(misplaced)} only apply to preset agents; put them in command")
        parser = table.parser or USAGE_FILE_PARSER
        if parser not in parser_names():
            raise BadInputError(f"{where}.parser must be one of: {', '.join(parser_names())} (got {parser!r})")
        self.name = name
        self.command = table.command
        self.env: dict[str, str] = dict(table.env)
        self.pass_env = check_patterns((*options.pass_env, *table.pass_env), "--pass-env")
        self.parser_name: str = parser
        self.model_flag: str | None = table.model_flag
        self.options = options
        self.stdin_prompt = "{prompt}" not in self.command
        self.price: ResolvedPrice | None = None
        self.price_model: str | None = table.price_model
        if table.price_model is not None:
            self.price = resolve_price(table.price_model, options.config)
            if self.price is None:
                raise BadInputError(
                    f"{where}.price_model {table.price_model!r} has no price; `worktrial prices` lists the priced "
                    f'models, or add [pricing."{table.price_model}"] with input and output prices'
                )

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
        if self.pass_env:
            described["pass_env"] = sorted(self.pass_env)  # names only
        if self.price is not None:
            described["price"] = {
                "route": self.price_model,
                "source": self.price.source,
                "taken_on": self.price.taken_on,
            }
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

    def render(self, prompt: str, prompt_file: Path | None = None) -> str:
        """The shell command line for one attempt: prompt, its file and model spliced in, shell-quoted."""
        command = self.command
        model_args = ""
        if self.model_flag and self.options.model:
            model_args = f"{self.model_flag} {shlex.quote(self.options.model)}"
        if "{model_args}" in command:
            command = command.replace("{model_args}", model_args)
        elif model_args:
            head, sep, tail = command.strip().partition(" ")
            command = f"{head} {model_args}{sep}{tail}"
        return splice_prompt(command, prompt, prompt_file)

    def new_parser(self) -> OutputParser:
        if self.parser_name == USAGE_FILE_PARSER:
            return UsageFileParser()
        return PARSERS[self.parser_name]()

    def run(self, ctx: AgentContext) -> AgentResult:
        env = command_env(ctx, self.pass_env)
        env.update(self.env)
        command = self.render(ctx.task.prompt, prompt_file_of(ctx))
        if (too_long := too_long_for_command_line(command, f"[agents.{self.name}].command")) is not None:
            return AgentResult(claimed=None, error=too_long)
        parser = self.new_parser()
        result = proc.run(
            [SHELL, "-c", command],
            cwd=ctx.worktree,
            env=env,
            stdin=ctx.task.prompt.encode("utf-8") if self.stdin_prompt else None,
            on_stdout=watch_spend(parser, lambda: self.price.price if self.price else None, ctx),
            tail_bytes=STREAM_TAIL_BYTES,
            **ctx.limits(),
        )
        output = AgentOutput.of(result)  # the tails, for the attempt's local artifacts
        verdict = parser.finish(ExitInfo(result.returncode, result.timed_out, Path(ctx.scratch), result.stderr_tail))
        usage = verdict.usage
        usage.output_bytes = result.output_bytes
        usage.model = verdict.model  # what the CLI says it ran, when its parser reads that
        if self.parser_name != USAGE_FILE_PARSER and usage.cost_usd == 0 and (usage.tokens.total() or 0) > 0:
            # A CLI reports 0 for a model it cannot price (your own usage file is taken at its word).
            usage.cost_usd = None
            usage.notes.append(f"{self.name} reported cost 0 for {usage.tokens.total()} tokens: treated as unpriced")
        if usage.cost_usd is None and self.price is not None:
            usage.cost_usd = cost_usd(usage.tokens, self.price.price)
        if result.timed_out:
            return AgentResult(output=output, claimed=None, usage=usage, timed_out=True, ended=result.ended)
        if (error := launch_error(result, self.name)) is not None:
            return AgentResult(output=output, claimed=None, usage=usage, error=error)
        if verdict.error_category:
            error = AgentError(verdict.error_category, verdict.reason or f"{self.name} failed", fatal=verdict.fatal)
            return AgentResult(output=output, claimed=None, usage=usage, error=error, ended=result.ended)
        return AgentResult(
            output=output, claimed=verdict.claimed, usage=usage, reason=verdict.reason, ended=result.ended
        )


def create_custom_agent(name: str, options: AgentOptions) -> Agent | None:
    """The custom agent ``name`` from the merged config, or None when there is no such table."""
    table = custom_tables(options.config).get(name)
    return None if table is None else CustomAgent(name, table, options)
