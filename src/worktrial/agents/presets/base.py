"""A preset is a declarative description of one agent CLI; ``PresetAgent`` runs any of them.

Each preset module states only what differs between CLIs: the binary, the headless argv, the
environment (above all the agent's own config-directory variable, pointed at the attempt's scratch
directory so attempts never share sessions, caches of conversation state or logins), how to install
it, and its output parser. Spawning, deadlines, bounded capture, version probing and the
"never crash on bad output" guarantees live here once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worktrial.agents.base import AgentContext, AgentError, AgentOptions, AgentResult
from worktrial.agents.presets.parsing import ExitInfo, ParserFactory
from worktrial.agents.pricing import ResolvedPrice, cost_usd, resolve_price
from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.model.config import AgentConfig

VERSION_TIMEOUT_SECS = 15.0


@dataclass(frozen=True)
class Invocation:
    """What a preset needs to build one command line."""

    prompt: str
    model: str | None
    scratch: Path
    worktree: Path
    extra_args: tuple[str, ...] = ()
    """``[agents.<preset>].args``: each preset places them before its prompt argument."""


ArgvBuilder = Callable[[Invocation], list[str]]
EnvBuilder = Callable[[Path], dict[str, str]]


@dataclass(frozen=True)
class PresetSpec:
    """One agent CLI, declaratively."""

    name: str
    binary: str
    summary: str
    install: str
    """How to install the CLI (shown when it is missing and in ``worktrial agents``)."""
    argv: ArgvBuilder
    """The arguments after the binary, prompt and model included."""
    parser: ParserFactory
    env: EnvBuilder = field(default=lambda scratch: {})
    """Extra environment, given the attempt's scratch directory (config dirs go there)."""
    stdin_prompt: bool = False
    """Send the prompt on stdin instead of (or as well as) in argv."""
    reports: tuple[str, ...] = ()
    """Figures the CLI reports, for docs and ``describe()``: tokens, cost, turns, tool calls."""
    version_args: tuple[str, ...] = ("--version",)
    check: Callable[[Mapping[str, str]], str | None] | None = None
    """Given the environment the agent would get, a reason it cannot run headless here (or None)."""
    price_provider: str | None = None
    """For a CLI that reports tokens of one model but no cost: the provider under which a bare ``--model``
    is looked up in the price table (``provider/model`` routes are looked up as given)."""


def first_line(data: bytes, limit: int = 200) -> str | None:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()[:limit]
    return None


def probe_version(binary_path: str, args: tuple[str, ...], env: Mapping[str, str]) -> str | None:
    """The CLI's own version line, or None when it would not say within a short timeout."""
    with tempfile.TemporaryDirectory(prefix="worktrial-version-") as tmp:
        result = proc.run([binary_path, *args], cwd=tmp, env=env, timeout=VERSION_TIMEOUT_SECS)
    if result.timed_out or result.start_error or result.not_found:
        return None
    return first_line(result.stdout_tail) or first_line(result.stderr_tail)


class PresetAgent:
    """Runs one preset headless in the attempt's worktree and reads its own usage report.

    ``[agents.<preset>]`` in worktrial.toml may add ``env`` (a table), ``args`` (extra arguments placed
    before the prompt) and ``binary`` (a different executable name or path).
    """

    def __init__(self, spec: PresetSpec, options: AgentOptions) -> None:
        self.spec = spec
        self.name = spec.name
        self.options = options
        overrides = options.config.agents.get(spec.name, AgentConfig())
        misplaced = [key for key in AgentConfig.CUSTOM_ONLY if key in overrides.model_fields_set]
        if misplaced:
            raise BadInputError(
                f"[agents.{spec.name}]: {', '.join(misplaced)} cannot apply to the {spec.name} preset "
                "(it overrides only env, args and binary; name a custom agent differently)"
            )
        self.extra_env = dict(overrides.env)
        self.extra_args = list(overrides.args)
        self.binary = overrides.binary or spec.binary
        self.binary_path: str | None = None
        self.version: str | None = None

    # -- protocol ---------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        example = Invocation(
            prompt="PROMPT",
            model=self.options.model,
            scratch=Path("SCRATCH"),
            worktree=Path("."),
            extra_args=tuple(self.extra_args),
        )
        described: dict[str, Any] = {
            "name": self.name,
            "preset": True,
            "binary": self.binary,
            "version": self.version,
            "command": [self.binary, *self.spec.argv(example)],
            "reports": list(self.spec.reports),
        }
        if self.options.model:
            described["model"] = self.options.model
        resolved = self._price()
        if resolved is not None:
            described["price"] = {"route": resolved[0], "source": resolved[1].source, "taken_on": resolved[1].taken_on}
        if self.extra_env:
            described["env_keys"] = sorted(self.extra_env)  # values may be secrets
        return described

    def preflight(self) -> None:
        installed, version = self.probe()
        if not installed:
            raise BadInputError(
                f"agent {self.name}: `{self.binary}` is not on PATH; install it with: {self.spec.install}"
            )
        self.version = version
        if self.spec.check is not None:
            env = dict(os.environ)
            env.update(self.extra_env)
            problem = self.spec.check(env)
            if problem:
                raise BadInputError(f"agent {self.name}: {problem}")

    def probe(self) -> tuple[bool, str | None]:
        """Whether the binary is on PATH and what version it reports (used by ``worktrial agents``)."""
        self.binary_path = shutil.which(self.binary)
        if self.binary_path is None:
            return False, None
        with tempfile.TemporaryDirectory(prefix="worktrial-probe-") as tmp:
            env = proc.clean_env(extra=self._env(Path(tmp)))
            return True, probe_version(self.binary_path, self.spec.version_args, env)

    def run(self, ctx: AgentContext) -> AgentResult:
        invocation = Invocation(
            prompt=ctx.task.prompt,
            model=self.options.model,
            scratch=ctx.scratch,
            worktree=ctx.worktree,
            extra_args=tuple(self.extra_args),
        )
        env = dict(ctx.env)
        env.update(self._env(ctx.scratch))
        parser = self.spec.parser()
        result = proc.run(
            [self.binary_path or self.binary, *self.spec.argv(invocation)],
            cwd=ctx.worktree,
            env=env,
            timeout=ctx.remaining(),
            stdin=ctx.task.prompt.encode("utf-8") if self.spec.stdin_prompt else None,
            on_stdout=parser.feed,
            scope=ctx.scope,
        )
        if result.not_found or result.start_error:
            message = f"{self.binary} not found" if result.not_found else f"{self.name}: {result.start_error}"
            return AgentResult(claimed=None, error=AgentError("not_installed", message, fatal=True))
        verdict = parser.finish(ExitInfo(returncode=result.returncode, timed_out=result.timed_out, scratch=ctx.scratch))
        usage = verdict.usage
        if usage.cost_usd is None and (resolved := self._price()) is not None:
            usage.cost_usd = cost_usd(usage.tokens, resolved[1].price)
        usage.output_bytes = result.output_bytes
        if result.timed_out:
            return AgentResult(claimed=None, usage=usage, timed_out=True)
        if verdict.error_category:
            error = AgentError(verdict.error_category, verdict.reason or f"{self.name} failed")
            return AgentResult(claimed=None, usage=usage, error=error)
        return AgentResult(claimed=verdict.claimed, usage=usage, reason=verdict.reason)

    # -- helpers ----------------------------------------------------------------------------------

    def _price(self) -> tuple[str, ResolvedPrice] | None:
        """The price of the model this CLI runs, when it reports tokens but no cost and the model is known.

        Without ``--model`` the CLI picks its own default, which worktrial cannot know: cost stays unknown.
        """
        model = self.options.model
        if self.spec.price_provider is None or not model:
            return None
        route = model if "/" in model else f"{self.spec.price_provider}/{model}"
        resolved = resolve_price(route, self.options.config)
        return None if resolved is None else (route, resolved)

    def _env(self, scratch: Path) -> dict[str, str]:
        env = self.spec.env(scratch)
        for value in env.values():
            if value.startswith(str(scratch)):
                Path(value).mkdir(parents=True, exist_ok=True)
        env.update(self.extra_env)
        return env


def scratch_dir(scratch: Path, *parts: str) -> str:
    """A directory under scratch for an agent's config/session state (created by ``PresetAgent``)."""
    return str(scratch.joinpath(*parts))


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
