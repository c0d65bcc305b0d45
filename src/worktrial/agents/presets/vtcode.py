"""VT Code: ``vtcode exec --json PROMPT`` with workspace trust granted through the environment.

VT Code speaks Codex's ``thread``/``turn``/``item`` events plus a terminal ``thread.completed`` with
``subtype`` (``success``, ``error_max_turns``, ...), aggregated ``usage``, optional ``total_cost_usd`` and
``num_turns``. Tool calls are ``tool_invocation`` items (``tool_name``); releases without them report
``command_execution``/``file_change``/``mcp_tool_call`` items, which are counted instead.
"""

from __future__ import annotations

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


def _argv(inv: Invocation) -> list[str]:
    args: list[str] = []
    if inv.model:
        args += ["--model", inv.model]
    return [*args, "exec", "--json", *inv.extra_args, inv.prompt]


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
)
