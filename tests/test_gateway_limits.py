"""An agent floods the model gateway with its own valid token: the harness's memory stays bounded, and no slow or
endless request holds it.

The gateway runs in a process of its own here (as it runs inside the harness), so its peak resident memory
(``VmHWM``) is the gateway's alone: compared before and after a 600 MiB chunked body, it must not grow by more than
a generous 100 MiB (the body limit is 64 MiB; before the fix the whole body was buffered). Nothing is timed: a slow
client's connection is awaited until the gateway closes it, with a deadline only against hanging.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

GATEWAY = r"""
import json, sys, threading
from worktrial.gateway import Gateway, Route
from worktrial.gateway.guard import GatewayLimits

gateway = Gateway(limits=GatewayLimits(**json.loads(sys.argv[1])))
session = gateway.open(threading.Event())
print(session.route(Route("openai", "http://127.0.0.1:9/v1", "sk-real-key", "openai")), flush=True)
for line in sys.stdin:
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    memory = {k: int(status[k].split()[0]) for k in ("VmHWM", "VmRSS")}
    print(json.dumps({**memory, **gateway.load()}), flush=True)
"""
WAIT_SECS = 120.0
MiB = 1024 * 1024


@dataclass
class Child:
    process: subprocess.Popen[str]
    url: str

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        assert parts.hostname is not None and parts.port is not None
        return parts.hostname, parts.port

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    def stats(self) -> dict[str, int]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("stats\n")
        self.process.stdin.flush()
        answer: dict[str, int] = json.loads(self.process.stdout.readline())
        return answer

    def wait_for(self, key: str, value: int) -> None:
        deadline = time.monotonic() + WAIT_SECS
        while self.stats()[key] != value:
            assert time.monotonic() < deadline, (key, value, self.stats())
            time.sleep(0.02)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=WAIT_SECS)
        return sock


def _start(**limits: Any) -> Iterator[Child]:
    process = subprocess.Popen(
        [sys.executable, "-c", GATEWAY, json.dumps(limits)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), url
        yield Child(process, url)
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def gateway() -> Iterator[Child]:
    yield from _start()


@pytest.fixture
def impatient_gateway() -> Iterator[Child]:
    """A slow client is let go after half a second."""
    yield from _start(header_timeout_secs=0.5, body_timeout_secs=0.5)


@pytest.fixture
def small_gateway() -> Iterator[Child]:
    """A few connections reach each cap."""
    yield from _start(requests_per_token=2, connections=8)


def _head(child: Child, extra: str = "", path: str | None = None) -> bytes:
    target = path or f"{child.path}/chat/completions"
    return f"POST {target} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{extra}\r\n".encode()


def _answer(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def _flood(sock: socket.socket, total: int) -> None:
    """``total`` bytes as a chunked body, 1 MiB at a time; stops when the gateway closes the connection."""
    piece = b"x" * MiB
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for _ in range(total // MiB):
            sock.sendall(chunk)
        sock.sendall(b"0\r\n\r\n")


def test_a_600_mib_chunked_body_never_grows_the_gateway(gateway: Child) -> None:
    before = gateway.stats()
    with gateway.connect() as sock:
        sock.sendall(_head(gateway, "Transfer-Encoding: chunked\r\n"))
        _flood(sock, 600 * MiB)
        answer = _answer(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 413"), answer[:200]
    gateway.wait_for("requests", 0)
    after = gateway.stats()
    grown = (after["VmHWM"] - before["VmHWM"]) / 1024
    assert grown < 100, f"the gateway's peak memory grew by {grown:.0f} MiB for a body it refuses"
    assert after["body_bytes"] == 0
    # A declared length over the limit is refused before one byte of the body is read.
    with gateway.connect() as sock:
        sock.sendall(_head(gateway, f"Content-Length: {600 * MiB}\r\n"))
        assert _answer(sock).startswith(b"HTTP/1.1 413")


def test_an_endless_request_head_is_refused(gateway: Child) -> None:
    before = gateway.stats()
    with gateway.connect() as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(_head(gateway)[:-2] + b"X-Flood: " + b"a" * (8 * MiB))
        answer = _answer(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert (gateway.stats()["VmHWM"] - before["VmHWM"]) / 1024 < 100


def test_slow_clients_are_let_go(impatient_gateway: Child) -> None:
    child = impatient_gateway
    # A head that never ends, and one that never starts: closed by the gateway, no answer.
    with child.connect() as dribble, child.connect() as silent:
        dribble.sendall(_head(child)[:20])
        assert _answer(dribble) == b"" and _answer(silent) == b""
    # A body that never arrives: 408, and the connection ends.
    with child.connect() as sock:
        sock.sendall(_head(child, "Content-Length: 1000\r\n") + b"{")
        assert _answer(sock).startswith(b"HTTP/1.1 408")
    child.wait_for("requests", 0)
    child.wait_for("connections", 0)


def test_requests_per_token_and_connections_are_capped(small_gateway: Child) -> None:
    child = small_gateway
    held = [child.connect() for _ in range(2)]
    try:
        for sock in held:  # two requests of the token in flight, their bodies never sent
            sock.sendall(_head(child, "Content-Length: 1000\r\n"))
        child.wait_for("requests", 2)
        with child.connect() as third:
            third.sendall(_head(child, "Content-Length: 2\r\n") + b"{}")
            assert _answer(third).startswith(b"HTTP/1.1 429")
        # A request of another token is not held back by this one's (it is refused for its unknown token).
        with child.connect() as other:
            other.sendall(_head(child, "Content-Length: 2\r\n", path="/g/not-a-token/openai/x") + b"{}")
            assert _answer(other).startswith(b"HTTP/1.1 401")
        idle = [child.connect() for _ in range(6)]
        try:
            child.wait_for("connections", 8)
            with child.connect() as over:  # the ninth connection is closed as soon as it is accepted
                assert _answer(over) == b""
        finally:
            for sock in idle:
                sock.close()
    finally:
        for sock in held:
            sock.close()
    child.wait_for("requests", 0)


def test_a_large_body_is_read_for_its_model_without_parsing_it() -> None:
    """Parsed, 8 MiB of ``{},`` would take ~25 times that; past 1 MiB only the first "model" string is looked for."""
    from worktrial.gateway.wire import MAX_PARSED_REQUEST_BYTES, requested_model

    small = json.dumps({"messages": [], "model": "gpt-small"}).encode()
    large = b'{"model": "gpt-large", "messages": [' + b"{}," * (8 * MiB // 3) + b"{}]}"
    assert len(large) > MAX_PARSED_REQUEST_BYTES
    assert requested_model("chat", "chat/completions", small) == "gpt-small"
    assert requested_model("chat", "chat/completions", large) == "gpt-large"
    assert requested_model("chat", "chat/completions", b"[" + b"{}," * MiB + b"{}]") is None
