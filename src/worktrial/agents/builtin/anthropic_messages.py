"""The Messages API with tool use and prompt caching through the official ``anthropic`` SDK.

Cache breakpoints go on the system prompt, the tool list and the newest message, so each call reads the previous
call's prefix from the cache; the SDK reports cache reads and writes, which are counted and priced separately.
Importing this module imports the SDK, so only the agent does it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic

from worktrial.agents.builtin.conversation import AssistantMessage, Conversation, ToolCall, ToolResults, UserMessage
from worktrial.agents.builtin.routes import Route
from worktrial.agents.builtin.sdk import sdk_client, sdk_errors
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.specs import ToolSpec
from worktrial.agents.builtin.transport import ModelReply, StatusHook
from worktrial.model.records import Tokens

# The API requires an output limit; this one suits tool-calling turns.
DEFAULT_MAX_OUTPUT_TOKENS = 8192
CACHE = {"type": "ephemeral"}


def _messages(conversation: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in conversation.messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": [{"type": "text", "text": message.text}]})
        elif isinstance(message, AssistantMessage):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments or {}} for c in message.tool_calls
            )
            # The API rejects an empty assistant turn.
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no reply)"}]})
        elif isinstance(message, ToolResults):
            out.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
                        for r in message.results
                    ],
                }
            )
    if out:
        out[-1]["content"][-1]["cache_control"] = CACHE
    return out


def _tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]
    if out:
        out[-1]["cache_control"] = CACHE
    return out


def _tokens(usage: Any) -> Tokens:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; worktrial's ``input`` is all of them."""
    read = usage.cache_read_input_tokens
    created = usage.cache_creation_input_tokens
    details = getattr(usage, "output_tokens_details", None)
    return Tokens(
        input=usage.input_tokens + (read or 0) + (created or 0),
        output=usage.output_tokens,
        cached_input=read,
        cache_creation=created,
        reasoning=getattr(details, "thinking_tokens", None),
    )


class AnthropicTransport:
    """One SDK client per attempt, so its response hook counts that attempt's HTTP statuses only."""

    def __init__(self, route: Route, settings: BuiltinSettings, on_status: StatusHook) -> None:
        self.route = route
        self.settings = settings
        self.client = sdk_client(anthropic, anthropic.Anthropic, route, settings, on_status)

    def close(self) -> None:
        self.client.close()

    def complete(self, conversation: Conversation, tools: Sequence[ToolSpec], timeout: float) -> ModelReply:
        request: dict[str, Any] = {
            "model": self.route.model,
            "system": [{"type": "text", "text": conversation.system, "cache_control": CACHE}],
            "messages": _messages(conversation),
            "tools": _tools(tools),
            "max_tokens": self.settings.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,
            "timeout": timeout,
        }
        if self.settings.temperature is not None:
            request["temperature"] = min(self.settings.temperature, 1.0)
        with sdk_errors(anthropic, anthropic.AnthropicError, self.route, self.settings):
            response = self.client.messages.create(**request)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                arguments = block.input if isinstance(block.input, dict) else None
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input), arguments))
        usage = response.usage
        return ModelReply(
            message=AssistantMessage(text="\n".join(texts), tool_calls=calls),
            tokens=_tokens(usage) if usage is not None else Tokens(),
            usage_reported=usage is not None,
        )
