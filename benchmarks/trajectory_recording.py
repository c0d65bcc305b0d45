"""What recording trajectories (``--trajectories``) costs at the model gateway, per model call: wall and CPU.

A loopback model server (tests/cli_servers.py) answers Chat Completions calls, as JSON and as a 43-event stream.
Each simulated attempt makes ``--turns`` calls whose request carries the conversation so far, as an agent's does:
the task, then per turn the model's tool call and a tool result of ``--result-bytes``, so the last request holds
the whole attempt. The same attempts run through a gateway session without a recorder (the baseline: what every
run pays) and with one; the script prints the median and p95 latency per call, the process CPU per call (every
thread: client, gateway, server; the traffic is the same, so the difference is the recorder's), and the sealed
trajectory's size.

    .venv/bin/python benchmarks/trajectory_recording.py [--attempts 5] [--turns 40] [--result-bytes 4000]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.cli_servers

from tests.cli_servers import CliServer, Plain, Request, Sse, chat_plain, chat_stream, chat_usage

from worktrial.gateway import Gateway, Route
from worktrial.gateway.recorder import Recorder
from worktrial.model.trajectory import AgentInfo, seal

CHUNKS = 40


def answer(request: Request) -> Sse | Plain:
    usage = chat_usage(1200, 80, cached=300)
    call = ("bash", {"command": "python -m pytest -q tests/test_parser.py"})
    if request.body.get("stream"):
        stream = chat_stream("bench-model", usage, call=call)
        return Sse([stream.events[0], *[stream.events[1]] * CHUNKS, *stream.events[2:]], done_marker=True)
    return chat_plain("bench-model", usage, call=call)


def nodelay(server: CliServer) -> None:
    """TCP_NODELAY on the server's connections too (see benchmarks/gateway_latency.py)."""
    accept = server.server.get_request

    def get_request() -> tuple[socket.socket, Any]:
        connection, address = accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address

    server.server.get_request = get_request  # type: ignore[method-assign]


def conversation(turns: int, result_bytes: int, stream: bool) -> list[bytes]:
    """The request bodies of one attempt: each holds every earlier turn."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * 200},
        {"role": "user", "content": "Fix the failing parser test in tests/test_parser.py."},
    ]
    bodies = []
    for turn in range(turns):
        bodies.append(json.dumps({"model": "bench-model", "messages": messages, "stream": stream}).encode())
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "x"}'}}
        messages = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"line {turn}\n" * (result_bytes // 8)},
        ]
    return bodies


def attempt(client: httpx.Client, url: str, bodies: list[bytes], stream: bool) -> list[float]:
    times = []
    headers = {"content-type": "application/json"}
    for body in bodies:
        start = time.perf_counter()
        if stream:
            with client.stream("POST", f"{url}/chat/completions", content=body, headers=headers) as response:
                for _chunk in response.iter_raw():
                    pass
        else:
            client.post(f"{url}/chat/completions", content=body, headers=headers).read()
        times.append((time.perf_counter() - start) * 1000)
    return times


def run(gateway: Gateway, server: CliServer, args: argparse.Namespace, stream: bool, record: bool) -> dict[str, Any]:
    bodies = conversation(args.turns, args.result_bytes, stream)
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    times: list[float] = []
    sealed_bytes: list[int] = []
    with httpx.Client(timeout=60, transport=transport) as client:
        cpu = time.process_time()
        for _ in range(args.attempts):
            session = gateway.open(threading.Event())
            if record:
                session.recorder = Recorder()
            url = session.route(Route("openai", f"{server.url}/v1", "sk-bench", "openai"))
            times += attempt(client, url, bodies, stream)
            session.close()
            if session.recorder is not None:
                trajectory = session.recorder.trajectory(AgentInfo(name="bench", version="0"))
                assert trajectory is not None
                sealed_bytes.append(len(seal(trajectory, lambda text: (text, 0)).text))
        cpu = time.process_time() - cpu
    calls = args.attempts * args.turns
    return {
        "p50": statistics.median(times),
        "p95": sorted(times)[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
        "cpu": cpu / calls * 1000,
        "sealed": statistics.median(sealed_bytes) if sealed_bytes else None,
        "last_body": len(bodies[-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--result-bytes", type=int, default=4000)
    args = parser.parse_args()
    with CliServer(answer) as server, Gateway() as gateway:
        nodelay(server)
        results = {}
        for stream in (False, True):
            run(gateway, server, argparse.Namespace(attempts=1, turns=5, result_bytes=100), stream, True)  # warm up
            for record in (False, True):
                results[(stream, record)] = run(gateway, server, args, stream, record)
    last = results[(False, False)]["last_body"]
    print(
        f"{args.attempts} attempts x {args.turns} calls, tool results of {args.result_bytes} B (last request "
        f"{last / 1024:.0f} KiB); per call, milliseconds"
    )
    print(f"{'':<24} {'p50':>8} {'p95':>8} {'CPU':>8}")
    for stream in (False, True):
        kind = "stream" if stream else "JSON"
        base, rec = results[(stream, False)], results[(stream, True)]
        print(f"{kind + ', not recorded':<24} {base['p50']:8.3f} {base['p95']:8.3f} {base['cpu']:8.3f}")
        print(f"{kind + ', recorded':<24} {rec['p50']:8.3f} {rec['p95']:8.3f} {rec['cpu']:8.3f}")
        added = f"{rec['p50'] - base['p50']:+8.3f} {rec['p95'] - base['p95']:+8.3f} {rec['cpu'] - base['cpu']:+8.3f}"
        print(f"{kind + ', added':<24} {added}")
    print(f"sealed trajectory per attempt: {results[(False, True)]['sealed'] / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
