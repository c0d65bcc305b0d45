"""OpenCode: ``opencode run --format json``, one JSON event per line.

Each ``step_finish`` event's ``part`` carries ``cost`` and ``tokens{input, output, reasoning,
cache{read, write}}`` for one model step; ``tool_use`` events are completed (or failed) tool calls;
``error`` events are session errors (the CLI then exits 1): an ``APIError`` with ``data.statusCode`` is a
provider failure. OpenCode's ``input`` excludes cache reads and writes and its ``output`` excludes reasoning:
both are added back, so the figures mean what they mean for every other agent. Its title-generation call prints
no ``step_finish`` and is therefore not counted. OpenCode takes its project directory from ``$PWD``, which the
process layer sets to the worktree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, UserSetup, dig, named_variable, text_of
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    add_cost,
    as_cost,
    as_dict,
    as_int,
    as_str,
    bump,
    exit_reason,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import OPENAI, Configured, Upstream
from worktrial.model.records import Tokens, Usage

KEY_HINT = "check the provider's key variable or ~/.local/share/opencode/auth.json (copied into each attempt)"


class OpenCodeParser(JsonLinesParser):
    """OpenCode's event stream; Kilo Code's CLI, a fork of OpenCode, prints the same."""

    label = "opencode"
    key_hint = KEY_HINT

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Tokens()
        self.cost: float | None = None
        self.steps = 0
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}
        self.error: str | None = None
        self.api_error: tuple[int | None, str | None] | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        part = as_dict(event.get("part"))
        if kind == "step_finish":
            self.steps += 1
            tokens = as_dict(part.get("tokens"))
            cache = as_dict(tokens.get("cache"))
            fresh, read, write = as_int(tokens.get("input")), as_int(cache.get("read")), as_int(cache.get("write"))
            output, reasoning = as_int(tokens.get("output")), as_int(tokens.get("reasoning"))
            self.tokens = self.tokens.add(
                Tokens(
                    input=None if fresh is None else fresh + (read or 0) + (write or 0),
                    output=None if output is None else output + (reasoning or 0),
                    reasoning=reasoning,
                    cached_input=read,
                    cache_creation=write,
                )
            )
            self.cost = add_cost(self.cost, as_cost(part.get("cost")))
        elif kind == "tool_use":
            bump(self.tool_counts, as_str(part.get("tool")) or "unknown")
            if as_dict(part.get("state")).get("status") == "error":
                bump(self.error_counts, "tool_error")
        elif kind == "error":
            error = as_dict(event.get("error"))
            name = as_str(error.get("name")) or "error"
            self.error = self.error or name
            bump(self.error_counts, name)
            data = as_dict(error.get("data"))
            if name == "APIError" and self.api_error is None:
                self.api_error = (as_int(data.get("statusCode")), as_str(data.get("message")))

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(
            tokens=self.tokens,
            cost_usd=self.cost,
            turns=self.steps if self.steps else None,
            tool_counts=dict(self.tool_counts),
            error_counts=dict(self.error_counts),
        )
        if self.api_error is not None and not exit_info.timed_out:
            status, message = self.api_error
            category = classify(status, message)
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, message, self.key_hint)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
        if self.error and not exit_info.timed_out:
            return Verdict(claimed=False, usage=usage, reason=f"{self.label} reported {self.error}")
        if self.steps == 0:
            usage.notes.append(f"{self.label}: no step_finish event; usage unknown")
            return self.fallback(exit_info, usage, "finishing a step")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))
        return Verdict(claimed=True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["run", "--format", "json", "--dangerously-skip-permissions"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {
        # OpenCode keeps config, auth and sessions under the XDG directories; the download cache stays shared.
        "XDG_CONFIG_HOME": scratch_dir(scratch, "opencode", "config"),
        "XDG_DATA_HOME": scratch_dir(scratch, "opencode", "data"),
        "XDG_STATE_HOME": scratch_dir(scratch, "opencode", "state"),
        # Older releases without --dangerously-skip-permissions honour the same policy from the environment.
        "OPENCODE_PERMISSION": json.dumps({"*": "allow"}),
    }


ANTHROPIC_SDK = Upstream("anthropic", ("ANTHROPIC_API_KEY",), "https://api.anthropic.com/v1")
"""OpenCode's Anthropic provider (the AI SDK's) takes a base URL with ``/v1``."""


def _route_provider(inv: Invocation) -> str | None:
    return inv.model.split("/", 1)[0] if inv.model and "/" in inv.model else None


def _upstream(inv: Invocation) -> Upstream | None:
    """OpenCode's built-in OpenAI and Anthropic providers, named by ``--model provider/name``."""
    return {"openai": OPENAI, "anthropic": ANTHROPIC_SDK}.get(_route_provider(inv) or "")


CONFIG_FILES = ("opencode/opencode.json", "opencode/opencode.jsonc", "opencode/config.json")
COMPATIBLE = {"@ai-sdk/openai-compatible": OPENAI, "@ai-sdk/openai": OPENAI, "@ai-sdk/anthropic": ANTHROPIC_SDK}
"""The AI SDK packages a provider of the user's own is declared with, and the wire the gateway speaks for them."""


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """What OpenCode's config (``provider.<id>.options.baseURL`` and ``apiKey``, a provider of the user's own
    declared with an AI SDK package) and ``auth.json`` (``opencode auth login``'s API keys) say about the provider
    that ``--model <id>/<name>`` names."""
    del env, provider
    file = next((f for f in (setup.file(name) for name in CONFIG_FILES) if f is not None), None)
    model = model or (text_of(dig(file.data(), "model")) if file is not None else None)
    chosen = model.split("/", 1)[0] if model and "/" in model else None
    if chosen is None:
        return Configured()
    entry = dig(file.data(), "provider", chosen) if file is not None else None
    base = text_of(dig(entry, "options", "baseURL"))
    api_key = text_of(dig(entry, "options", "apiKey"))
    key_var = named_variable(api_key)
    key, key_from = (api_key, file.shown) if api_key and key_var is None and file is not None else (None, None)
    auth = setup.file("opencode/auth.json")
    login = dig(auth.data(), chosen) if auth is not None else None
    if key is None and auth is not None and dig(login, "type") == "api" and text_of(dig(login, "key")):
        key, key_from = text_of(dig(login, "key")), auth.shown
    return Configured(
        base_url=base,
        base_from=file.shown if base and file is not None else None,
        key=key,
        key_from=key_from,
        key_var=key_var,
        upstream=COMPATIBLE.get(str(dig(entry, "npm"))),
    )


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    """``--base-url`` (the gateway's, or the user's) as the route's provider's ``baseURL`` in an inline config,
    which OpenCode merges over the user's files."""
    provider = _route_provider(inv)
    if not inv.base_url or provider is None:
        return {}
    try:
        content = json.loads(env.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError:
        content = {}
    if not isinstance(content, dict):
        content = {}
    providers = content.setdefault("provider", {})
    entry = providers.setdefault(provider, {}) if isinstance(providers, dict) else {}
    options = entry.setdefault("options", {}) if isinstance(entry, dict) else {}
    if isinstance(options, dict):
        options["baseURL"] = inv.base_url
    return {"OPENCODE_CONFIG_CONTENT": json.dumps(content)}


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin"),  # prompts over 64 KiB (agents.prompt)
    name="opencode",
    binary="opencode",
    summary="OpenCode (opencode run --format json)",
    install="npm install -g opencode-ai",
    argv=_argv,
    parser=OpenCodeParser,
    env=_env,
    reports=("tokens", "cost", "turns", "tool calls"),
    carries=(
        ConfigCarry(
            "XDG_CONFIG_HOME",
            "opencode/config",
            ".config",
            CONFIG_FILES,
        ),
        ConfigCarry("XDG_DATA_HOME", "opencode/data", ".local/share", (), logins=("opencode/auth.json",)),
    ),
    setup=_setup,
    price_provider="opencode",
    run_env=_run_env,
    base_url="OPENCODE_CONFIG_CONTENT's provider.<route's provider>.options.baseURL (needs --model openai/... or "
    "anthropic/...)",
    upstream=_upstream,
)
