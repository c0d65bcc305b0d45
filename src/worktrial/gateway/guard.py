"""What the gateway takes from a client, bounded: the gateway runs inside the harness, and its clients are agents.

An agent holds a valid token for its attempt and can send anything with it: a body of gigabytes, thousands of
connections, a request head that never ends, a body one byte a minute. None of that may grow the harness (whose
memory ``--max-memory`` does not cover) or stall it, so every resource a client can make the gateway hold has a
limit here, enforced as the bytes arrive, never after they were buffered:

- the request head: at most ``header_bytes`` (h11 refuses more with a 400), complete within ``header_timeout_secs``
  of the connection opening or of the previous answer, else the connection is closed;
- open connections: at most ``connections``; one more is closed as soon as it is accepted;
- requests in flight per token: at most ``requests_per_token``; one more is answered 429 before its body is read;
- the body: counted as it is read, refused with 413 at ``max_request_bytes`` (a declared ``Content-Length`` over it
  at once), with 408 when it has not arrived within ``body_timeout_secs``; the bodies held at once are bounded per
  token (``token_body_bytes``) and over every attempt (``body_bytes``), beyond which a request gets 503.

An answer that refuses a request before its body is read closes the connection, so the rest of the body is never
read either.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import h11
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

MiB = 1024 * 1024
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
_TOKEN = re.compile(r"^/g/([^/]+)")
HELD = "worktrial.held"
"""The scope key of a request's ``Held`` account (set by ``Guard``, filled by ``read_body``)."""


@dataclass(frozen=True)
class GatewayLimits:
    """Everything a client can make the gateway hold, bounded (see the module docstring)."""

    max_request_bytes: int = 64 * MiB
    requests_per_token: int = 16
    token_body_bytes: int = 128 * MiB
    body_bytes: int = 256 * MiB
    header_bytes: int = 64 * 1024
    header_timeout_secs: float = 30.0
    body_timeout_secs: float = 120.0
    connections: int = 512


def refusal(status: int, message: str) -> JSONResponse:
    """An answer of the gateway's own that also ends the connection (nothing more of the request is read)."""
    body = {"error": {"type": "worktrial_gateway", "message": message}}
    return JSONResponse(body, status_code=status, headers={"connection": "close"})


@dataclass
class Held:
    """One request's share of what the gateway holds: its token and the body bytes it reserved."""

    token: str
    body: int = 0


@dataclass
class Load:
    """What the gateway holds right now, over every client (kept by its event loop's thread only)."""

    requests: dict[str, int] = field(default_factory=dict)
    """Token -> requests in flight (absent at zero)."""
    token_bytes: dict[str, int] = field(default_factory=dict)
    """Token -> body bytes held (absent at zero)."""
    body_bytes: int = 0
    connections: int = 0

    def snapshot(self) -> dict[str, int]:
        return {
            "requests": sum(self.requests.values()),
            "body_bytes": self.body_bytes,
            "connections": self.connections,
        }


class Guard:
    """ASGI middleware: at most ``requests_per_token`` requests of one token in flight (their answers streamed to
    the end included), and every body byte a request reserved given back when it ends, however it ends."""

    def __init__(self, app: App, limits: GatewayLimits, load: Load) -> None:
        self.app, self.limits, self.load = app, limits, load

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _TOKEN.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        token = match.group(1)
        count = self.load.requests.get(token, 0)
        if count >= self.limits.requests_per_token:
            limit = self.limits.requests_per_token
            answer = refusal(429, f"worktrial gateway: more than {limit} requests of this attempt at once")
            await answer(scope, receive, send)
            return
        self.load.requests[token] = count + 1
        held = scope[HELD] = Held(token)
        try:
            await self.app(scope, receive, send)
        finally:
            _release(self.load.requests, token, 1)
            _release(self.load.token_bytes, token, held.body)
            self.load.body_bytes -= held.body
            held.body = 0


def _release(counts: dict[str, int], token: str, amount: int) -> None:
    left = counts.get(token, 0) - amount
    if left > 0:
        counts[token] = left
    else:
        counts.pop(token, None)


async def read_body(request: Request, limits: GatewayLimits, load: Load) -> bytes | JSONResponse:
    """The request's body, read with a running count against every limit; or the answer that refuses it."""
    held: Held = request.scope[HELD]
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_request_bytes:
        return refusal(413, "worktrial gateway: request body too large")
    chunks: list[bytes] = []
    try:
        async with asyncio.timeout(limits.body_timeout_secs), contextlib.aclosing(request.stream()) as stream:
            async for chunk in stream:
                if held.body + len(chunk) > limits.max_request_bytes:
                    return refusal(413, "worktrial gateway: request body too large")
                token_total = load.token_bytes.get(held.token, 0) + len(chunk)
                if token_total > limits.token_body_bytes or load.body_bytes + len(chunk) > limits.body_bytes:
                    return refusal(503, "worktrial gateway: too many request bodies held at once; retry")
                load.token_bytes[held.token] = token_total
                load.body_bytes += len(chunk)
                held.body += len(chunk)
                chunks.append(chunk)
    except TimeoutError:
        return refusal(408, f"worktrial gateway: the request body did not arrive within {limits.body_timeout_secs:g}s")
    except ClientDisconnect:
        return refusal(400, "worktrial gateway: the client went away mid-request")
    return b"".join(chunks)


def guarded_protocol(limits: GatewayLimits, load: Load) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with a deadline for every request head and a cap on open connections."""

    class Guarded(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            load.connections = len(self.connections)
            if len(self.connections) > limits.connections:
                transport.close()
                return
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)
            load.connections = len(self.connections)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()

        def _await_head(self) -> None:
            self._stop_waiting()
            self._head_timer = self.loop.call_later(limits.header_timeout_secs, self._head_overdue)

        def _stop_waiting(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_overdue(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return Guarded
