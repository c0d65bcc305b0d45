"""OpenCode: ``opencode run --format json``, one JSON event per line.

Each ``step_finish`` event's ``part`` carries ``cost`` and ``tokens{input, output, reasoning,
cache{read, write}}`` for one model step; ``tool_use`` events are completed (or failed) tool calls;
``error`` events are session errors (the CLI then exits 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
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
from worktrial.model.records import Tokens, Usage


class OpenCodeParser(JsonLinesParser):
    label = "opencode"

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Tokens()
        self.cost: float | None = None
        self.steps = 0
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}
        self.error: str | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        part = as_dict(event.get("part"))
        if kind == "step_finish":
            self.steps += 1
            tokens = as_dict(part.get("tokens"))
            cache = as_dict(tokens.get("cache"))
            self.tokens = self.tokens.add(
                Tokens(
                    input=as_int(tokens.get("input")),
                    output=as_int(tokens.get("output")),
                    reasoning=as_int(tokens.get("reasoning")),
                    cached_input=as_int(cache.get("read")),
                    cache_creation=as_int(cache.get("write")),
                )
            )
            self.cost = add_cost(self.cost, as_cost(part.get("cost")))
        elif kind == "tool_use":
            bump(self.tool_counts, as_str(part.get("tool")) or "unknown")
            if as_dict(part.get("state")).get("status") == "error":
                bump(self.error_counts, "tool_error")
        elif kind == "error":
            name = as_str(as_dict(event.get("error")).get("name")) or "error"
            self.error = self.error or name
            bump(self.error_counts, name)

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(
            tokens=self.tokens,
            cost_usd=self.cost,
            turns=self.steps if self.steps else None,
            tool_counts=dict(self.tool_counts),
            error_counts=dict(self.error_counts),
        )
        if self.error and not exit_info.timed_out:
            return Verdict(claimed=False, usage=usage, reason=f"opencode reported {self.error}")
        if self.steps == 0:
            usage.notes.append("opencode: no step_finish event; usage unknown")
            return self.fallback(exit_info, usage, "finishing a step")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason("opencode", exit_info))
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


SPEC = PresetSpec(
    name="opencode",
    binary="opencode",
    summary="OpenCode (opencode run --format json)",
    install="npm install -g opencode-ai",
    argv=_argv,
    parser=OpenCodeParser,
    env=_env,
    reports=("tokens", "cost", "turns", "tool calls"),
)
