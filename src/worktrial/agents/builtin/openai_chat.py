"""Chat Completions with tool calling through the official ``openai`` SDK.

This one transport serves OpenAI and every OpenAI-compatible server (OpenRouter, DeepSeek, Gemini's compatibility
endpoint, Ollama, vLLM, LM Studio, llama.cpp). Importing this module imports the SDK, so only the agent does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from worktrial.agents.builtin.conversation import (
    AssistantMessage,
    Conversation,
    ToolCall,
    ToolResults,
    UserMessage,
    parse_arguments,
)
from worktrial.agents.builtin.routes import Route
from worktrial.agents.builtin.sdk import sdk_client, sdk_errors
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.specs import ToolSpec
from worktrial.agents.builtin.transport import ModelReply, ProviderError, StatusHook
from worktrial.model.records import ErrorCategory, Tokens


def _messages(conversation: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": conversation.system}]
    for message in conversation.messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                    for c in message.tool_calls
                ]
            out.append(entry)
        elif isinstance(message, ToolResults):
            out.extend({"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in message.results)
    return out


def _tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _tokens(usage: Any) -> Tokens:
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Tokens(
        input=usage.prompt_tokens,
        output=usage.completion_tokens,
        cached_input=getattr(prompt, "cached_tokens", None),
        cache_creation=getattr(prompt, "cache_write_tokens", None),
        reasoning=getattr(completion, "reasoning_tokens", None),
    )


class OpenAIChatTransport:
    """One SDK client per attempt, so its response hook counts that attempt's HTTP statuses only."""

    def __init__(self, route: Route, settings: BuiltinSettings, on_status: StatusHook) -> None:
        self.route = route
        self.settings = settings
        self.client = sdk_client(openai, openai.OpenAI, route, settings, on_status)

    def close(self) -> None:
        self.client.close()

    def complete(self, conversation: Conversation, tools: Sequence[ToolSpec], timeout: float) -> ModelReply:
        request: dict[str, Any] = {
            "model": self.route.model,
            "messages": _messages(conversation),
            "tools": _tools(tools),
            "timeout": timeout,
        }
        if self.settings.temperature is not None:
            request["temperature"] = self.settings.temperature
        if self.settings.max_output_tokens is not None:
            # OpenAI's reasoning models only take the newer name; many compatible servers only the older one.
            key = "max_completion_tokens" if self.route.provider == "openai" else "max_tokens"
            request[key] = self.settings.max_output_tokens
        with sdk_errors(openai, openai.OpenAIError, self.route, self.settings):
            completion = self.client.chat.completions.create(**request)
        if not completion.choices:
            raise ProviderError(ErrorCategory.PROVIDER_SERVER, f"{self.route.route}: the response has no choices")
        reply = completion.choices[0].message
        calls: list[ToolCall] = []
        for i, call in enumerate(reply.tool_calls or []):
            function = getattr(call, "function", None)
            if function is None:
                continue
            raw = function.arguments or ""
            # Some local servers leave ids empty; providers need them to pair results with calls.
            call_id = call.id or f"call_{len(conversation.messages)}_{i}"
            calls.append(ToolCall(call_id, function.name or "", raw, parse_arguments(raw)))
        usage = completion.usage
        return ModelReply(
            message=AssistantMessage(text=reply.content or "", tool_calls=calls),
            tokens=_tokens(usage) if usage is not None else Tokens(),
            usage_reported=usage is not None,
        )
