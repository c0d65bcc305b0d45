"""VT Code: ``vtcode exec --json PROMPT`` with workspace trust granted through the environment.

VT Code speaks Codex's ``thread``/``turn``/``item`` events plus a terminal ``thread.completed`` with
``subtype`` (``success``, ``error_max_turns``, ...), aggregated ``usage``, optional ``total_cost_usd`` and
``num_turns``. Tool calls are ``tool_invocation`` items (``tool_name``); releases without them report
``command_execution``/``file_change``/``mcp_tool_call`` items, which are counted instead.

Model gateway: VT Code reads a provider's base URL from ``<PROVIDER>_BASE_URL`` (``OPENAI_BASE_URL``,
``ANTHROPIC_BASE_URL``; vtcode-config's ``constants::env_vars``), whose defaults include ``/v1``
(``https://api.openai.com/v1``, ``https://api.anthropic.com/v1``; ``constants::urls``), and the key from
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. An ``openai/NAME`` or ``anthropic/NAME`` route is run as
``--provider openai|anthropic --model NAME`` and routed through the gateway; other models are passed as given
(the provider is VT Code's configured one, e.g. an OpenRouter slug) and not routed. ``--base-url`` is the
provider's base with ``/v1``: any model but an ``anthropic/`` route runs on ``openai`` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.codex import ThreadEventsParser
from worktrial.agents.presets.parsing import (
    ExitInfo,
    Verdict,
    as_cost,
    as_dict,
    as_int,
    as_str,
    bump,
    exit_reason,
    tokens_from,
)
from worktrial.agents.presets.routing import OPENAI, Upstream

USAGE_FIELDS = {
    "input": "input_tokens",
    "cached_input": "cached_input_tokens",
    "cache_creation": "cache_creation_tokens",
    "output": "output_tokens",
}


class VtCodeParser(ThreadEventsParser):
    label = "vtcode"

    def __init__(self) -> None:
        super().__init__()
        self.completed: dict[str, Any] | None = None
        self.invocations: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "thread.completed":
            self.completed = event
        else:
            super().on_event(event)

    def on_item(self, item: dict[str, Any]) -> None:
        if item.get("type") == "tool_invocation":
            bump(self.invocations, as_str(item.get("tool_name")) or "unknown")
        else:
            super().on_item(item)

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        base = super().verdict(exit_info)
        usage = base.usage
        if self.invocations:
            # A shell call appears both as a tool invocation and as a command execution: count it once.
            usage.tool_counts = dict(self.invocations)
        if self.completed is None:
            if base.claimed is True:  # turns completed but the thread never did
                usage.notes.append("vtcode: no thread.completed event")
                return Verdict(claimed=None, usage=usage, reason="vtcode ended without thread.completed")
            return base
        completed = self.completed
        usage.tokens = tokens_from(as_dict(completed.get("usage")), USAGE_FIELDS)
        usage.cost_usd = as_cost(completed.get("total_cost_usd"))
        usage.turns = as_int(completed.get("num_turns"))
        subtype = as_str(completed.get("subtype")) or "unknown"
        if subtype != "success":
            bump(usage.error_counts, subtype)
            return Verdict(claimed=False, usage=usage, reason=f"vtcode thread ended {subtype}")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason("vtcode", exit_info))
        return Verdict(claimed=True, usage=usage)


ROUTED = {
    "openai": Upstream("openai", ("OPENAI_API_KEY",), OPENAI.default_base),
    "anthropic": Upstream("anthropic", ("ANTHROPIC_API_KEY",), "https://api.anthropic.com/v1"),
}
"""The providers VT Code is routed through the gateway for, in its convention (its bases end in ``/v1``)."""


def _route(inv: Invocation) -> tuple[str | None, str | None]:
    """(the provider VT Code is told, the model it is told): ``openai/`` and ``anthropic/`` routes are split; any
    other model is VT Code's own id, run on ``openai`` (the OpenAI-compatible endpoint) with ``--base-url``."""
    if not inv.model:
        return None, None
    provider, _, name = inv.model.partition("/")
    if name and provider in ROUTED:
        return provider, name
    return ("openai" if inv.base_url else None), inv.model


def _argv(inv: Invocation) -> list[str]:
    args: list[str] = []
    provider, model = _route(inv)
    if provider:
        args += ["--provider", provider]
    if model:
        args += ["--model", model]
    return [*args, "exec", "--json", *inv.extra_args, inv.prompt]


def _upstream(inv: Invocation) -> Upstream | None:
    provider = _route(inv)[0]
    return ROUTED[provider] if provider else None


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    provider = _route(inv)[0]
    if not inv.base_url or provider is None:
        return {}
    return {f"{provider.upper()}_BASE_URL": inv.base_url}


def _env(scratch: Path) -> dict[str, str]:
    return {
        "VTCODE_HOME": scratch_dir(scratch, "vtcode", "home"),
        "VTCODE_CONFIG": scratch_dir(scratch, "vtcode", "config"),
        "VTCODE_DATA": scratch_dir(scratch, "vtcode", "data"),
        # Exec mode refuses untrusted workspaces without a terminal; this grants full-auto trust headless.
        "VTCODE_TRUST_WORKSPACE": "full-auto",
        "VTCODE_TRUST_WORKSPACE_QUIET": "1",
    }


SPEC = PresetSpec(
    name="vtcode",
    binary="vtcode",
    summary="VT Code (vtcode exec --json)",
    install="cargo install vtcode",
    argv=_argv,
    parser=VtCodeParser,
    env=_env,
    reports=("tokens", "cost", "turns", "tool calls"),
    run_env=_run_env,
    base_url="OPENAI_BASE_URL, or ANTHROPIC_BASE_URL for an anthropic/ route (the base with /v1)",
    base_url_needs_model=True,
    upstream=_upstream,
)
