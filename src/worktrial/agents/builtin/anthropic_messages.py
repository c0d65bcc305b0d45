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
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.specs import ToolSpec
from worktrial.agents.builtin.transport import (
    ModelReply,
    ProviderError,
    StatusHook,
    connection_error,
    error_detail,
    error_from_status,
)
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
        http_client = anthropic.DefaultHttpxClient(event_hooks={"response": [lambda r: on_status(r.status_code)]})
        self.client = anthropic.Anthropic(
            api_key=route.api_key,
            base_url=route.base_url,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout_secs,
            http_client=http_client,
        )

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
        try:
            response = self.client.messages.create(**request)
        except anthropic.APIStatusError as exc:
            message, code = error_detail(exc.body)
            raise error_from_status(self.route, exc.status_code, message, code, self.settings.max_retries) from None
        except anthropic.APIConnectionError as exc:
            timed_out = isinstance(exc, anthropic.APITimeoutError)
            raise connection_error(self.route, timed_out, self.settings.max_retries) from None
        except anthropic.AnthropicError as exc:
            what = f"{self.route.route}: unusable response ({type(exc).__name__})"
            raise ProviderError("provider_server", what) from None
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
