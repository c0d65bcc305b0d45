"""A real loopback HTTP server that speaks the OpenAI Chat Completions and Anthropic Messages wire formats.

Tests point the real ``openai`` and ``anthropic`` SDKs at it (``base_url``), so requests, retries, error bodies and
usage parsing all go through the SDKs' own code. Responses come from a script: each step is either a ready
``Reply`` or a function of the parsed request that returns one, which lets a scripted model react to tool results.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Small server-directed delays keep SDK retries fast in tests (both SDKs honour retry-after-ms).
FAST_RETRY = {"retry-after-ms": "10"}
Json = dict[str, Any]


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw_size: int


Step = Reply | Callable[[Request], Reply]
_ids = itertools.count(1)


# ---- OpenAI Chat Completions -------------------------------------------------------------------------------------


def openai_usage(prompt: int, completion: int, cached: int | None = None, reasoning: int | None = None) -> Json:
    usage: Json = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def openai_reply(
    *calls: tuple[str, dict[str, Any] | str], text: str | None = None, usage: dict[str, Any] | None = None
) -> Reply:
    """A chat.completion; each call is (tool name, arguments as a dict or as the exact raw string)."""
    tool_calls = [
        {
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for name, args in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return Reply(200, body)


def openai_error(status: int, message: str, code: str | None = None, retry_fast: bool = True) -> Reply:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return Reply(status, {"error": error}, dict(FAST_RETRY) if retry_fast else {})


# ---- Anthropic Messages ------------------------------------------------------------------------------------------


def anthropic_usage(inp: int, out: int, cache_read: int | None = None, cache_write: int | None = None) -> Json:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }


def anthropic_reply(
    *calls: tuple[str, dict[str, Any]], text: str | None = None, usage: dict[str, Any] | None = None
) -> Reply:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content.extend({"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": n, "input": a} for n, a in calls)
    body = {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "scripted",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage or anthropic_usage(1, 1),
    }
    return Reply(200, body)


def anthropic_error(status: int, kind: str, message: str) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": message}}, dict(FAST_RETRY))


# ---- the server --------------------------------------------------------------------------------------------------


def turn_index(request: Request) -> int:
    """How many assistant turns the request already holds: a stateless scripted model's step number."""
    return sum(1 for m in request.body.get("messages", []) if m.get("role") == "assistant")


class ScriptedProvider:
    """Serve ``steps`` in order (one per request); record every request. Use as a context manager."""

    def __init__(self, steps: Sequence[Step] | Callable[[Request], Reply]) -> None:
        self.steps: Iterator[Step] | None = None if callable(steps) else iter(steps)
        self.responder = steps if callable(steps) else None
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(size)
                request = Request(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"), len(raw)
                )
                reply = provider._next(request)
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.responder is not None:
                return self.responder(request)
            assert self.steps is not None
            step = next(self.steps, None)
        if step is None:
            return Reply(500, {"error": {"message": "script exhausted", "type": "test"}}, {"x-should-retry": "false"})
        return step(request) if callable(step) else step

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
