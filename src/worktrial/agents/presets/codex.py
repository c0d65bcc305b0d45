"""OpenAI Codex CLI: ``codex exec --json``, one JSON event per line.

``turn.completed`` carries ``usage{input_tokens, cached_input_tokens, output_tokens}`` (input includes
the cached part, as OpenAI reports it); ``item.completed`` items are the tool calls; ``turn.failed`` and
``error`` mean the run failed. Codex reports no cost: with ``--model`` the attempt is priced from the price
table (``openai/<model>``, or the route as given), otherwise its cost stays unknown.
"""

from __future__ import annotations

from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_str,
    bump,
    exit_reason,
    tokens_from,
)
from worktrial.model.records import Tokens, Usage

USAGE_FIELDS = {"input": "input_tokens", "cached_input": "cached_input_tokens", "output": "output_tokens"}
TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}


class ThreadEventsParser(JsonLinesParser):
    """The ``thread.*`` / ``turn.*`` / ``item.*`` event family (Codex; VT Code speaks a superset)."""

    label = "codex"

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Tokens()
        self.turns = 0
        self.failed: str | None = None
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "turn.completed":
            self.turns += 1
            self.tokens = self.tokens.add(tokens_from(as_dict(event.get("usage")), USAGE_FIELDS))
        elif kind == "turn.failed":
            self.turns += 1
            self.failed = self.failed or "turn.failed"
            bump(self.error_counts, "turn_failed")
            if event.get("usage") is not None:
                self.tokens = self.tokens.add(tokens_from(as_dict(event.get("usage")), USAGE_FIELDS))
        elif kind == "error":
            self.failed = self.failed or "error event"
            bump(self.error_counts, "stream_error")
        elif kind == "item.completed":
            self.on_item(as_dict(event.get("item")))

    def on_item(self, item: dict[str, Any]) -> None:
        item_type = as_str(item.get("type"))
        if item_type == "mcp_tool_call":
            bump(self.tool_counts, f"mcp:{as_str(item.get('tool')) or 'unknown'}")
        elif item_type in TOOL_ITEMS:
            bump(self.tool_counts, item_type)
        elif item_type == "error":
            bump(self.error_counts, "item_error")

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(
            tokens=self.tokens,
            turns=self.turns if self.turns else None,
            tool_counts=dict(self.tool_counts),
            error_counts=dict(self.error_counts),
        )
        if self.failed and not exit_info.timed_out:
            return Verdict(claimed=False, usage=usage, reason=f"{self.label} reported {self.failed}")
        if self.turns == 0:
            usage.notes.append(f"{self.label}: no completed turn; usage unknown")
            return self.fallback(exit_info, usage, "completing a turn")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))
        return Verdict(claimed=True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--", inv.prompt]


SPEC = PresetSpec(
    name="codex",
    binary="codex",
    summary="OpenAI Codex CLI (codex exec --json)",
    install="npm install -g @openai/codex",
    argv=_argv,
    parser=ThreadEventsParser,
    env=lambda scratch: {"CODEX_HOME": scratch_dir(scratch, "codex")},
    reports=("tokens", "cost (from the price table when --model is given)", "turns", "tool calls"),
    price_provider="openai",
)
