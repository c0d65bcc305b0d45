"""The model gateway against real loopback servers in each wire format: what it forwards, what it counts, and
how it sorts provider failures (tests/cli_servers.py serves the formats)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.cli_servers import (
    CliServer,
    Plain,
    Sse,
    anthropic_error,
    anthropic_plain,
    anthropic_stream,
    chat_plain,
    chat_stream,
    chat_usage,
    gemini_stream,
    gemini_usage,
    responses_message,
    responses_stream,
    responses_usage,
)
from worktrial.gateway import Gateway, Route, Session
from worktrial.gateway.session import TRANSIENT_LIMIT
from worktrial.model.records import ErrorCategory, Tokens

KEY = "sk-real-key-planted-0123456789"


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway() as gw:
        yield gw


@dataclass
class Opened:
    session: Session
    url: str
    cancel: threading.Event = field(default_factory=threading.Event)


def opened(gateway: Gateway, server: CliServer, name: str = "openai", **kwargs: object) -> Opened:
    cancel = threading.Event()
    session = gateway.open(cancel, **kwargs)  # type: ignore[arg-type]
    url = session.route(Route(name, server.url + ("/v1" if name == "openai" else ""), KEY, name, "TEST_KEY"))
    return Opened(session, url, cancel)


def sse_bytes(answer: Sse) -> bytes:
    out = b""
    for name, event in answer.events:
        head = f"event: {name}\n" if name else ""
        out += f"{head}data: {json.dumps(event)}\n\n".encode()
    return out + (b"data: [DONE]\n\n" if answer.done_marker else b"")


CASES: dict[str, tuple[str, str, Sse | Plain, Tokens, str]] = {
    "anthropic-stream": (
        "anthropic",
        "v1/messages",
        anthropic_stream(
            "claude-x-20250101",
            [{"type": "text", "text": "hi"}],
            {"input_tokens": 100, "output_tokens": 9, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5},
            "end_turn",
        ),
        Tokens(input=135, output=9, cached_input=30, cache_creation=5),
        "claude-x-20250101",
    ),
    "anthropic-json": (
        "anthropic",
        "v1/messages",
        anthropic_plain("claude-y", "hi", {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2}),
        Tokens(input=9, output=3, cached_input=2),
        "claude-y",
    ),
    "responses-stream": (
        "openai",
        "responses",
        responses_stream("gpt-r", [responses_message("ok")], responses_usage(500, 120, 40, 25)),
        Tokens(input=500, output=40, cached_input=120, cache_creation=0, reasoning=25),
        "gpt-r",
    ),
    "chat-stream": (
        "openai",
        "chat/completions",
        chat_stream("gpt-c", chat_usage(300, 20, cached=100, reasoning=8), text="done"),
        Tokens(input=300, output=20, cached_input=100, reasoning=8),
        "gpt-c",
    ),
    "chat-json": (
        "openai",
        "chat/completions",
        chat_plain("gpt-j", chat_usage(11, 4, cached=1, reasoning=2), text="done"),
        Tokens(input=11, output=4, cached_input=1, reasoning=2),
        "gpt-j",
    ),
    "gemini-stream": (
        "gemini",
        "v1beta/models/gemini-z:streamGenerateContent?alt=sse",
        gemini_stream("gemini-z-001", [{"text": "ok"}], gemini_usage(200, 10, cached=50, thoughts=6)),
        Tokens(input=200, output=16, cached_input=50, reasoning=6),
        "gemini-z-001",
    ),
    "gemini-json": (
        "gemini",
        "v1beta/models/gemini-z:generateContent",
        Plain(200, {"candidates": [], "usageMetadata": gemini_usage(20, 5), "modelVersion": "gemini-z-002"}),
        Tokens(input=20, output=5, cached_input=0, reasoning=0),
        "gemini-z-002",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_forwards_unchanged_and_counts_exactly(gateway: Gateway, case: str) -> None:
    name, path, answer, tokens, model = CASES[case]
    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, name)
        with httpx.Client() as client:
            got = client.post(
                f"{at.url}/{path}",
                json={"model": "asked-model", "stream": isinstance(answer, Sse)},
                headers={"authorization": f"Bearer {at.session.token}", "x-api-key": at.session.token},
            )
        report = at.session.report()
    assert got.status_code == 200
    if isinstance(answer, Sse):
        assert got.content == sse_bytes(answer)  # every byte of every event, unchanged
    else:
        assert got.json() == answer.body
    assert report.usage.tokens == tokens
    assert report.usage.model == model
    assert report.requests == 1 and report.statuses == {"200": 1}
    assert report.failure is None
    # The provider saw the real key, never the token, in the headers the agent put its token in.
    seen = server.requests[0].headers
    assert seen["authorization"] == f"Bearer {KEY}" and seen["x-api-key"] == KEY
    assert at.session.token not in json.dumps(seen)


def test_gemini_key_in_the_query_is_swapped(gateway: Gateway) -> None:
    answer = Plain(200, {"candidates": [], "usageMetadata": gemini_usage(1, 1)})
    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, "gemini")
        httpx.post(f"{at.url}/v1beta/models/m:generateContent?key={at.session.token}", json={})
    assert server.requests[0].path.endswith(f"?key={KEY}")


def test_a_stream_is_relayed_chunk_by_chunk(gateway: Gateway) -> None:
    """The first event reaches the agent while the provider still holds back the rest: nothing is buffered."""
    release = threading.Event()

    first = b'data: {"id": "a", "model": "m", "choices": []}\n\n'
    last = b'data: {"id": "a", "model": "m", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(first)
            self.wfile.flush()
            release.wait(30)
            self.wfile.write(last)
            self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cancel = threading.Event()
        session = gateway.open(cancel)
        url = session.route(Route("openai", f"http://127.0.0.1:{server.server_address[1]}/v1", KEY, "openai"))
        received = b""
        with httpx.stream("POST", f"{url}/chat/completions", json={"stream": True}, timeout=30) as answer:
            chunks = answer.iter_raw()
            while b"\n\n" not in received:
                received += next(chunks)
            assert received == first  # arrived before the provider sent the rest
            release.set()
            for chunk in chunks:
                received += chunk
        assert received == first + last
        assert session.report().usage.tokens == Tokens(input=3, output=2)
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_stream_the_agent_abandons_is_still_counted(gateway: Gateway) -> None:
    """The provider served (and bills) the whole answer though the agent closed the connection after one chunk."""
    answer = anthropic_stream(
        "claude-x", [{"type": "text", "text": "hi " * 2000}], {"input_tokens": 5, "output_tokens": 3}, "end_turn"
    )
    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, "anthropic")
        with httpx.stream("POST", f"{at.url}/v1/messages", json={"stream": True}) as got:
            next(got.iter_raw())  # then the connection is closed with the rest unread
        # The gateway reads the rest from the provider after the agent left: the usage is booked at the stream's end.
        deadline = time.monotonic() + 30
        while at.session.report().usage.tokens != Tokens(input=5, output=3) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert at.session.report().usage.tokens == Tokens(input=5, output=3)


def test_unknown_token_is_refused(gateway: Gateway) -> None:
    with CliServer(lambda _request: Plain(200, {})) as server:
        at = opened(gateway, server)
        at.session.close()
        got = httpx.post(f"{at.url}/chat/completions", json={})
    assert got.status_code == 401
    assert server.requests == []


def test_server_errors_are_transient_until_the_limit(gateway: Gateway) -> None:
    with CliServer(lambda _request: Plain(500, {"error": {"message": "boom"}})) as server:
        at = opened(gateway, server)
        statuses = [httpx.post(f"{at.url}/chat/completions", json={}).status_code for _ in range(TRANSIENT_LIMIT)]
        assert statuses == [500] * TRANSIENT_LIMIT
        assert at.cancel.is_set()  # the attempt is ended instead of waiting for its timeout
        refused = httpx.post(f"{at.url}/chat/completions", json={})
    assert refused.status_code == 503
    assert len(server.requests) == TRANSIENT_LIMIT  # the refusal never reached the provider
    failure = at.session.report().failure
    assert failure is not None and failure.category == ErrorCategory.PROVIDER_SERVER and not failure.fatal


def test_a_success_after_a_server_error_clears_it(gateway: Gateway) -> None:
    answers = iter([Plain(503, {}), chat_plain("m", chat_usage(1, 1), text="ok")])
    with CliServer(lambda _request: next(answers)) as server:
        at = opened(gateway, server)
        for _ in range(2):
            httpx.post(f"{at.url}/chat/completions", json={})
    report = at.session.report()
    assert report.failure is None and report.statuses == {"503": 1, "200": 1}
    assert not at.cancel.is_set()


def test_rate_limit_and_unreachable(gateway: Gateway) -> None:
    with CliServer(lambda _request: Plain(429, {})) as server:
        at = opened(gateway, server)
        httpx.post(f"{at.url}/responses", json={})
    failure = at.session.report().failure
    assert failure is not None and failure.category == ErrorCategory.PROVIDER_RATE_LIMIT
    cancel = threading.Event()
    session = gateway.open(cancel)
    url = session.route(Route("openai", "http://127.0.0.1:9/v1", KEY, "openai"))  # nothing listens on port 9
    assert httpx.post(f"{url}/responses", json={}).status_code == 502
    failure = session.report().failure
    assert failure is not None and failure.category == ErrorCategory.PROVIDER_UNREACHABLE
    assert "could not be reached (ConnectError)" in failure.message


@pytest.mark.parametrize(
    ("status", "path", "category"),
    [
        (401, "v1/messages", ErrorCategory.PROVIDER_AUTH),
        (403, "v1/models", ErrorCategory.PROVIDER_AUTH),
        (404, "v1/messages", ErrorCategory.MODEL_NOT_FOUND),
        (404, "v1/messages/count_tokens", None),  # a side endpoint the provider lacks: the agent's business
        (400, "v1/messages", None),
    ],
)
def test_fatal_statuses(gateway: Gateway, status: int, path: str, category: ErrorCategory | None) -> None:
    with CliServer(lambda _request: anthropic_error(status, "x", "no")) as server:
        at = opened(gateway, server, "anthropic")
        httpx.post(f"{at.url}/{path}", json={"model": "claude-nope"})
        again = httpx.post(f"{at.url}/{path}", json={"model": "claude-nope"})
    failure = at.session.report().failure
    if category is None:
        assert failure is None and not at.cancel.is_set()
        return
    assert failure is not None and failure.category == category and failure.fatal
    assert at.cancel.is_set()
    assert again.status_code == status and len(server.requests) == 1  # answered by the gateway from then on
    named = "TEST_KEY" if category == ErrorCategory.PROVIDER_AUTH else "claude-nope"
    assert named in failure.message


def test_cost_cap_refuses_further_requests(gateway: Gateway) -> None:
    answer = chat_plain("gpt-priced", chat_usage(1000, 100), text="ok")

    def price(provider: str, answered: str | None, requested: str | None, tokens: Tokens) -> float | None:
        assert (provider, answered, requested) == ("openai", "gpt-priced", "gpt-asked")
        return (tokens.input or 0) * 1e-5

    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, price=price, cost_cap=0.025)
        codes = [httpx.post(f"{at.url}/chat/completions", json={"model": "gpt-asked"}).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]  # 0.01 each: the third passes 0.025, the fourth is refused
    report = at.session.report()
    assert report.over_cap and at.cancel.is_set()
    assert report.usage.cost_usd == pytest.approx(0.03)
    assert len(server.requests) == 3


def test_unpriced_model_leaves_cost_unknown(gateway: Gateway) -> None:
    with CliServer(lambda _request: chat_plain("m", chat_usage(1, 1), text="ok")) as server:
        at = opened(gateway, server, price=lambda *_args: None)
        httpx.post(f"{at.url}/chat/completions", json={})
    report = at.session.report()
    assert report.usage.cost_usd is None and report.usage.tokens.input == 1


def test_anthropic_overloaded_event_in_a_stream(gateway: Gateway) -> None:
    answer = Sse([("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, "anthropic")
        httpx.post(f"{at.url}/v1/messages", json={"stream": True})
    failure = at.session.report().failure
    assert failure is not None and failure.category == ErrorCategory.PROVIDER_SERVER
    assert "overloaded_error" in failure.message


def test_the_forwarder_relays_to_the_socket_and_exits_with_its_program(gateway: Gateway, tmp_path: Path) -> None:
    """What a sandbox with a network of its own runs the agent under (here on the host's network, on another port):
    a connection to its port reaches the gateway's socket, and its exit status is the program's."""
    answer = chat_plain("m", chat_usage(2, 1), text="ok")
    with CliServer(lambda _request: answer) as server:
        cancel = threading.Event()
        session = gateway.open(cancel, own_network=True)
        url = session.route(Route("openai", f"{server.url}/v1", KEY, "openai"))
        prefix = session.wrap(["PROGRAM"])[:-1]
        assert prefix[0] == sys.executable and prefix[-1] == "--" and session.socket_dir is not None
        with socket.socket() as probe:  # a free port of the host's, for the forwarder to listen on instead
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        forwarded = url.replace(f":{gateway.port}/", f":{port}/")
        client = tmp_path / "client.py"
        client.write_text(
            "import sys, time, urllib.request\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b'{}'), timeout=30).read()\n"
            "        break\n"
            "    except OSError:\n"
            "        time.sleep(0.05)  # until the forwarder listens\n"
            "sys.exit(3)\n"
        )
        argv = [*prefix[:4], str(port), *prefix[5:], sys.executable, str(client), f"{forwarded}/chat/completions"]
        done = subprocess.run(argv, timeout=60)
    assert done.returncode == 3
    assert session.report().usage.tokens == Tokens(input=2, output=1, cached_input=0, reasoning=0)


@pytest.mark.parametrize("wire", ["responses", "messages", "chat"])
def test_a_stream_that_stops_before_its_last_event_is_cut(gateway: Gateway, wire: str) -> None:
    """The provider answered 200 and closed the connection early (no error on the wire): what it served so far is
    counted, and the attempt's last call ended on a cut stream, not on an unreachable provider."""
    if wire == "responses":
        name, path = "openai", "responses"
        answer = responses_stream("gpt-r", [responses_message("ok")], responses_usage(5, 0, 2, 0))
    elif wire == "messages":
        name, path = "anthropic", "v1/messages"
        answer = anthropic_stream(
            "claude-x", [{"type": "text", "text": "hi"}], {"input_tokens": 9, "output_tokens": 2}, "end_turn"
        )
    else:
        name, path = "openai", "chat/completions"
        answer = chat_stream("gpt-c", chat_usage(3, 1), text="done")
    answer.cut_after = 2
    with CliServer(lambda _request: answer) as server:
        at = opened(gateway, server, name)
        got = httpx.post(f"{at.url}/{path}", json={"stream": True})
    assert got.status_code == 200  # relayed as it came: the agent sees the stream end, as it would
    report = at.session.report()
    assert report.failure is not None and report.failure.category == ErrorCategory.PROVIDER_STREAM_CUT
    assert "answered 200" in report.failure.message and not report.failure.fatal
    assert report.requests == 1 and report.statuses == {"200": 1}
    if wire == "messages":  # message_start had come: the input the provider billed is counted
        assert report.usage.tokens.input == 9


def test_a_whole_stream_is_no_cut(gateway: Gateway) -> None:
    with CliServer(lambda _request: chat_stream("gpt-c", chat_usage(3, 1), text="done")) as server:
        at = opened(gateway, server)
        httpx.post(f"{at.url}/chat/completions", json={"stream": True})
    assert at.session.report().failure is None


def test_only_model_calls_are_requests(gateway: Gateway) -> None:
    """A model list, a HEAD probe and a WebSocket attempt (a GET of the model path) are counted apart, and a
    failing one is not a provider failure; a model call's startup time is measured from the session's opening."""
    answers = {"GET": Plain(404, {}), "HEAD": Plain(200, {})}
    with CliServer(lambda request: answers.get(request.method) or chat_plain("m", chat_usage(1, 1), "ok")) as server:
        at = opened(gateway, server)
        httpx.get(f"{at.url}/models")
        httpx.head(f"{at.url}")
        httpx.get(f"{at.url}/responses", headers={"upgrade": "websocket"})
        assert at.session.report().startup_secs is None  # no model call yet
        httpx.post(f"{at.url}/chat/completions", json={})
    report = at.session.report()
    assert (report.requests, report.other_requests, report.statuses) == (1, 3, {"200": 1})
    assert report.failure is None and report.startup_secs is not None and report.startup_secs >= 0
    assert report.where == f"{server.url}/v1"


@pytest.fixture
def silent_provider() -> Iterator[str]:
    """A provider that takes connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_call_waiting_on_a_silent_provider_is_reported_and_ended_quietly(
    silent_provider: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The report says how long the call in flight has waited (the attempt's attribution reads it); closing the
    session ends the call (the agent gets an answer of the gateway's), and the gateway stops without a traceback."""
    gateway = Gateway()
    cancel = threading.Event()
    session = gateway.open(cancel)
    url = session.route(Route("openai", silent_provider, KEY, "openai"))
    answers: list[int] = []
    client = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{url}/chat/completions", json={}, timeout=60).status_code)
    )
    client.start()
    deadline = time.monotonic() + 30
    while not session.report().waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    report = session.report()
    assert len(report.waiting) == 1 and report.requests == 0  # in flight: not answered yet
    session.close()
    client.join(timeout=30)
    assert answers == [504]
    second = gateway.open(cancel)  # a call still waiting when the whole gateway stops
    url = second.route(Route("openai", silent_provider, KEY, "openai"))
    late = threading.Thread(target=lambda: httpx.post(f"{url}/chat/completions", json={}, timeout=60), daemon=True)
    late.start()
    while not second.report().waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    gateway.close()
    late.join(timeout=30)
    assert "Traceback" not in capfd.readouterr().err
