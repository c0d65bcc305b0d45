"""The provider wire formats the gateway reads: which one a request speaks, and the usage in its answers.

Only counts are read (tokens, the model id the provider answered with); no prompt or completion text is kept.
worktrial's ``Tokens`` counts every prompt token in ``input`` (cached and cache-written ones included) and every
generated token in ``output`` (reasoning included), whatever the provider's own split; these functions convert.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from worktrial.model.records import Tokens

Wire = Literal["chat", "responses", "messages", "gemini"]
"""OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini generateContent."""

_GEMINI = re.compile(r"models/([^/:]+):(generateContent|streamGenerateContent)$")
MAX_EVENT_BYTES = 8 * 1024 * 1024
"""An SSE event longer than this is passed on but not read (usage events are small)."""


def wire_of(path: str) -> Wire | None:
    """The wire format of a request path (after the upstream's base), or None for other endpoints (model lists,
    token counting), which are forwarded but carry no usage."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions") or path == "chat/completions":
        return "chat"
    if path.endswith("/responses") or path == "responses":
        return "responses"
    if (path.endswith("/messages") or path == "messages") and "count_tokens" not in path:
        return "messages"
    if _GEMINI.search(path):
        return "gemini"
    return None


MAX_PARSED_REQUEST_BYTES = 1024 * 1024
_MODEL_FIELD = re.compile(rb'"model"\s*:\s*"([^"\\]{1,256})"')


def requested_model(wire: Wire | None, path: str, body: bytes) -> str | None:
    """The model a request asks for: Gemini names it in the path, the others in the JSON body."""
    if wire == "gemini":
        match = _GEMINI.search(path.split("?", 1)[0])
        return match.group(1) if match else None
    if wire is None or not body:
        return None
    if len(body) > MAX_PARSED_REQUEST_BYTES:
        # Parsed, a body of small values takes many times its size ('[{},{},...]': ~25x); the agent picks the
        # model anyway, so a large body is read for its first "model" string only, in constant memory.
        field = _MODEL_FIELD.search(body)
        return field.group(1).decode("utf-8", "replace") if field else None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def openai_chat_tokens(usage: dict[str, Any]) -> Tokens:
    return Tokens(
        input=_int(usage.get("prompt_tokens")),
        output=_int(usage.get("completion_tokens")),
        cached_input=_int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens")),
        reasoning=_int(_dict(usage.get("completion_tokens_details")).get("reasoning_tokens")),
    )


def responses_tokens(usage: dict[str, Any]) -> Tokens:
    """The Responses API caches prompts without a write charge: its cache writes are 0 (as Codex reports them)."""
    return Tokens(
        input=_int(usage.get("input_tokens")),
        output=_int(usage.get("output_tokens")),
        cached_input=_int(_dict(usage.get("input_tokens_details")).get("cached_tokens")),
        cache_creation=0,
        reasoning=_int(_dict(usage.get("output_tokens_details")).get("reasoning_tokens")),
    )


def anthropic_tokens(usage: dict[str, Any]) -> Tokens:
    """Anthropic's ``input_tokens`` leaves out the cache reads and writes; worktrial's ``input`` holds all three."""
    fresh = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    total = None if fresh is None and read is None and written is None else (fresh or 0) + (read or 0) + (written or 0)
    return Tokens(input=total, output=_int(usage.get("output_tokens")), cached_input=read, cache_creation=written)


def gemini_tokens(usage: dict[str, Any]) -> Tokens:
    """Gemini's ``candidatesTokenCount`` leaves out the thoughts; worktrial's ``output`` counts them."""
    candidates = _int(usage.get("candidatesTokenCount"))
    thoughts = _int(usage.get("thoughtsTokenCount"))
    prompt = _int(usage.get("promptTokenCount"))
    tool_prompt = _int(usage.get("toolUsePromptTokenCount"))
    return Tokens(
        input=None if prompt is None else prompt + (tool_prompt or 0),
        output=None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0),
        cached_input=_int(usage.get("cachedContentTokenCount")),
        reasoning=thoughts,
    )


class EventSink(Protocol):
    """Hears every JSON body or stream event of an answer (the trajectory recorder, ``recorder.Recording``)."""

    def event(self, event: Any) -> None: ...


@dataclass
class Exchange:
    """What one answer said, read as it streams: the usage (the last report wins, since streams repeat their
    running totals) and the model the provider answered with."""

    wire: Wire | None
    recording: EventSink | None = None
    """Set when the attempt records its trajectory: every event is handed on to it."""
    tokens: Tokens | None = None
    model: str | None = None
    stream_error: str | None = None
    """An error event inside a 200 stream (Anthropic's ``overloaded_error``)."""
    ended: bool = False
    """The answer's last event arrived (a stream that stops before it was cut): ``[DONE]``, a finish reason,
    ``response.completed`` (or ``incomplete``/``failed``), ``message_stop``, an error event."""
    _anthropic: dict[str, Any] | None = None

    def read_json(self, data: bytes) -> None:
        self.ended = True  # a whole body: nothing can be missing from its end
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            return
        if isinstance(body, list):  # Gemini's streamGenerateContent without alt=sse: a JSON array of chunks
            for chunk in body:
                self.read_event(chunk)
            return
        self.read_event(body)

    def read_event(self, event: Any) -> None:
        """One JSON body or one SSE event's data."""
        if not isinstance(event, dict):
            return
        if self.recording is not None:
            self.recording.event(event)
        if self.wire == "chat":
            self._model(event.get("model"))
            if isinstance(event.get("usage"), dict):
                self.tokens = openai_chat_tokens(event["usage"])
            self.ended = self.ended or _finished(event.get("choices"), "finish_reason")
        elif self.wire == "responses":
            response = _dict(event.get("response")) if "response" in event else event
            self._model(response.get("model"))
            if isinstance(response.get("usage"), dict):
                self.tokens = responses_tokens(response["usage"])
            self.ended = self.ended or event.get("type") in _RESPONSES_LAST
        elif self.wire == "messages":
            self._messages(event)
        elif self.wire == "gemini":
            self._model(event.get("modelVersion"))
            if isinstance(event.get("usageMetadata"), dict):
                self.tokens = gemini_tokens(event["usageMetadata"])
            self.ended = self.ended or _finished(event.get("candidates"), "finishReason")

    def _model(self, value: Any) -> None:
        if (model := _str(value)) is not None:
            self.model = model[:200]

    def _messages(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "error":
            self.stream_error = _str(_dict(event.get("error")).get("type")) or "error"
            self.ended = True
            return
        if kind == "message_stop":
            self.ended = True
            return
        if kind == "message_start":
            message = _dict(event.get("message"))
            self._model(message.get("model"))
            self._anthropic = dict(_dict(message.get("usage")))
        elif kind == "message_delta":
            # The delta's counts are running totals and replace the start's (output always; newer APIs also
            # repeat the input and cache figures there).
            self._anthropic = {**(self._anthropic or {}), **_dict(event.get("usage"))}
        elif kind == "message":  # a whole (non-streamed) answer
            self._model(event.get("model"))
            self._anthropic = dict(_dict(event.get("usage")))
        else:
            return
        self.tokens = anthropic_tokens(self._anthropic)


class SseReader:
    """Splits a byte stream into Server-Sent Events as it arrives and hands each event's JSON data on."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self._buffer = b""
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end, size = _event_end(self._buffer)
            if end < 0:
                break
            raw, self._buffer = self._buffer[:end], self._buffer[end + size :]
            if self._skipping:
                self._skipping = False
                continue
            self._event(raw)
        if len(self._buffer) > MAX_EVENT_BYTES:  # one huge event: pass it on unread
            self._buffer = b""
            self._skipping = True

    def close(self) -> None:
        if self._buffer.strip() and not self._skipping:
            self._event(self._buffer)
        self._buffer = b""

    def _event(self, raw: bytes) -> None:
        lines = [line[5:].removeprefix(b" ") for line in raw.splitlines() if line.startswith(b"data:")]
        data = b"\n".join(lines)
        if data.strip() == b"[DONE]":
            self.exchange.ended = True
            return
        if not data:
            return
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            return
        self.exchange.read_event(event)


_RESPONSES_LAST = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def _finished(choices: Any, key: str) -> bool:
    """Whether a chunk's choices (Chat Completions) or candidates (Gemini) carry a finish reason."""
    return isinstance(choices, list) and any(isinstance(c, dict) and c.get(key) for c in choices)


def _event_end(buffer: bytes) -> tuple[int, int]:
    """Where the first complete event ends (the blank line that ends it) and that separator's length."""
    found = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buffer.find(sep)) >= 0]
    return min(found) if found else (-1, 0)
