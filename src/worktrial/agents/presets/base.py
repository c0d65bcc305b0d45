"""A preset is a declarative description of one agent CLI; ``PresetAgent`` runs any of them.

Each preset module states only what differs between CLIs: the binary, the headless argv, the
environment (above all the agent's own config-directory variable, pointed at the attempt's scratch
directory so attempts never share sessions, caches of conversation state or logins), how to install
it, and its output parser. Spawning, deadlines, bounded capture, version probing and the
"never crash on bad output" guarantees live here once.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from worktrial.agents.base import AgentContext, AgentError, AgentOptions, AgentOutput, AgentResult
from worktrial.agents.credentials import PRESET_PROVIDERS, PROVIDER_VARIABLES, preset_credentials
from worktrial.agents.presets.carry import (
    CarryRefused,
    ConfigCarry,
    Rewrite,
    UserSetup,
    carry,
    read_setup,
)
from worktrial.agents.presets.parsing import ExitInfo, ParserFactory, watch_spend
from worktrial.agents.presets.routing import (
    ANTHROPIC,
    OPENAI,
    OPENROUTER,
    Configured,
    RoutePlan,
    SetupReader,
    Upstream,
    leaves_the_environment,
    plan_route,
)
from worktrial.agents.pricing import Price, ResolvedPrice, cost_usd, resolve_price
from worktrial.agents.prompt import MAX_ARG_BYTES, fits_inline, kib, oversized_argument, prompt_file_of
from worktrial.errors import BadInputError
from worktrial.gateway import Route
from worktrial.isolation import childenv, proc
from worktrial.isolation.childenv import check_patterns
from worktrial.model.artifacts import STREAM_TAIL_BYTES
from worktrial.model.config import AgentConfig
from worktrial.model.envelope import split_route
from worktrial.model.records import ErrorCategory
from worktrial.util import public_url

log = logging.getLogger(__name__)
VERSION_TIMEOUT_SECS = 15.0
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
MIN_SECRET_CHARS = 8
"""A provider variable of a secret-like name and at least this long is a value no routed CLI may see anywhere."""
PREFLIGHT_TOKEN = "wt-gw-preflight"
PREFLIGHT_URL = "http://127.0.0.1:1/g/wt-gw-preflight/route"
"""What the preflight's trial copy of the CLI's configuration puts where an attempt's token and gateway URL go."""


@dataclass(frozen=True)
class Invocation:
    """What a preset needs to build one command line."""

    prompt: str
    model: str | None
    scratch: Path
    worktree: Path
    extra_args: tuple[str, ...] = ()
    """``[agents.<preset>].args``: each preset places them before its prompt argument."""
    provider: str | None = None
    """The provider half of a ``provider/model`` route the preset split (``model`` is then the bare name)."""
    base_url: str | None = None
    """``--base-url``, for presets that map it to their CLI's own mechanism."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Budget flags (``max_turns``...) the preset declared it honours."""
    cost_cap: float | None = None
    """``--max-cost-per-attempt``, for CLIs with a spending limit of their own (the harness enforces it anyway)."""
    upstream: Upstream | None = None
    """The provider the gateway stands in for in this attempt, when it is routed (its wire, its base variables)."""


ArgvBuilder = Callable[[Invocation], list[str]]
EnvBuilder = Callable[[Path], dict[str, str]]
RunEnvBuilder = Callable[[Invocation, Mapping[str, str]], dict[str, str]]
"""Environment derived from the invocation and the environment the agent would get (base URL, key names)."""
Preparer = Callable[[Invocation], None]
"""Writes files the CLI reads at start into the attempt's scratch directory (a config naming ``--base-url``)."""


@dataclass(frozen=True)
class LongPrompt:
    """How a CLI that takes its prompt as an argument is given one too big to pass inline (``agents.prompt``).

    ``via="stdin"``: the prompt argument is dropped (with ``flag`` before it, or a ``--`` that ends options) and
    the prompt is sent on stdin, or the argument becomes ``placeholder`` (``-`` for "read stdin") when the CLI
    needs one. ``via="file"``: ``flag`` replaces the prompt's own flag and the argument becomes the prompt file.
    """

    via: Literal["stdin", "file"]
    flag: str | None = None
    placeholder: str | None = None


_PROMPT_SLOT = "\0worktrial-prompt\0"
"""Stands for the prompt while an argv is built, to find where a preset put it (no real argument has a NUL)."""


def long_prompt_argv(argv: list[str], how: LongPrompt, prompt_file: Path) -> list[str] | None:
    """``argv`` (built with ``_PROMPT_SLOT`` as the prompt) rewritten to take the prompt from stdin or its file."""
    if argv.count(_PROMPT_SLOT) != 1:
        return None
    i = argv.index(_PROMPT_SLOT)
    before = argv[i - 1] if i > 0 else None
    if how.via == "file":
        if how.flag is None or before is None or not before.startswith("-"):
            return None
        return [*argv[: i - 1], how.flag, str(prompt_file), *argv[i + 1 :]]
    if how.placeholder is not None:
        return [*argv[:i], how.placeholder, *argv[i + 1 :]]
    start = i - 1 if before is not None and before in (how.flag, "--") else i
    if before == "--" and i != len(argv) - 1:
        return None  # arguments after the prompt would no longer be protected by "--"
    return [*argv[:start], *argv[i + 1 :]]


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
    version_argv: Callable[[str], list[str] | None] | None = None
    """For a CLI without a version flag: the command (given the binary's path) that prints its version."""
    check: Callable[[Mapping[str, str]], str | None] | None = None
    """Given the environment the agent would get, a reason it cannot run headless here (or None)."""
    price_provider: str | None = None
    """For a CLI that reports tokens of one model but no cost: the provider under which a bare ``--model``
    is looked up in the price table (``provider/model`` routes are looked up as given)."""
    carries: tuple[ConfigCarry, ...] = ()
    """The CLI's config directories (most have one; OpenCode has a config and a data directory)."""
    splits_route: bool = False
    """The CLI takes a bare model name: worktrial splits ``provider/model`` and passes the name."""
    run_env: RunEnvBuilder | None = None
    base_url: str | None = None
    """How the CLI is pointed at ``--base-url`` (for docs and errors); None: the preset refuses it."""
    base_url_needs_model: bool = False
    """``--base-url`` is refused without ``--model``: the CLI must be told which model the endpoint serves."""
    prepare: Preparer | None = None
    budgets: tuple[str, ...] = ()
    """Budget flags (``max_turns``, ``max_tokens``, ``temperature``) the CLI honours; the rest are refused."""
    long_prompt: LongPrompt | None = None
    """How the CLI takes a prompt too big to pass inline; None: only as an argument (up to the kernel's limit)."""
    upstream: Callable[[Invocation], Upstream | None] | None = None
    """The provider the CLI calls for this invocation, when it can be routed through the model gateway (its base
    URL is then the gateway's, given through ``base_url``'s mechanism, and its key the attempt's token)."""
    setup: SetupReader | None = None
    """Reads what the CLI's own configuration files name: its endpoint, an API key, the variable of its key, the
    model (``routing.plan_route`` weighs it against the flags and the environment)."""
    settings_env_wins: bool = False
    """The CLI's settings files set variables over its environment (Claude Code's ``env``); otherwise the
    environment wins over them (a dotenv file, Qwen Code's ``env``)."""


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


def probe_version_by(argv: list[str], env: Mapping[str, str]) -> str | None:
    """The first stdout line of a version command that succeeded, or None."""
    with tempfile.TemporaryDirectory(prefix="worktrial-version-") as tmp:
        result = proc.run(argv, cwd=tmp, env=env, timeout=VERSION_TIMEOUT_SECS)
    if result.timed_out or result.start_error or result.not_found or result.returncode != 0:
        return None
    return first_line(result.stdout_tail)


class PresetAgent:
    """Runs one preset headless in the attempt's worktree and reads its own usage report.

    ``[agents.<preset>]`` in worktrial.toml may add ``env`` (a table), ``args`` (extra arguments placed
    before the prompt) and ``binary`` (a different executable name or path).
    """

    sandboxed_files = True

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
        self.pass_env = check_patterns((*options.pass_env, *overrides.pass_env), "--pass-env")
        self.credential_patterns = (*preset_credentials(spec.name), *self.pass_env)
        """The caller's credential-like variables this CLI receives: its providers' and the user's --pass-env."""
        self.extra_env = dict(overrides.env)
        self.extra_args = list(overrides.args)
        self.binary = overrides.binary or spec.binary
        self.binary_path: str | None = None
        self.version: str | None = None
        config_dir = overrides.config_dir
        self.config_dir: bool | Path = config_dir if isinstance(config_dir, bool) else Path(config_dir).expanduser()
        self.carry_login = overrides.carry_login
        """The user accepts that a CLI which is not routed takes its login (its config's credentials) into the
        sandbox."""
        self.route: RoutePlan | None = None
        """Where the preflight found the CLI's model calls will go (for the envelope), when it is routed."""
        self.unrouted_endpoints: list[str] = []
        """Loopback URLs the CLI's own configuration names that the gateway does not carry for it: a sandbox with
        a network of its own cannot reach them."""
        self.provider: str | None = None
        self.model: str | None = options.model
        if options.model and spec.splits_route:
            self.provider, self.model = split_route(options.model)

    # -- protocol ---------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        example = self._invocation("PROMPT", Path("SCRATCH"), Path("."))
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
        if self.pass_env:
            described["pass_env"] = sorted(self.pass_env)  # names only
        if self.route is not None:
            described["upstream"] = self.route.described(public_url)
        if self.unrouted_endpoints:
            described["unrouted_endpoints"] = [public_url(url) for url in self.unrouted_endpoints]
        return described

    def preflight(self) -> None:
        self._check_flags()
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
        self._check_carry()

    def _check_carry(self) -> None:
        """Before the first attempt: where the CLI's model calls will go, and that no credential of its own
        configuration would enter the sandbox (a login worktrial cannot stand in for refuses the run)."""
        env = {**childenv.selected(os.environ, self.credential_patterns), **self.extra_env}
        env.setdefault("HOME", os.environ.get("HOME", ""))
        setup = read_setup(self.spec.carries, env, self.config_dir)
        env.update(childenv.selected(os.environ, named_in(setup, childenv.withheld(os.environ))))
        self.route = self._plan(self._invocation("PROMPT", Path("SCRATCH"), Path(".")), env, setup)
        routed = self.route.base_url.rstrip("/") if self.route is not None else None
        self.unrouted_endpoints = [u for u in setup.loopback_endpoints() if routed is None or not u.startswith(routed)]
        if self.config_dir is False:
            return  # the CLI reads the user's own directory: nothing is copied
        if self.route is None:
            held = [f.shown for f in setup.logins()] + sorted(set(setup.secrets().values()))
            if held and not self.carry_login:
                raise BadInputError(self._login_refused(held[0]))
            return
        rewrite = self._rewrite(self.route, PREFLIGHT_TOKEN, PREFLIGHT_URL, frozenset())
        with tempfile.TemporaryDirectory(prefix="worktrial-carry-") as tmp:
            try:
                carry(setup, lambda c: Path(tmp) / c.subdir, rewrite)
            except CarryRefused as exc:
                raise BadInputError(f"agent {self.name}: {exc}") from None

    def _login_refused(self, where: str) -> str:
        upstream = self.spec.upstream(self._invocation("", Path(), Path())) if self.spec.upstream else None
        keys = " or ".join(upstream.keys) if upstream is not None else "a provider key variable"
        routed = (
            f"set {keys} (or --base-url) so that its calls go through worktrial's model gateway, which holds the key "
            "outside the sandbox; "
            if upstream is not None
            else ""
        )
        return (
            f"agent {self.name}: {where} holds a login or key that would be copied into every attempt, where the "
            f"agent can read it; {routed}or, to let {self.name} use it inside the sandbox, set carry_login = true "
            f"under [agents.{self.name}] in worktrial.toml"
        )

    def probe(self) -> tuple[bool, str | None]:
        """Whether the binary is on PATH and what version it reports (used by ``worktrial agents``)."""
        self.binary_path = shutil.which(self.binary)
        if self.binary_path is None:
            return False, None
        with tempfile.TemporaryDirectory(prefix="worktrial-probe-") as tmp:
            env = proc.clean_env(extra=self._env(Path(tmp), os.environ, Rewrite()))
            argv = self.spec.version_argv(self.binary_path) if self.spec.version_argv is not None else None
            version = probe_version_by(argv, env) if argv else None
            return True, version or probe_version(self.binary_path, self.spec.version_args, env)

    def run(self, ctx: AgentContext) -> AgentResult:
        invocation = replace(self._invocation(ctx.task.prompt, ctx.scratch, ctx.worktree), cost_cap=ctx.cost_cap)
        env = ctx.env_with((*self.credential_patterns, *self.named_in_user_config(ctx)))
        setup = read_setup(self.spec.carries, env, self.config_dir)
        invocation, rewrite = self._through_gateway(ctx, invocation, env, setup)
        try:
            env.update(self._env(ctx.scratch, env, rewrite, setup))
        except CarryRefused as exc:  # the user's files changed since the preflight
            error = AgentError(ErrorCategory.AGENT_FAILED, f"{self.name}: {exc}", fatal=True)
            return AgentResult(claimed=None, error=error)
        if self.spec.run_env is not None:
            env.update(self.spec.run_env(invocation, env))
        if withheld := rewrite.withheld:  # whatever a config table or run_env added: no variable holds a real key
            env = {name: value for name, value in env.items() if value not in withheld}
        if self.spec.prepare is not None:
            self.spec.prepare(invocation)
        argv, stdin_prompt = self._prompt_argv(invocation, prompt_file_of(ctx))
        too_big = oversized_argument(argv)
        if too_big is not None:
            return AgentResult(claimed=None, error=AgentError(ErrorCategory.PROMPT_TOO_LONG, self._too_long(too_big)))
        parser = self.spec.parser()

        def price() -> Price | None:
            resolved = self._price(getattr(parser, "model", None))
            return resolved[1].price if resolved is not None else None

        program = [self.binary_path or self.binary, *argv]
        result = proc.run(
            ctx.gateway.wrap(program) if ctx.gateway is not None else program,
            cwd=ctx.worktree,
            env=env,
            stdin=ctx.task.prompt.encode("utf-8") if stdin_prompt else None,
            on_stdout=watch_spend(parser, price, ctx),
            tail_bytes=STREAM_TAIL_BYTES,
            **ctx.limits(),
        )
        output = AgentOutput.of(result)  # the tails, for the attempt's local artifacts
        if result.not_found or result.start_error:
            message = f"{self.binary} not found" if result.not_found else f"{self.name}: {result.start_error}"
            return AgentResult(
                output=output, claimed=None, error=AgentError(ErrorCategory.NOT_INSTALLED, message, fatal=True)
            )
        exit_info = ExitInfo(
            returncode=result.returncode,
            timed_out=result.timed_out,
            scratch=ctx.scratch,
            stderr_tail=result.stderr_tail,
        )
        verdict = parser.finish(exit_info)
        usage = verdict.usage
        if usage.cost_usd == 0 and (usage.tokens.total() or 0) > 0:
            # CLIs report 0 for a model they cannot price; tokens were spent, so the cost is unknown, not free.
            usage.cost_usd = None
            usage.notes.append(f"{self.name} reported cost 0 for {usage.tokens.total()} tokens: treated as unpriced")
        if usage.cost_usd is None and (resolved := self._price(verdict.model)) is not None:
            usage.cost_usd = cost_usd(usage.tokens, resolved[1].price)
        usage.output_bytes = result.output_bytes
        usage.model = verdict.model
        if result.timed_out:
            return AgentResult(output=output, claimed=None, usage=usage, timed_out=True, ended=result.ended)
        if verdict.error_category:
            error = AgentError(verdict.error_category, verdict.reason or f"{self.name} failed", fatal=verdict.fatal)
            return AgentResult(output=output, claimed=None, usage=usage, error=error, ended=result.ended)
        return AgentResult(
            output=output, claimed=verdict.claimed, usage=usage, reason=verdict.reason, ended=result.ended
        )

    # -- helpers ----------------------------------------------------------------------------------

    def _plan(self, invocation: Invocation, env: Mapping[str, str], setup: UserSetup) -> RoutePlan | None:
        """The CLI's route through the gateway, from the flags, its environment and its own configuration."""
        settings = setup.env()
        seen = {**env, **settings} if self.spec.settings_env_wins else {**settings, **env}
        configured = (
            self.spec.setup(setup, seen, invocation.provider, invocation.model)
            if self.spec.setup is not None
            else Configured()
        )
        upstream = self.spec.upstream(invocation) if self.spec.upstream is not None else None
        return plan_route(upstream, configured, seen, invocation.base_url)

    def _rewrite(self, plan: RoutePlan, token: str, url: str, withheld: frozenset[str]) -> Rewrite:
        """The copies of a routed CLI's files: its key is the attempt's token, its endpoint the gateway's URL."""
        replace_with = {plan.key: token} if plan.key else {}
        if plan.base_from is not None and plan.base_url != url:
            replace_with[plan.base_url] = url
        return Rewrite(replace=replace_with, remove=withheld - set(replace_with))

    def _through_gateway(
        self, ctx: AgentContext, invocation: Invocation, env: dict[str, str], setup: UserSetup
    ) -> tuple[Invocation, Rewrite]:
        """Route the CLI's provider through the attempt's gateway session, when there is one and the user gave a key
        or an endpoint (``routing.plan_route``): the CLI gets the gateway's URL through its base-URL mechanism (and
        in its copied configuration) and the attempt's token in place of the key; the keys and endpoints of its
        providers leave its environment (``env`` is changed in place). Returns the invocation and how the CLI's own
        files are copied."""
        not_routed = Rewrite(keep_logins=self.carry_login)
        plan = self._plan(invocation, env, setup)
        if ctx.gateway is None or plan is None:
            return invocation, not_routed
        upstream = plan.upstream
        route = Route(upstream.route, plan.base_url, plan.key, upstream.price_provider, plan.key_from)
        try:
            url = ctx.gateway.route(route)
        except OSError as exc:  # the gateway could not listen: the CLI talks to its provider itself, as before
            log.warning("%s: the model gateway is unavailable (%s); calling the provider directly", self.name, exc)
            return invocation, not_routed
        patterns = [p for name in PRESET_PROVIDERS.get(self.spec.name, ()) for p in PROVIDER_VARIABLES[name]]
        patterns += [*upstream.keys, plan.key_var]
        gone = [n for n in env if childenv.matches(n, patterns) and leaves_the_environment(n, upstream)]
        withheld = {env[n] for n in gone if _SECRET_NAME.search(n) and len(env[n]) >= MIN_SECRET_CHARS}
        for name in gone:
            del env[name]
        env[plan.key_var] = ctx.gateway.token
        # Its model calls go to the gateway on its own loopback, which reaches the provider through the user's
        # proxy: a proxy in the CLI's environment could only send them astray (Qwen Code and Gemini CLI send every
        # request through HTTPS_PROXY, whatever NO_PROXY says).
        for name in childenv.PROXY_NAMES:
            env.pop(name, None)
        rewrite = self._rewrite(plan, ctx.gateway.token, url, frozenset(withheld))
        return replace(invocation, base_url=url, upstream=upstream), rewrite

    def _prompt_argv(self, invocation: Invocation, prompt_file: Path) -> tuple[list[str], bool]:
        """The CLI's arguments, and whether the prompt goes on stdin: inline when it fits, else the CLI's way."""
        argv = self.spec.argv(invocation)
        if self.spec.stdin_prompt or fits_inline(invocation.prompt) or self.spec.long_prompt is None:
            return argv, self.spec.stdin_prompt
        slotted = self.spec.argv(replace(invocation, prompt=_PROMPT_SLOT))
        rewritten = long_prompt_argv(slotted, self.spec.long_prompt, prompt_file)
        if rewritten is None:
            return argv, False
        return rewritten, self.spec.long_prompt.via == "stdin"

    def _too_long(self, size: int) -> str:
        return (
            f"{self.name} takes the prompt only as a command-line argument, and this one ({kib(size)}) is over the "
            f"{kib(MAX_ARG_BYTES + 1)} the kernel allows for one argument; use a shorter prompt or another agent "
            "(command agents read any size from $WORKTRIAL_PROMPT_FILE or stdin)"
        )

    def _price(self, used: str | None = None) -> tuple[str, ResolvedPrice] | None:
        """The price of the model this CLI runs, when it reports tokens but no cost and the model is known.

        Without ``--model`` the model is the one the CLI says it used (its init or session events); when it
        says nothing, the cost stays unknown.
        """
        model = self.options.model or used
        if self.spec.price_provider is None or not model:
            return None
        route = model if "/" in model else f"{self.spec.price_provider}/{model}"
        resolved = resolve_price(route, self.options.config)
        return None if resolved is None else (route, resolved)

    def _invocation(self, prompt: str, scratch: Path, worktree: Path) -> Invocation:
        return Invocation(
            prompt=prompt,
            model=self.model,
            scratch=scratch,
            worktree=worktree,
            extra_args=tuple(self.extra_args),
            provider=self.provider,
            base_url=self.options.base_url,
            settings={k: v for k, v in self.options.settings.items() if k in self.spec.budgets},
        )

    def named_in_user_config(self, ctx: AgentContext) -> list[str]:
        """Credential variables the user's own CLI configuration names (Codex's ``env_key = "MY_KEY"``, OpenCode's
        ``{env:MY_KEY}``): the user chose them for this CLI, so it receives them like its provider's own."""
        if not ctx.credentials:
            return []
        setup = read_setup(self.spec.carries, ctx.env_with(self.credential_patterns), self.config_dir)
        return named_in(setup, ctx.credentials)

    def _check_flags(self) -> None:
        """Refuse what this CLI cannot honour instead of dropping it silently."""
        if self.options.base_url and self.spec.base_url is None:
            raise BadInputError(
                f"agent {self.name} cannot be pointed at --base-url by worktrial; drop --base-url and set the "
                f"provider in the CLI's own configuration (it is copied into each attempt)"
            )
        if self.options.base_url and self.spec.base_url_needs_model and not self.options.model:
            raise BadInputError(
                f"agent {self.name} needs --model with --base-url (the model the endpoint serves, e.g. "
                "--model openai/NAME)"
            )
        refused = sorted(k for k in self.options.settings if k not in self.spec.budgets)
        if refused:
            flags = ", ".join("--" + k.replace("_", "-") for k in refused)
            honoured = ", ".join("--" + k.replace("_", "-") for k in self.spec.budgets) or "none"
            raise BadInputError(f"agent {self.name} has no equivalent of {flags} (it honours: {honoured}); drop it")

    def _env(
        self, scratch: Path, parent: Mapping[str, str], rewrite: Rewrite, setup: UserSetup | None = None
    ) -> dict[str, str]:
        """The CLI's own variables, its config directories made in ``scratch`` with the user's files carried in
        (``setup``: as read already; ``rewrite``: how the copies differ, ``Rewrite()`` for a version probe)."""
        env = self.spec.env(scratch)
        if self.config_dir is False:
            for spec_carry in self.spec.carries:
                env.pop(spec_carry.env_var, None)
        for value in env.values():
            if value.startswith(str(scratch)):
                Path(value).mkdir(parents=True, exist_ok=True)
        targets = {c.env_var: Path(env[c.env_var]) for c in self.spec.carries if c.env_var in env}
        if targets:
            probing = setup is None
            setup = setup if setup is not None else read_setup(self.spec.carries, parent, self.config_dir)
            try:
                carry(setup, lambda c: targets.get(c.env_var), rewrite)
            except CarryRefused:
                if not probing:
                    raise
        env.update(self.extra_env)
        return env


def named_in(setup: UserSetup, candidates: Iterable[str]) -> list[str]:
    """The ``candidates`` (variable names) that the user's settings files name."""
    words = set(re.findall(r"[A-Za-z0-9_]+", "\n".join(f.text for f in setup.files if not f.login)))
    return [name for name in candidates if name in words]


def scratch_dir(scratch: Path, *parts: str) -> str:
    """A directory under scratch for an agent's config/session state (created by ``PresetAgent``)."""
    return str(scratch.joinpath(*parts))


def byok_upstream(inv: Invocation, *, anthropic_keys: tuple[str, ...] = ("ANTHROPIC_API_KEY",)) -> Upstream | None:
    """The endpoint of a CLI whose own provider is its vendor's service and which reaches a provider of the user's
    only through ``--base-url`` ("bring your own key"): routed only then. An ``anthropic/NAME`` route speaks
    Anthropic Messages at the API's root; any other an OpenAI-compatible API whose key is the route's provider's
    ``<PROVIDER>_API_KEY`` (``OPENAI_API_KEY`` for a bare name). Without ``--base-url`` the CLI talks to its vendor
    (a subscription, a login), which the gateway does not speak for."""
    if not inv.base_url:
        return None
    provider = inv.provider or split_route(inv.model)[0]
    if provider == "anthropic":
        return Upstream("anthropic", anthropic_keys, ANTHROPIC.default_base)
    name = (provider or "openai").upper().replace("-", "_")
    return Upstream("openai", (f"{name}_API_KEY",), OPENAI.default_base)


LITELLM = {"openai": OPENAI, "anthropic": ANTHROPIC, "openrouter": OPENROUTER}
"""The providers a litellm-based CLI is routed for: those whose wire the gateway speaks (OpenRouter is Chat
Completions); litellm routes to other providers are not routed."""


def litellm_upstream(inv: Invocation) -> Upstream | None:
    """The provider a litellm-based CLI calls for the route: OpenAI for a bare name, else the route's provider
    where the gateway speaks its format (others are not routed)."""
    return litellm_provider(inv.model)


def litellm_provider(model: str | None) -> Upstream | None:
    """The upstream of a litellm model name (``openrouter/openai/gpt-5.1``; a bare name is OpenAI's)."""
    provider = model.split("/", 1)[0] if model and "/" in model else "openai"
    return LITELLM.get(provider)


def litellm_base_url(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    """``--base-url`` for a litellm-based CLI (aider, mini-swe-agent): litellm reads ``<PROVIDER>_BASE_URL`` or
    ``<PROVIDER>_API_BASE`` for the provider the ``provider/model`` route names (OPENAI for a bare model name);
    both are set, so a variable of the user's own cannot win over the flag. Routed for a model the CLI's own
    configuration names, the routed provider's variables are set too."""
    if not inv.base_url:
        return {}
    provider = inv.model.split("/", 1)[0] if inv.model and "/" in inv.model else "openai"
    prefix = provider.upper().replace("-", "_")
    variables = {f"{prefix}_API_BASE": inv.base_url, f"{prefix}_BASE_URL": inv.base_url}
    if inv.upstream is not None:
        variables.update(dict.fromkeys(inv.upstream.base_vars, inv.base_url))
    return variables


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
