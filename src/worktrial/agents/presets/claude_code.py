"""Claude Code: ``claude -p --output-format stream-json --verbose``, prompt on stdin.

The final ``result`` event carries ``subtype``, ``is_error``, ``num_turns``, ``total_cost_usd`` and
``usage``; tool calls are the ``tool_use`` blocks of assistant messages. ``is_error: true`` (which the
CLI also uses for failed API calls with ``subtype: success``) is a claimed failure even on exit 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, is_root, scratch_dir
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_cost,
    as_dict,
    as_int,
    as_list,
    as_str,
    bump,
    tokens_from,
)
from worktrial.model.records import Usage

USAGE_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cached_input": "cache_read_input_tokens",
    "cache_creation": "cache_creation_input_tokens",
}


class ClaudeStreamParser(JsonLinesParser):
    """Claude Code's ``stream-json`` events (also spoken by Cursor's CLI, which reuses the shape)."""

    label = "claude-code"

    def __init__(self) -> None:
        super().__init__()
        self.tool_counts: dict[str, int] = {}
        self.seen_tool_ids: set[str] = set()
        self.result: dict[str, Any] | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "assistant":
            for block in as_list(as_dict(event.get("message")).get("content")):
                block = as_dict(block)
                if block.get("type") != "tool_use":
                    continue
                tool_id = as_str(block.get("id"))
                if tool_id is not None:
                    # Partial-message streaming can repeat a block; count each tool call once.
                    if tool_id in self.seen_tool_ids or len(self.seen_tool_ids) > 100_000:
                        continue
                    self.seen_tool_ids.add(tool_id)
                bump(self.tool_counts, as_str(block.get("name")) or "unknown")
        elif kind == "result":
            self.result = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts))
        result = self.result
        if result is None:
            usage.notes.append("claude-code: no result event; tokens, cost and turns unknown")
            return self.fallback(exit_info, usage, "a result event")
        usage.tokens = tokens_from(as_dict(result.get("usage")), USAGE_FIELDS)
        usage.cost_usd = as_cost(result.get("total_cost_usd"))
        usage.turns = as_int(result.get("num_turns"))
        subtype = as_str(result.get("subtype")) or "unknown"
        is_error = result.get("is_error") is True
        if subtype != "success":
            bump(usage.error_counts, subtype)
        if is_error or subtype != "success":
            why = f"result {subtype}" + (" with is_error" if is_error else "")
            return Verdict(claimed=False, usage=usage, reason=why)
        return Verdict(claimed=True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args]


def _check(env: Mapping[str, str]) -> str | None:
    # Claude Code exits at once when bypassPermissions is requested by root outside a declared sandbox.
    if is_root() and env.get("IS_SANDBOX") != "1" and env.get("CLAUDE_CODE_BUBBLEWRAP") != "1":
        return (
            "Claude Code refuses --permission-mode bypassPermissions when run as root; if this machine is a "
            'disposable sandbox, set env = { IS_SANDBOX = "1" } under [agents.claude-code] in worktrial.toml'
        )
    return None


SPEC = PresetSpec(
    name="claude-code",
    binary="claude",
    summary="Anthropic Claude Code (claude -p, stream-json)",
    install="npm install -g @anthropic-ai/claude-code",
    argv=_argv,
    parser=ClaudeStreamParser,
    env=lambda scratch: {"CLAUDE_CONFIG_DIR": scratch_dir(scratch, "claude")},
    stdin_prompt=True,
    reports=("tokens", "cost", "turns", "tool calls"),
    check=_check,
)
