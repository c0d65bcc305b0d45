"""What the model gateway adds to each model call: direct to a loopback model server vs through the gateway.

A loopback server (tests/cli_servers.py, the scripted servers the tests use) answers a Chat Completions call as
one JSON body, and as a Server-Sent Events stream of 40 chunks. One persistent client calls it N times directly,
then N times through a gateway session (the same server as the session's upstream), and the same for the stream
(time to the first chunk and to the last). Prints the median and p95 of each, side by side, and the difference:
the latency the gateway adds per request. The server is on the same machine, so the figures are the gateway's own
cost (its HTTP hop, header swap and usage reading), not a provider's network. The CPU per request (this process's,
every thread: client, server and gateway) is printed too, direct and through the gateway: their difference is the
CPU the gateway spends on each call, which wall-clock latency on a shared machine hides.

    .venv/bin/python benchmarks/gateway_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.cli_servers

from tests.cli_servers import CliServer, Plain, Request, Sse, chat_plain, chat_stream, chat_usage

from worktrial.gateway import Gateway, Route

CHUNKS = 40
T = TypeVar("T")


def answer(request: Request) -> Sse | Plain:
    usage = chat_usage(1200, 80, cached=300, reasoning=10)
    if request.body.get("stream"):
        stream = chat_stream("bench-model", usage, text="x")
        # a realistic stream: many small deltas before the finish and usage chunks
        delta = stream.events[1]
        return Sse([stream.events[0], *[delta] * CHUNKS, *stream.events[2:]], done_marker=True)
    return chat_plain("bench-model", usage, text="x" * 200)


def nodelay(server: CliServer) -> None:
    """TCP_NODELAY on the test server's connections, as on the clients' and the gateway's: otherwise a response's
    headers and body, written separately, wait for the peer's delayed ACK (40 ms) on a kept-alive connection, and
    that artefact of the test server would swamp what is measured."""
    accept = server.server.get_request

    def get_request() -> tuple[socket.socket, Any]:
        connection, address = accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address

    server.server.get_request = get_request  # type: ignore[method-assign]


def timed_json(client: httpx.Client, url: str) -> float:
    start = time.perf_counter()
    client.post(f"{url}/chat/completions", json={"model": "bench-model", "messages": []}).raise_for_status()
    return (time.perf_counter() - start) * 1000


def timed_stream(client: httpx.Client, url: str) -> tuple[float, float]:
    start = time.perf_counter()
    first = None
    body = {"model": "bench-model", "messages": [], "stream": True}
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        for _chunk in response.iter_raw():
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - start) * 1000, (end - start) * 1000


CPU: dict[str, float] = {}
"""CPU ms per request of each measured series (every thread of this process), by name."""


def measure(n: int, call: Callable[[], T], name: str = "") -> list[T]:
    for _ in range(min(20, n)):  # warm the connections
        call()
    start = time.process_time()
    found = [call() for _ in range(n)]
    CPU[name] = (time.process_time() - start) / n * 1000
    return found


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def row(name: str, direct: list[float], gateway: list[float]) -> str:
    d50, g50 = statistics.median(direct), statistics.median(gateway)
    return f"{name:<26} {d50:9.3f} {p95(direct):9.3f}   {g50:9.3f} {p95(gateway):9.3f}   {g50 - d50:+9.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    n = parser.parse_args().requests
    with CliServer(answer) as server, Gateway() as gateway:
        nodelay(server)
        session = gateway.open(threading.Event())
        routed = session.route(Route("openai", f"{server.url}/v1", "sk-bench", "openai"))
        direct = f"{server.url}/v1"
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(timeout=30, transport=transport) as client:
            json_direct = measure(n, lambda: timed_json(client, direct), "json direct")
            json_gateway = measure(n, lambda: timed_json(client, routed), "json gateway")
            stream_direct = measure(n, lambda: timed_stream(client, direct), "stream direct")
            stream_gateway = measure(n, lambda: timed_stream(client, routed), "stream gateway")
        report = session.report()
    first_d = [s[0] for s in stream_direct]
    first_g = [s[0] for s in stream_gateway]
    total_d = [s[1] for s in stream_direct]
    total_g = [s[1] for s in stream_gateway]
    print(f"{n} requests each, loopback server, {CHUNKS + 3}-event SSE stream; milliseconds")
    print(f"{'':<26} {'direct':>9} {'':>9}   {'gateway':>9} {'':>9}   {'added':>9}")
    print(f"{'':<26} {'p50':>9} {'p95':>9}   {'p50':>9} {'p95':>9}   {'(p50)':>9}")
    print(row("JSON answer", json_direct, json_gateway))
    print(row("stream, first chunk", first_d, first_g))
    print(row("stream, whole", total_d, total_g))
    print("CPU ms per request (this process, every thread):")
    for kind in ("json", "stream"):
        d, g = CPU[f"{kind} direct"], CPU[f"{kind} gateway"]
        print(f"{'JSON answer' if kind == 'json' else 'stream, whole':<26} direct {d:7.3f}   gateway {g:7.3f}   "
              f"added {g - d:+7.3f}")  # fmt: skip
    tokens = report.usage.tokens
    print(f"gateway counted {report.requests} requests, {tokens.input} input / {tokens.output} output tokens")


if __name__ == "__main__":
    main()
