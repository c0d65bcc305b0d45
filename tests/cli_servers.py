"""Loopback model servers that speak the streaming wire formats the real agent CLIs use.

``scripted_provider`` answers plain JSON for the SDKs; the CLIs stream. This server answers

- Anthropic Messages (``POST /v1/messages?beta=true`` with ``stream: true``) as Server-Sent Events, the way
  Claude Code calls it, and ``/v1/messages/count_tokens``;
- OpenAI Responses (``POST /v1/responses``, ``stream: true``) as Server-Sent Events, the way Codex calls it,
  including a stream cut before ``response.completed`` that makes Codex reconnect.

A scripted model is a function of the request: it decides from the conversation so far (has a tool result come
back yet?) whether to call a tool or to finish, so retries and side requests never shift the script. Every
request is recorded, and the usage the server reported is summed per model, for tests to compare exactly.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]
_ids = itertools.count(1)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Json


@dataclass
class Sse:
    """A streamed answer: (event name, data) pairs; ``cut_after`` closes the connection after that many events."""

    events: list[tuple[str, Json]]
    cut_after: int | None = None
    done_marker: bool = False
    """End with ``data: [DONE]`` (OpenAI Chat Completions streams do)."""


@dataclass
class Plain:
    status: int
    body: Json
    headers: dict[str, str] = field(default_factory=dict)
    cut: bool = False
    """Close the connection halfway through the body (its content-length promised all of it)."""


Answer = Sse | Plain
Responder = Callable[[Request], Answer]


class CliServer:
    """A threaded loopback HTTP server answering every request with ``responder``; a context manager."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self, method: str) -> None:
                size = int(self.headers.get("content-length", "0") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                request = Request(method, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(request)
                answer = server.responder(request)
                if isinstance(answer, Plain):
                    data = json.dumps(answer.body).encode()
                    self.send_response(answer.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if answer.cut:
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                    elif method != "HEAD":  # a HEAD answer has no body: one would corrupt a kept-alive connection
                        self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for index, (name, event) in enumerate(answer.events):
                    if answer.cut_after is not None and index >= answer.cut_after:
                        break
                    head = f"event: {name}\n" if name else ""  # Gemini's SSE has data lines only
                    self.wfile.write(f"{head}data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                if answer.done_marker and answer.cut_after is None:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                self.close_connection = True

            def do_POST(self) -> None:
                self._handle("POST")

            def do_GET(self) -> None:
                self._handle("GET")

            def do_HEAD(self) -> None:
                self._handle("HEAD")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def posts(self, suffix: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.split("?")[0].endswith(suffix)]

    def __enter__(self) -> CliServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


# ---- Anthropic Messages, streamed ----------------------------------------------------------------------------------


def anthropic_stream(model: str, blocks: list[Json], usage: Json, stop_reason: str) -> Sse:
    """A complete Messages stream: usage is split the way the API splits it (input in start, output in delta)."""
    message_id = f"msg_{next(_ids)}"
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
    events: list[tuple[str, Json]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Sse(events)


def anthropic_plain(model: str, text: str, usage: Json) -> Plain:
    body = {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    return Plain(200, body)


def anthropic_error(status: int, kind: str, message: str) -> Plain:
    return Plain(status, {"type": "error", "error": {"type": kind, "message": message}})


def has_tool_result(messages: list[Any]) -> bool:
    """Whether the conversation already carries a tool result (Anthropic or OpenAI Responses shapes)."""
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("type") in ("function_call_output", "custom_tool_call_output"):
            return True
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return True
    return False


# ---- OpenAI Responses, streamed ------------------------------------------------------------------------------------


def responses_usage(inp: int, cached: int, out: int, reasoning: int) -> Json:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": inp + out,
    }


def responses_stream(model: str, items: list[Json], usage: Json) -> Sse:
    response_id = f"resp_{next(_ids)}"
    base: Json = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    events: list[tuple[str, Json]] = [("response.created", {"type": "response.created", "response": base})]
    for index, item in enumerate(items):
        events.append(
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": item})
        )
        events.append(
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item})
        )
    done = base | {"status": "completed", "output": items, "usage": usage}
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    return Sse(events)


def responses_message(text: str) -> Json:
    return {
        "type": "message",
        "id": f"msg_{next(_ids)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_function_call(name: str, arguments: Json) -> Json:
    return {
        "type": "function_call",
        "id": f"fc_{next(_ids)}",
        "call_id": f"call_{next(_ids)}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


# ---- Gemini streamGenerateContent (alt=sse) --------------------------------------------------------------------------


def gemini_usage(prompt: int, candidates: int, cached: int = 0, thoughts: int = 0) -> Json:
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "cachedContentTokenCount": cached,
        "thoughtsTokenCount": thoughts,
        "totalTokenCount": prompt + candidates + thoughts,
    }


def gemini_stream(model: str, parts: list[Json], usage: Json) -> Sse:
    chunk = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": f"resp_{next(_ids)}",
    }
    return Sse([("", chunk)])


def gemini_has_function_response(contents: list[Any]) -> bool:
    return any(
        isinstance(part, dict) and "functionResponse" in part
        for message in contents
        if isinstance(message, dict)
        for part in message.get("parts", [])
    )


# ---- OpenAI Chat Completions, streamed (OpenCode, Qwen Code, aider, mini-swe-agent) ----------------------------------


def chat_usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> Json:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def chat_stream(model: str, usage: Json, text: str | None = None, call: tuple[str, Json] | None = None) -> Sse:
    """A chat.completion.chunk stream: one delta with the text or the tool call, a finish chunk, then usage."""
    chunk_id = f"chatcmpl-{next(_ids)}"

    def chunk(delta: Json, finish: str | None, extra: Json | None = None) -> Json:
        body: Json = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else [],
        }
        return body | (extra or {})

    events: list[tuple[str, Json]] = [("", chunk({"role": "assistant", "content": ""}, None))]
    if call is not None:
        name, arguments = call
        tool_call = {
            "index": 0,
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        events.append(("", chunk({"tool_calls": [tool_call]}, None)))
        events.append(("", chunk({}, "tool_calls")))
    else:
        events.append(("", chunk({"content": text or ""}, None)))
        events.append(("", chunk({}, "stop")))
    events.append(("", chunk({}, None, {"choices": [], "usage": usage})))
    return Sse(events, done_marker=True)


def chat_has_tool_result(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)


def chat_plain(model: str, usage: Json, text: str | None = None, call: tuple[str, Json] | None = None) -> Plain:
    """A non-streamed chat.completion (aider with --no-stream, mini-swe-agent through litellm)."""
    message: Json = {"role": "assistant", "content": text}
    finish = "stop"
    if call is not None:
        name, arguments = call
        message["tool_calls"] = [
            {
                "id": f"call_{next(_ids)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
        finish = "tool_calls"
    body = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }
    return Plain(200, body)


# ---- A vendor's host, seen through the proxy everything outbound goes through ---------------------------------------


class ProxyRecorder:
    """An HTTP(S) proxy that records the host of every request it is asked to carry and carries none (403): set as
    ``HTTPS_PROXY``, it shows whether anything on this machine tried to reach a provider's own host."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                target = self.path.split("://", 1)[-1].split("/", 1)[0]
                with recorder._lock:
                    recorder.hosts.append(target.rsplit(":", 1)[0] if ":" in target else target)
                self.send_response(403)
                self.send_header("content-length", "0")
                self.end_headers()

            do_CONNECT = do_GET = do_POST = do_HEAD = _refuse

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ProxyRecorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
