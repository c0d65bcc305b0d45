"""The bundled agents that need no model: oracle, nop and command."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
from worktrial.agents.command_line import command_program
from worktrial.agents.prompt import (
    MAX_ARG_BYTES,
    inline_prompt_env,
    kib,
    oversized_argument,
    prompt_file_env,
    prompt_file_of,
)
from worktrial.agents.registry import hookimpl
from worktrial.errors import BadInputError
from worktrial.gateway import Route
from worktrial.isolation import proc
from worktrial.isolation.childenv import check_patterns
from worktrial.isolation.proc import run_command
from worktrial.isolation.safefs import read_regular
from worktrial.model.artifacts import STREAM_TAIL_BYTES
from worktrial.model.commands import SHELL, display
from worktrial.model.records import ErrorCategory, Tokens, Usage
from worktrial.model.suite import SUITE_DIR_ENV


class OracleAgent:
    """Runs the task's reference ``solution``: proves a suite is solvable and its verifiers accept it."""

    name = "oracle"
    sandboxed_files = True
    """Every file it touches is touched by a program it starts in the attempt's sandbox (overlay rooms)."""

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        if not ctx.task.solution:
            return AgentResult(claimed=None, error=AgentError(ErrorCategory.NO_SOLUTION, "task has no solution"))
        usage = Usage(tokens=Tokens(input=0, output=0), cost_usd=0.0, turns=0)
        env = {**ctx.env, SUITE_DIR_ENV: str(ctx.suite_dir)} if ctx.suite_dir else ctx.env
        scope = ctx.scope
        if ctx.suite_dir and scope.sandbox is not None:
            # The reference solution is the suite's own code: it may read the suite's files, as verify does.
            scope = scope.confined(scope.sandbox.widened([ctx.suite_dir]))
        for i, command in enumerate(ctx.task.solution, start=1):
            result = run_command(command, cwd=ctx.worktree, env=env, timeout=ctx.remaining(), scope=scope)
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
    sandboxed_files = True

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        return AgentResult(claimed=True, usage=Usage(tokens=Tokens(input=0, output=0), cost_usd=0.0, turns=0))


# Limits on what an agent may report (DESIGN.md, "Trust boundary"): beyond them a value is a lie or an attack
# (a cost of 1e308 would overflow the run's totals), so it is dropped with a note like any other bad value.
MAX_TOKENS = 10**12
MAX_COST_USD = 1e6
MAX_TURNS = 10**7
MAX_USAGE_FILE_BYTES = 1024 * 1024
MAX_USAGE_NESTING = 8
MAX_COUNT_NAMES = 1000
MAX_NAME_CHARS = 200
NonNegative = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Counts = Annotated[dict[Name, NonNegative], Field(max_length=MAX_COUNT_NAMES)]
INTEGER = "must be a non-negative integer"
COUNTS = "must be an object of name -> non-negative integer"


class UsageFile(BaseModel):
    """What a command agent may write to ``$WORKTRIAL_USAGE_FILE`` (docs/agents.md); unknown keys are ignored.

    Each key is judged on its own: one bad value becomes a note and is dropped, the rest still counts.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    input_tokens: NonNegative | None = Field(None, description=INTEGER)
    output_tokens: NonNegative | None = Field(None, description=INTEGER)
    cached_input_tokens: NonNegative | None = Field(None, description=INTEGER)
    cache_creation_tokens: NonNegative | None = Field(None, description=INTEGER)
    reasoning_tokens: NonNegative | None = Field(None, description=INTEGER)
    cost_usd: Annotated[float, Field(ge=0, le=MAX_COST_USD, allow_inf_nan=False)] | None = Field(
        None, description="must be a non-negative number"
    )
    turns: Annotated[int, Field(ge=0, le=MAX_TURNS)] | None = Field(None, description=INTEGER)
    tool_calls: Counts | None = Field(None, description=COUNTS)
    errors: Counts | None = Field(None, description=COUNTS)

    def usage(self) -> Usage:
        return Usage(
            tokens=Tokens(
                input=self.input_tokens,
                output=self.output_tokens,
                cached_input=self.cached_input_tokens,
                cache_creation=self.cache_creation_tokens,
                reasoning=self.reasoning_tokens,
            ),
            cost_usd=self.cost_usd,
            turns=self.turns,
            tool_counts=dict(self.tool_calls or {}),
            error_counts=dict(self.errors or {}),
        )


GATEWAY_URL_VAR = "WORKTRIAL_BASE_URL"
"""With ``--base-url``: the URL a command agent calls its model at, the run's gateway in front of ``--base-url``."""
USAGE_FILE = "usage.json"
"""Name of ``$WORKTRIAL_USAGE_FILE`` in the attempt's scratch directory."""
TRAJECTORY_FILE = "trajectory.json"
"""Name of ``$WORKTRIAL_TRAJECTORY_FILE`` in the attempt's scratch directory (set only with ``--trajectories``)."""


def command_env(ctx: AgentContext, pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a command agent (``--agent-cmd`` or a custom agent): the attempt's plus ``WORKTRIAL_*``,
    with no credential-like variable of the caller's but those ``pass_env`` names (``--pass-env``, ``pass_env``).

    The one definition of the contract documented in docs/agents.md, so both kinds of command agent see the same.
    """
    env = {
        **ctx.env_with(pass_env),
        **inline_prompt_env(ctx.task.prompt),
        **prompt_file_env(prompt_file_of(ctx)),
        "WORKTRIAL_TASK_ID": ctx.task.id,
        "WORKTRIAL_ATTEMPT": str(ctx.attempt),
        "WORKTRIAL_WORKTREE": str(ctx.worktree),
        "WORKTRIAL_SCRATCH": str(ctx.scratch),
        "WORKTRIAL_USAGE_FILE": str(ctx.scratch / USAGE_FILE),
    }
    if ctx.trajectory is not None:  # the run records trajectories: the agent may write its own there
        env["WORKTRIAL_TRAJECTORY_FILE"] = str(ctx.scratch / TRAJECTORY_FILE)
    return env


PROMPT_PLACEHOLDER = "{prompt}"
PROMPT_FILE_PLACEHOLDER = "{prompt_file}"


def splice_prompt(command: str, prompt: str, prompt_file: Path | None) -> str:
    """``command`` with ``{prompt_file}`` and ``{prompt}`` replaced by the path and the text, each shell-quoted.

    The one rule for ``--agent-cmd`` and a custom agent's ``command`` (docs/agents.md): the prompt is inserted last
    and never scanned again, so a prompt that itself holds ``{prompt_file}`` arrives as written.
    """
    if prompt_file is not None:
        command = command.replace(PROMPT_FILE_PLACEHOLDER, shlex.quote(str(prompt_file)))
    return command.replace(PROMPT_PLACEHOLDER, shlex.quote(prompt))


def too_long_for_command_line(command: str, where: str) -> AgentError | None:
    """The attempt's error when the spliced prompt makes ``command`` longer than the kernel takes in one argument."""
    size = oversized_argument([command])
    if size is None:
        return None
    message = (
        f"{where} puts the prompt in its command line ({kib(size)}), over the {kib(MAX_ARG_BYTES + 1)} the kernel "
        "allows for one argument; use {prompt_file} or stdin instead"
    )
    return AgentError(ErrorCategory.PROMPT_TOO_LONG, message)


def read_usage_file(path: Path) -> Usage:
    """Usage a command agent wrote to ``$WORKTRIAL_USAGE_FILE``; problems become notes, never errors."""
    if not os.path.lexists(path):
        return Usage()
    try:
        # A regular file only (never through a symlink, never blocking on a FIFO), and bounded.
        data = read_regular(path, MAX_USAGE_FILE_BYTES)
    except OSError as exc:
        return Usage(notes=[f"usage file unreadable: {exc.strerror}"])
    except ValueError as exc:
        return Usage(notes=[f"usage file ignored: {exc}"])
    if _nesting(data) > MAX_USAGE_NESTING:
        return Usage(notes=[f"usage file ignored: JSON nested deeper than {MAX_USAGE_NESTING} levels"])
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return Usage(notes=[f"usage file is not valid JSON: {type(exc).__name__}"])
    except ValueError:  # an integer of more digits than Python converts (4,300)
        return Usage(notes=["usage file holds a number too long to read; ignored"])
    if not isinstance(raw, dict):
        return Usage(notes=["usage file must hold a JSON object; ignored"])
    notes: list[str] = []
    try:
        parsed = UsageFile.model_validate(raw)
    except ValidationError as exc:
        bad = list(dict.fromkeys(str(err["loc"][0]) for err in exc.errors()))
        notes = [f"usage file: {key} {UsageFile.model_fields[key].description}; ignored" for key in bad]
        parsed = UsageFile.model_validate({key: value for key, value in raw.items() if key not in bad})
    usage = parsed.usage()
    usage.notes.extend(notes)
    return usage


def _nesting(data: bytes) -> int:
    """The deepest bracket nesting of a JSON text (strings skipped), found without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _shell_finds(program: str) -> bool:
    """Whether ``sh`` itself resolves ``program`` (a builtin the list in command_line misses): asked before refusing."""
    found = proc.run([SHELL, "-c", 'command -v -- "$1"', SHELL, program], cwd=Path.cwd(), timeout=10, sweep=False)
    return found.ok


class CommandAgent:
    """Any program: ``/bin/sh -c CMD`` in the worktree; exit 0 claims success.

    The prompt is on stdin, or, where ``CMD`` says ``{prompt}``, in its command line, shell-quoted as for custom
    agents; ``{prompt_file}`` names the prompt's file.
    """

    name = "command"
    sandboxed_files = True

    def __init__(self, options: AgentOptions) -> None:
        if not options.agent_cmd or not options.agent_cmd.strip():
            raise BadInputError("--agent command needs --agent-cmd CMD (the command line that runs your agent)")
        self.cmd = options.agent_cmd
        self.options = options
        self.pass_env = check_patterns(options.pass_env, "--pass-env")
        self.stdin_prompt = PROMPT_PLACEHOLDER not in self.cmd

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"name": self.name, "command": self.cmd}
        if self.pass_env:
            described["pass_env"] = sorted(self.pass_env)  # names only
        return described

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
        if shutil.which(program) is None and not _shell_finds(program):
            raise BadInputError(
                f"--agent-cmd: {program!r} is not installed or not on PATH; install it, or give its full path"
            )

    def run(self, ctx: AgentContext) -> AgentResult:
        usage_file = ctx.scratch / USAGE_FILE
        env = command_env(ctx, self.pass_env)
        command = splice_prompt(self.cmd, ctx.task.prompt, prompt_file_of(ctx))
        if (too_long := too_long_for_command_line(command, "--agent-cmd")) is not None:
            return AgentResult(claimed=None, error=too_long)
        program = [SHELL, "-c", command]
        if ctx.gateway is not None and self.options.base_url:
            # --base-url through the run's model gateway: usage and provider failures are the harness's to see.
            provider = self.options.model.split("/", 1)[0] if self.options.model and "/" in self.options.model else ""
            route = Route(provider or "openai", self.options.base_url, None, provider or "openai", "--pass-env")
            env[GATEWAY_URL_VAR] = ctx.gateway.route(route)
            ctx.gateway.bypass_proxies(env)
            program = ctx.gateway.wrap(program)
        result = proc.run(
            program,
            cwd=ctx.worktree,
            env=env,
            stdin=ctx.task.prompt.encode("utf-8") if self.stdin_prompt else None,
            tail_bytes=STREAM_TAIL_BYTES,
            **ctx.limits(),
        )
        usage = read_usage_file(usage_file)
        usage.output_bytes = result.output_bytes
        output = AgentOutput.of(result)
        if result.timed_out:
            return AgentResult(claimed=None, usage=usage, timed_out=True, output=output, ended=result.ended)
        if (error := launch_error(result, "agent")) is not None:
            return AgentResult(claimed=None, usage=usage, error=error, output=output)
        if result.ok:
            return AgentResult(claimed=True, usage=usage, output=output, ended=result.ended)
        reason = result.describe_failure("agent")
        return AgentResult(claimed=False, usage=usage, reason=reason, output=output, ended=result.ended)


_BUNDLED: list[tuple[str, str, Callable[[AgentOptions], Agent]]] = [
    ("oracle", "runs each task's reference solution (suite self-check)", OracleAgent),
    ("nop", "does nothing and claims success (verifiers must fail on it)", NopAgent),
    ("command", "any program via --agent-cmd; exit 0 claims success", CommandAgent),
]


@hookimpl
def register_agents(register: Callable[[AgentSpec], None]) -> None:
    for name, summary, factory in _BUNDLED:
        register(AgentSpec(name, summary, factory, uses_model=False))
