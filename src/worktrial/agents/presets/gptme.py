"""gptme: ``gptme -n --output-format json --tool-format tool -- PROMPT``, one JSON message per line.

Each line is a conversation message ``{"type": "message", "role", "content", "metadata"}``. An assistant message's
``metadata`` has ``usage{input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, reasoning_tokens}``
for the model call that produced it (its ``input_tokens`` exclude cache reads and writes, which are added back;
``output_tokens`` include reasoning), ``served_model``, and ``cost`` in USD when gptme could price the model; a
system message with ``metadata.tool`` is a tool's result. Calls gptme makes besides its conversation (a side
request without tools) print nothing, so they are not counted here; with ``--base-url`` the CLI goes through the model
gateway, which counts every call (this report is then the cross-check).

gptme never says whether it solved the task: it stops when the model calls its ``complete`` tool or after a few
replies without a tool call, and exits 0. As for aider, **ending normally after at least one model reply counts as a
claim of success and the verify commands decide**. A provider failure ends it with exit 1 and ``Error code: 401``
(the status, from the OpenAI or Anthropic SDK) in its log on stderr.

``--tool-format tool`` makes gptme use the model's native tool calls (its default wraps tools in markdown); a
``[agents.gptme] args = ["--tool-format", "markdown"]`` overrides it (click keeps the last). ``--base-url`` is an
OpenAI-compatible Chat Completions endpoint: ``OPENAI_BASE_URL``, and a bare or ``openai/`` model becomes gptme's
``local/NAME`` (its ``openai`` provider would call the Responses API); the key is ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, UserSetup
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
from worktrial.model.envelope import split_route
from worktrial.model.records import Tokens, Usage

STATUS = re.compile(r"Error code: (\d{3})\b")
KEY_HINT = "check the provider's key variable (OPENAI_API_KEY with --base-url) or ~/.config/gptme/config.toml"


class GptmeParser(JsonLinesParser):
    label = "gptme"

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Tokens()
        self.cost: float | None = None
        self.replies = 0
        self.model: str | None = None
        self.tool_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") != "message":
            return
        metadata = as_dict(event.get("metadata"))
        role = event.get("role")
        if role == "assistant":
            self.replies += 1
            self.model = as_str(metadata.get("served_model")) or as_str(metadata.get("model")) or self.model
            usage = as_dict(metadata.get("usage"))
            if usage:
                fresh, read = as_int(usage.get("input_tokens")), as_int(usage.get("cache_read_tokens"))
                write = as_int(usage.get("cache_creation_tokens"))
                self.tokens = self.tokens.add(
                    Tokens(
                        input=None if fresh is None else fresh + (read or 0) + (write or 0),
                        output=as_int(usage.get("output_tokens")),
                        cached_input=read,
                        cache_creation=write,
                        reasoning=as_int(usage.get("reasoning_tokens")),
                    )
                )
            self.cost = add_cost(self.cost, as_cost(metadata.get("cost")))
        elif role == "system" and as_str(metadata.get("tool")):
            bump(self.tool_counts, as_str(metadata.get("tool")) or "unknown")

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(
            tokens=self.tokens,
            cost_usd=self.cost,
            turns=self.replies or None,
            tool_counts=dict(self.tool_counts),
        )
        verdict = self._judge(exit_info, usage)
        verdict.model = self.model
        return verdict

    def _judge(self, exit_info: ExitInfo, usage: Usage) -> Verdict:
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if exit_info.returncode not in (0, None):
            text = exit_info.stderr_tail.decode("utf-8", "replace")
            statuses = STATUS.findall(text)
            if statuses:
                status = int(statuses[-1])
                category = classify(status, None)
                if category is not None:
                    bump(usage.error_counts, category)
                    found = failure(self.label, category, status, None, KEY_HINT)
                    return Verdict(
                        claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                    )
            if self.replies == 0:
                usage.notes.append("gptme: no model reply; usage unknown")
                return self.fallback(exit_info, usage, "a model reply")
            return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))
        if self.replies == 0:
            usage.notes.append("gptme: no model reply; usage unknown")
            return Verdict(claimed=None, usage=usage, reason="gptme exited 0 without a model reply")
        return Verdict(claimed=True, usage=usage)


def _model(inv: Invocation) -> str | None:
    if not inv.model or not inv.base_url:
        return inv.model
    provider, name = split_route(inv.model)
    return f"local/{name or inv.model}" if provider in (None, "openai", "local") else inv.model


def _argv(inv: Invocation) -> list[str]:
    args = ["-n", "--output-format", "json", "--tool-format", "tool"]
    model = _model(inv)
    if model:
        args += ["-m", model]
    return [*args, *inv.extra_args, "--", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {
        # gptme keeps its config in ~/.config/gptme and its conversation logs under XDG_DATA_HOME/gptme.
        "HOME": scratch_dir(scratch, "gptme", "home"),
        "XDG_CONFIG_HOME": scratch_dir(scratch, "gptme", "home", ".config"),
        "XDG_DATA_HOME": scratch_dir(scratch, "gptme", "data"),
        "XDG_STATE_HOME": scratch_dir(scratch, "gptme", "state"),
    }


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    if not inv.base_url:
        return {}
    return {"OPENAI_BASE_URL": inv.base_url, "OPENAI_API_BASE": inv.base_url}


ROUTED_PROVIDERS = ("openai", "local")
"""gptme's providers that take ``OPENAI_BASE_URL`` (its OpenAI one through the SDK, ``local`` itself)."""


def _upstream(inv: Invocation) -> Upstream | None:
    """``--base-url`` with a model gptme runs as ``local/NAME``, or (without it) an ``openai/`` or ``local/`` model
    with the key or endpoint of the user's: OpenAI Chat Completions, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``."""
    model = _model(inv)
    if inv.base_url:
        return OPENAI if model is not None and model.startswith("local/") else None
    provider = inv.model.split("/", 1)[0] if inv.model and "/" in inv.model else None
    return OPENAI if provider in ROUTED_PROVIDERS else None


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """Without ``--model``, gptme runs the ``MODEL`` of its config's ``[env]`` (or the environment): routed when
    that model's provider takes ``OPENAI_BASE_URL``, not at all otherwise."""
    del setup, provider
    named = env.get("MODEL") if model is None else None
    if not named:
        return Configured()
    routed = named.split("/", 1)[0] in ROUTED_PROVIDERS
    return Configured(model=named, upstream=OPENAI if routed else None, elsewhere=not routed)


SPEC = PresetSpec(
    name="gptme",
    binary="gptme",
    summary="gptme (gptme -n --output-format json --tool-format tool)",
    install="pipx install gptme",
    argv=_argv,
    parser=GptmeParser,
    env=_env,
    reports=("tokens", "cost (when gptme prices the model)", "turns (model replies)", "tool calls"),
    # gptme reads ~/.config/gptme/config.toml whatever XDG_CONFIG_HOME says: the attempt's home holds the copy.
    carries=(
        ConfigCarry("HOME", "gptme/home", "", (".config/gptme/config.toml",), env_files=(".config/gptme/config.toml",)),
    ),
    run_env=_run_env,
    base_url="OPENAI_BASE_URL, with a bare or openai/ model as gptme's local/NAME",
    base_url_needs_model=True,
    upstream=_upstream,
    setup=_setup,
)
