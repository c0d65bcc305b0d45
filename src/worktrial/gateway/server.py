"""The run's model gateway: a local HTTP server between the agents and their providers.

It runs an ASGI app (starlette) under uvicorn in a background thread with its own event loop, listening on
127.0.0.1 (a free port) and on a unix socket in a directory of its own. A request arrives as
``/g/<token>/<route>/<path>``: the token names the attempt, the route its upstream; the gateway forwards
``<path>`` to the upstream's base URL with the user's real key in place of the token (httpx, the provider SDKs'
client), streams the answer back chunk by chunk as it arrives (Server-Sent Events unchanged), and reads the usage
the provider reported on the way through.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route as StarletteRoute

from worktrial.gateway import forward
from worktrial.gateway.guard import GatewayLimits, Guard, Load, guarded_protocol, read_body, refusal
from worktrial.gateway.recorder import Recording
from worktrial.gateway.session import (
    Call,
    PriceFn,
    ProviderFailure,
    Route,
    RunSpend,
    Session,
    classify,
    no_answer,
    stream_cut,
)
from worktrial.gateway.wire import Exchange, SseReader, Wire, requested_model, wire_of
from worktrial.model.records import ErrorCategory
from worktrial.util import public_url

log = logging.getLogger(__name__)

SOCKET_NAME = "gateway.sock"
START_TIMEOUT_SECS = 30.0
MAX_JSON_ANSWER_BYTES = 64 * 1024 * 1024
_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
_HOP_BY_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "accept-encoding"}
    | {"proxy-authorization", "proxy-connection"}
)
_ANSWER_DROPPED = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"})
MAX_ERROR_BODY = 64 * 1024
UPSTREAM_TIMEOUT = httpx.Timeout(connect=30.0, read=600.0, write=60.0, pool=60.0)


class Gateway:
    """One run's gateway. ``open`` gives each attempt a ``Session``; nothing listens until the first one."""

    def __init__(
        self, *, upstream_timeout: httpx.Timeout = UPSTREAM_TIMEOUT, limits: GatewayLimits | None = None
    ) -> None:
        self.limits = limits or GatewayLimits()
        """What a client can make the gateway hold (``guard.py``): the agents are its clients."""
        self._load = Load()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._timeout = upstream_timeout
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._dir: Path | None = None
        self.port: int | None = None
        self.socket_path: Path | None = None
        self._failed: BaseException | None = None
        self._ready = threading.Event()
        self._draining: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.run_spend: RunSpend | None = None
        """The run's ``--max-cost``, kept live over every session (``limit_run``)."""
        self.rate_limited = 0
        """The provider's 429 answers so far, over every session (``--jobs auto`` backs off on them); written by the
        gateway's thread only."""

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen (idempotent). Raises OSError when it cannot."""
        directory = self._socket_dir()
        with self._lock:
            if self._thread is not None:
                ready = self._ready
            else:
                ready = self._ready = threading.Event()
                self._launch(directory, ready)
        if not ready.wait(START_TIMEOUT_SECS) or self._failed is not None:
            self.close()
            raise OSError(f"the model gateway did not start: {self._failed or 'timed out'}")

    def _launch(self, directory: Path, ready: threading.Event) -> None:
        """Bind both sockets and start the server's thread (under the lock)."""
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by every accepted connection
        tcp.bind(("127.0.0.1", 0))
        self.port = tcp.getsockname()[1]
        self.socket_path = directory / SOCKET_NAME
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(self.socket_path))
        self.socket_path.chmod(0o666)
        (directory / forward.SCRIPT_NAME).write_text(forward.script_text())
        (directory / forward.SCRIPT_NAME).chmod(0o644)
        app = Starlette(
            routes=[
                StarletteRoute("/g/{token}/{route}/{rest:path}", self._proxy, methods=_METHODS),
                StarletteRoute("/g/{token}/{route}", self._proxy, methods=_METHODS),
            ]
        )
        config = uvicorn.Config(
            Guard(app, self.limits, self._load),
            lifespan="off",
            log_level="error",
            access_log=False,
            http=guarded_protocol(self.limits, self._load),
            ws="none",
            loop="asyncio",
            timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=self.limits.header_bytes,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._serve, args=([tcp, unix], ready), name="worktrial-gateway", daemon=True
        )
        self._thread.start()

    def _serve(self, sockets: list[socket.socket], ready: threading.Event) -> None:
        async def main() -> None:
            assert self._server is not None
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
            # TCP_NODELAY: a request's headers and body leave as separate writes, and without it the body waits for
            # the server's delayed ACK of the headers (40 ms on Linux) on every call.
            nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=True, socket_options=nodelay)
            async with httpx.AsyncClient(timeout=self._timeout, transport=transport, trust_env=True) as client:
                self._client = client
                self._loop = asyncio.get_running_loop()
                serving = asyncio.create_task(self._server.serve(sockets=sockets))
                while not self._server.started and not serving.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await serving

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to start(); a crash later leaves agents with refused connections
            self._failed = exc
            log.warning("the model gateway stopped: %s", exc)
        finally:
            ready.set()
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        """Stop listening and remove the socket's directory (idempotent). Calls still in flight (a provider that
        does not answer) are ended first, so the server stops at once and quietly."""
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.abort_calls()
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(self._stop_draining)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None
        self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _stop_draining(self) -> None:
        """On the gateway's loop: the run is over, nobody reads what abandoned streams still deliver."""
        for task in list(self._draining):
            task.cancel()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------------------------------------------

    def limit_run(self, max_cost: float, spent: float) -> None:
        """Keep the run's budget at the gateway: ``spent`` so far (stored attempts), plus every priced call of the
        sessions opened from now on; once the total passes ``max_cost`` every further call is refused and every
        session whose agent calls through the gateway is ended (``GatewayReport.over_budget``)."""
        self.run_spend = RunSpend(max_cost, spent, self._end_all_for_budget)

    def _end_all_for_budget(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.end_for_budget()

    def open(
        self,
        cancel: threading.Event,
        *,
        price: PriceFn | None = None,
        cost_cap: float | None = None,
        own_network: bool = False,
    ) -> Session:
        """A new attempt's session; the server starts when a session first routes an upstream. ``own_network``: the
        agent runs in a network namespace of its own (a sandbox with ``--network off`` or ``on``), where the
        gateway's port is forwarded to its unix socket (``Session.wrap``)."""
        session = Session(
            functools.partial(self._listening, own_network),
            price,
            cost_cap,
            cancel,
            self._socket_dir() if own_network else None,
            on_close=self._forget,
            run_spend=self.run_spend,
        )
        with self._lock:
            self._sessions[session.token] = session
        return session

    def _socket_dir(self) -> Path:
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="worktrial-gateway-"))
                self._dir.chmod(0o755)  # a sandbox running as another uid connects to the socket in it
            return self._dir

    def _listening(self, own_network: bool) -> tuple[str, tuple[str, ...]]:
        """Start (once); the base URL agents use and the prefix that forwards it into a network namespace."""
        self.start()
        assert self.port is not None and self._dir is not None and self.socket_path is not None
        prefix: tuple[str, ...] = ()
        if own_network:
            script = self._dir / forward.SCRIPT_NAME
            prefix = (sys.executable, "-I", "-S", str(script), str(self.port), str(self.socket_path), "--")
        return f"http://127.0.0.1:{self.port}", prefix

    def forward_target(self) -> tuple[int, str, str] | None:
        """Where a forwarder entered into a container's network namespace from this host relays to: the gateway's
        port, its unix socket and the forwarding script (None until the gateway listens)."""
        if self.port is None or self.socket_path is None or self._dir is None:
            return None
        return self.port, str(self.socket_path), str(self._dir / forward.SCRIPT_NAME)

    def load(self) -> dict[str, int]:
        """What clients make the gateway hold right now: requests in flight, body bytes, open connections."""
        return self._load.snapshot()

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.token, None)

    # -- the proxy -----------------------------------------------------------------------------------------------

    async def _proxy(self, request: Request) -> Response:
        with self._lock:
            session = self._sessions.get(request.path_params["token"])
        route = session.routes.get(request.path_params["route"]) if session is not None else None
        if session is None or route is None:  # the body is never read: the connection closes with the answer
            return refusal(401, "worktrial gateway: unknown token or route (it is valid only during its attempt)")
        if (refused := session.refusal()) is not None:
            return refusal(*refused)
        rest = request.path_params.get("rest", "")
        # Only a POST is a model call (Codex first tries a WebSocket upgrade on a GET of the same path).
        wire = wire_of(rest) if request.method == "POST" else None
        body = await read_body(request, self.limits, self._load)
        if not isinstance(body, bytes):
            return body
        requested = requested_model(wire, rest, body)
        recording = session.recorder.begin(wire, rest, body) if session.recorder is not None else None
        url = route.base_url.rstrip("/") + "/" + rest
        query: list[tuple[str, str | int | float | bool | None]] = [
            (k, route.key if k == "key" and route.key is not None else v) for k, v in request.query_params.multi_items()
        ]
        headers = _upstream_headers(request.headers.items(), route)
        assert self._client is not None
        exchange = Exchange(wire, recording)
        flight = _Flight(session, route, session.begin(wire is not None), wire, requested, exchange, time.monotonic())
        loop = asyncio.get_running_loop()
        upstream = self._client.build_request(request.method, url, params=query, headers=headers, content=body)
        # Sent in a task of its own, so that the attempt's end (or the gateway's) can call it off (Call.abort)
        # without cancelling the server's request handler.
        sending = loop.create_task(self._client.send(upstream, stream=True))
        flight.call.abort = functools.partial(flight.abort, loop, sending.cancel)
        try:
            await asyncio.wait({sending})
        finally:
            if not sending.done():  # the handler itself was cancelled
                sending.cancel()
                session.end(flight.call)
        if sending.cancelled():
            session.end(flight.call)
            _recorded(flight, 0, "the attempt ended while this call waited for the provider")
            return _error(504, "worktrial gateway: the attempt ended while this call waited for the provider")
        if (exc := sending.exception()) is not None:
            session.end(flight.call)
            if not isinstance(exc, httpx.HTTPError):
                raise exc
            failure = no_answer(route, type(exc).__name__)
            session.answered(flight.call, 0)
            session.failed(failure)
            _recorded(flight, 0, failure.message)
            return _error(502, f"worktrial gateway: {failure.message}")
        answer = sending.result()
        flight.heard()
        flight.call.abort = functools.partial(flight.abort, loop, lambda: loop.create_task(answer.aclose()))
        status = answer.status_code
        if status == 429:
            self.rate_limited += 1
        out_headers = {k: v for k, v in answer.headers.items() if k.lower() not in _ANSWER_DROPPED}
        streaming = "text/event-stream" in answer.headers.get("content-type", "")
        if streaming and status < 400:
            return StreamingResponse(self._relay(answer, flight), status_code=status, headers=out_headers)
        try:
            data = await _read_bounded(answer, flight)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            session.answered(flight.call, status)
            if flight.aborted:
                return _error(504, "worktrial gateway: the attempt ended while this answer arrived")
            failure = stream_cut(route, status, type(exc).__name__) if status < 400 else no_answer(route, "")
            session.failed(failure)
            _recorded(flight, 0, failure.message)
            return _error(502, f"worktrial gateway: {failure.message}")
        finally:
            await answer.aclose()
            session.end(flight.call)
        session.answered(flight.call, status)
        self._settle(flight, status, data)
        _recorded(flight, status, _error_said(data) if status >= 400 else "")
        return Response(data, status_code=status, headers=out_headers)

    async def _relay(self, answer: httpx.Response, flight: _Flight) -> AsyncIterator[bytes]:
        reader = SseReader(flight.exchange)
        relayed = broken_handled = False
        try:
            async for chunk in answer.aiter_bytes():
                flight.heard()
                reader.feed(chunk)
                yield chunk
            relayed = True
        except (httpx.HTTPError, httpx.StreamError) as exc:  # the stream broke (or the attempt's end closed it)
            relayed = broken_handled = True
            await answer.aclose()
            self._stream_ended(reader, flight, answer.status_code, type(exc).__name__)
        finally:
            if not relayed:
                # The agent went away mid-stream (it gave up, or was ended): the provider still serves, and bills,
                # the rest. Read it in a task of its own, outside this request's cancellation, to count it.
                task = asyncio.get_running_loop().create_task(self._drain(answer, reader, flight))
                self._draining.add(task)
                task.add_done_callback(self._draining.discard)
        if relayed and not broken_handled:
            await answer.aclose()
            self._stream_ended(reader, flight, answer.status_code, None)

    async def _drain(self, answer: httpx.Response, reader: SseReader, flight: _Flight) -> None:
        broken = None
        try:
            async for chunk in answer.aiter_bytes():
                flight.heard()
                reader.feed(chunk)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            broken = type(exc).__name__
        finally:
            await answer.aclose()
            self._stream_ended(reader, flight, answer.status_code, broken)

    def _stream_ended(self, reader: SseReader, flight: _Flight, status: int, broken: str | None) -> None:
        """A streamed answer is over: what it served is counted; one that stopped before its last event was cut."""
        reader.close()
        session, route, exchange = flight.session, flight.route, flight.exchange
        session.end(flight.call)
        session.answered(flight.call, status)
        said = f"the stream broke ({broken})" if broken is not None else ""
        if not said and exchange.stream_error is not None:
            said = f"an error event in the stream ({exchange.stream_error})"
        _recorded(flight, status, said)
        if exchange.tokens is not None or (exchange.ended and exchange.stream_error is None):
            session.used_tokens(route, exchange.model, flight.requested, exchange.tokens)
        if flight.aborted or flight.wire is None:
            return
        if exchange.stream_error is not None:  # an error event in a 200 stream (Anthropic's overloaded_error)
            message = f"the provider at {public_url(route.base_url)} failed mid-stream ({exchange.stream_error})"
            session.failed(ProviderFailure(ErrorCategory.PROVIDER_SERVER, message))
        elif not exchange.ended:
            session.failed(stream_cut(route, status, broken))

    def _settle(self, flight: _Flight, status: int, data: bytes) -> None:
        session, exchange = flight.session, flight.exchange
        if status < 400:
            if flight.wire is not None:
                exchange.read_json(data)
                session.used_tokens(flight.route, exchange.model, flight.requested, exchange.tokens)
            return
        failure = classify(flight.route, status, flight.wire is not None, flight.requested)
        # A refused key or unknown model ends the attempt whatever the path; a transient failure counts only on a
        # model call (a side endpoint the CLI probes may fail harmlessly).
        if failure is not None and (failure.fatal or flight.wire is not None):
            session.failed(failure)


@dataclass
class _Flight:
    """One request on its way through the gateway, and what its answer has said so far."""

    session: Session
    route: Route
    call: Call
    wire: Wire | None
    requested: str | None
    exchange: Exchange
    started: float
    """When the request arrived (monotonic): the trajectory's latency of the call."""
    aborted: bool = False
    """The attempt (or the gateway) ended the call: how it ends is nobody's failure."""

    def heard(self) -> None:
        """The provider sent something (headers or a chunk) for this call."""
        self.call.last_byte = time.monotonic()

    def abort(self, loop: asyncio.AbstractEventLoop, stop: Callable[[], object]) -> None:
        """From any thread: end the call (the attempt is over, nobody waits for the answer)."""
        self.aborted = True
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(stop)


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _upstream_headers(items: Iterable[tuple[str, str]], route: Route) -> list[tuple[str, str]]:
    """The request's headers for the upstream: hop-by-hop ones dropped, every credential header the agent sent
    (holding the token) replaced by the real key in the same header (a route without a key passes the agent's own
    on), identity encoding asked for so the usage can be read as it streams."""
    out: list[tuple[str, str]] = []
    sent_key = False
    for name, value in items:
        lower = name.lower()
        if lower in _HOP_BY_HOP:
            continue
        if lower in _CREDENTIAL_HEADERS and route.key is not None:  # without a key of its own: the agent's pass
            scheme, _, rest = value.partition(" ")
            value = f"{scheme} {route.key}" if lower == "authorization" and rest else route.key
            sent_key = True
        out.append((name, value))
    if not sent_key and route.key is not None:
        out.append(("authorization", f"Bearer {route.key}"))
    out.append(("accept-encoding", "identity"))
    return out


async def _read_bounded(answer: httpx.Response, flight: _Flight) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in answer.aiter_bytes():
        flight.heard()
        size += len(chunk)
        if size > MAX_JSON_ANSWER_BYTES:
            raise httpx.DecodingError("answer too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _recorded(flight: _Flight, status: int, error: str) -> None:
    """The trajectory recorder hears that a model call ended (the attempt records one: ``recorder.py``)."""
    exchange = flight.exchange
    if isinstance(exchange.recording, Recording):
        latency = (time.monotonic() - flight.started) * 1000
        exchange.recording.end(status, latency, model=exchange.model, tokens=exchange.tokens, error=error)


def _error_said(data: bytes) -> str:
    """What a provider's error answer says, in one short line (for the trajectory)."""
    try:
        body = json.loads(data[:MAX_ERROR_BODY])
    except (ValueError, RecursionError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return " ".join(message.split())[:300] if isinstance(message, str) else ""


def _error(status: int, message: str) -> JSONResponse:
    """An answer of the gateway's own, in the shape most SDKs read an error message from."""
    return JSONResponse({"error": {"type": "worktrial_gateway", "message": message}}, status_code=status)
