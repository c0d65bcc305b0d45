"""Cursor Agent CLI: ``cursor-agent -p --force --trust --output-format stream-json PROMPT``.

Events: ``system`` (init), ``user``, ``assistant`` (one line per message between tool calls),
``tool_call`` with ``subtype`` ``started``/``completed`` and a ``tool_call`` object keyed by the tool kind
(``readToolCall``, ``shellToolCall``, ...), and a terminal ``result`` with ``is_error``. Token usage is
read from ``result.usage`` when the CLI includes it (it is not in the published reference); cost is not
reported. On failure the CLI may exit non-zero without a ``result`` event.

Not routed through the model gateway, and ``--base-url`` is refused: cursor-agent sends its model calls to
Cursor's own service only, signed in with ``agent login`` or a Cursor key (``CURSOR_API_KEY``; Cursor's CLI
authentication reference). Its configuration reference (https://cursor.com/docs/cli/reference/configuration:
``cli-config.json``, ``CURSOR_CONFIG_DIR``, ``XDG_CONFIG_HOME``, the HTTP proxy variables) names no provider base URL
and no provider key, and its models are Cursor-hosted; the editor's "Override OpenAI Base URL" has no CLI
equivalent, and a BYOK base URL for Cursor's agent is an open request (cursor/cookbook#39). The gateway therefore
never sees its calls: tokens are whatever the CLI reports in ``result.usage`` (nothing when it omits them), with no
cost, and a provider outage reaches worktrial only as the CLI's own error.
"""

from __future__ import annotations

from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_int,
    as_str,
    bump,
)
from worktrial.model.records import Tokens, Usage

# Both spellings have been seen in result.usage; the first present wins.
USAGE_KEYS = {
    "input": ("inputTokens", "input_tokens"),
    "output": ("outputTokens", "output_tokens"),
    "cached_input": ("cacheReadTokens", "cache_read_tokens", "cache_read_input_tokens"),
    "cache_creation": ("cacheWriteTokens", "cache_write_tokens", "cache_creation_input_tokens"),
}


def _tool_name(tool_call: dict[str, Any]) -> str:
    for key in tool_call:
        if isinstance(key, str) and key.endswith("ToolCall"):
            return key[: -len("ToolCall")] or key
    return next((k for k in tool_call if isinstance(k, str)), "unknown")


class CursorParser(JsonLinesParser):
    label = "cursor"

    def __init__(self) -> None:
        super().__init__()
        self.result: dict[str, Any] | None = None
        self.tool_counts: dict[str, int] = {}
        self.seen_calls: set[str] = set()

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "tool_call":
            call_id = as_str(event.get("call_id"))
            # Count each call at its first event: a reconnect can lose the matching "completed" event.
            if call_id is not None:
                if call_id in self.seen_calls or len(self.seen_calls) > 100_000:
                    return
                self.seen_calls.add(call_id)
            bump(self.tool_counts, _tool_name(as_dict(event.get("tool_call"))))
        elif kind == "result":
            self.result = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts))
        if self.result is None:
            usage.notes.append("cursor: no result event; usage unknown")
            return self.fallback(exit_info, usage, "a result event")
        raw = as_dict(self.result.get("usage"))
        if raw:
            usage.tokens = Tokens(
                **{
                    attr: next((v for v in (as_int(raw.get(k)) for k in keys) if v is not None), None)
                    for attr, keys in USAGE_KEYS.items()
                }
            )
        else:
            usage.notes.append("cursor: result event has no usage; tokens unknown")
        subtype = as_str(self.result.get("subtype")) or "unknown"
        is_error = self.result.get("is_error") is True
        if is_error or subtype != "success":
            bump(usage.error_counts, subtype)
            why = f"cursor result {subtype}" + (" with is_error" if is_error else "")
            return Verdict(claimed=False, usage=usage, reason=why)
        return Verdict(claimed=True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["-p", "--force", "--trust", "--output-format", "stream-json"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, inv.prompt]


SPEC = PresetSpec(
    name="cursor",
    binary="cursor-agent",
    summary="Cursor Agent CLI (cursor-agent -p --output-format stream-json)",
    install="curl https://cursor.com/install -fsS | bash",
    argv=_argv,
    parser=CursorParser,
    env=lambda scratch: {"CURSOR_CONFIG_DIR": scratch_dir(scratch, "cursor")},
    reports=("tokens (when present)", "tool calls"),
)
