"""The model gateway's trajectory recorder, for every wire format it speaks, streamed and not: a scripted
conversation through a real gateway to a loopback server becomes the ATIF steps of that conversation (system
prompt, task, tool call with its result, final answer), a side call its own embedded conversation, a failed call
an error step; a 10 MB tool result is cut with a mark. The real CLIs through it: test_real_trajectories.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import pytest

from tests.atif_check import assert_atif
from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
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
from worktrial.gateway import Gateway, Route
from worktrial.gateway.recorder import Recorder
from worktrial.model.trajectory import CUT_MARK, MAX_TEXT_BYTES, AgentInfo, seal

SYSTEM, TASK, TITLE_SYSTEM = "You are a coding agent.", "Fix the bug in calc.py", "Write a short title."
ARGS = {"command": "ls -la"}
LISTING, DONE, TITLE = "README.md\ncalc.py", "Fixed: calc.py adds now.", "Calc fix"
M = "model-x"
Turn = tuple[str, ...]


# ---- each wire's requests and answers, built from one neutral conversation -----------------------------------------


def chat_body(system: str, turns: list[Turn], stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in turns:
        if turn[0] == "user":
            messages.append({"role": "user", "content": turn[1]})
        elif turn[0] == "call":
            function = {"name": turn[2], "arguments": json.dumps(ARGS, indent=1)}  # re-serialised differently
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": turn[1], "type": "function", "function": function}],
                }
            )
        else:
            messages.append({"role": "tool", "tool_call_id": turn[1], "content": turn[2]})
    return {"model": M, "messages": messages, "stream": stream}


def responses_body(system: str, turns: list[Turn], stream: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for turn in turns:
        if turn[0] == "user":
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": turn[1]}]})
        elif turn[0] == "call":
            items.append({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"})
            items.append({"type": "function_call", "call_id": turn[1], "name": turn[2], "arguments": json.dumps(ARGS)})
        else:
            items.append({"type": "function_call_output", "call_id": turn[1], "output": turn[2]})
    return {"model": M, "instructions": system, "input": items, "stream": stream, "store": False}


def messages_body(system: str, turns: list[Turn], stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn[0] == "user":
            messages.append({"role": "user", "content": [{"type": "text", "text": turn[1]}]})
        elif turn[0] == "call":
            block = {"type": "tool_use", "id": turn[1], "name": turn[2], "input": ARGS}
            messages.append({"role": "assistant", "content": [block]})
        else:
            block = {
                "type": "tool_result",
                "tool_use_id": turn[1],
                "content": turn[2],
                "cache_control": {"type": "ephemeral"},
            }
            messages.append({"role": "user", "content": [block]})
    system_blocks = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    return {"model": M, "system": system_blocks, "messages": messages, "stream": stream, "max_tokens": 100}


def gemini_body(system: str, turns: list[Turn], stream: bool) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for turn in turns:
        if turn[0] == "user":
            contents.append({"role": "user", "parts": [{"text": turn[1]}]})
        elif turn[0] == "call":  # Gemini's calls carry no id: the result names the function
            contents.append({"role": "model", "parts": [{"functionCall": {"name": turn[2], "args": ARGS}}]})
        else:
            response = {"functionResponse": {"name": "bash", "response": {"output": turn[2]}}}
            contents.append({"role": "user", "parts": [response]})
    return {"contents": contents, "systemInstruction": {"parts": [{"text": system}]}}


def chat_answer(text: str | None, call_id: str | None, stream: bool) -> Sse | Plain:
    usage = chat_usage(300, 20, cached=100)
    if call_id is None:
        return chat_stream(M, usage, text=text) if stream else chat_plain(M, usage, text=text)
    function = {"name": "bash", "arguments": json.dumps(ARGS)}
    if not stream:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }
        body = {"id": "c1", "object": "chat.completion", "model": M, "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}  # fmt: skip
        return Plain(200, body)
    half = len(function["arguments"]) // 2

    def chunk(delta: dict[str, Any], extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return "", {"id": "c1", "object": "chat.completion.chunk", "model": M,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} | (extra or {})  # fmt: skip

    first = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "bash", "arguments": function["arguments"][:half]},
    }
    rest = {"index": 0, "function": {"arguments": function["arguments"][half:]}}
    events = [chunk({"role": "assistant"}), chunk({"tool_calls": [first]}), chunk({"tool_calls": [rest]}),
              chunk({}, {"choices": [], "usage": usage})]  # fmt: skip
    return Sse(events, done_marker=True)


def responses_answer(text: str | None, call_id: str | None, stream: bool) -> Sse | Plain:
    usage = responses_usage(500, 40, 120, 25)
    item = (
        responses_message(text or "")
        if call_id is None
        else {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": "bash", "arguments": json.dumps(ARGS)}
    )
    if stream:
        return responses_stream(M, [item], usage)
    return Plain(
        200, {"id": "resp_1", "object": "response", "model": M, "status": "completed", "output": [item], "usage": usage}
    )


def messages_answer(text: str | None, call_id: str | None, stream: bool) -> Sse | Plain:
    usage = {"input_tokens": 100, "output_tokens": 9, "cache_read_input_tokens": 30}
    if call_id is None:
        return (
            anthropic_stream(M, [{"type": "text", "text": text}], usage, "end_turn")
            if stream
            else anthropic_plain(M, text or "", usage)
        )
    block = {"type": "tool_use", "id": call_id, "name": "bash", "input": ARGS}
    if stream:
        return anthropic_stream(M, [{"type": "text", "text": "Let me look."}, block], usage, "tool_use")
    content = [{"type": "text", "text": "Let me look."}, block]
    return Plain(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": M, "content": content,
                       "stop_reason": "tool_use", "usage": usage})  # fmt: skip


def gemini_answer(text: str | None, call_id: str | None, stream: bool) -> Sse | Plain:
    usage = gemini_usage(200, 10, cached=50, thoughts=6)
    if call_id is None and stream and text:  # the text arrives in two chunks
        first, second = gemini_stream(M, [{"text": text[:4]}], usage), gemini_stream(M, [{"text": text[4:]}], usage)
        return Sse(first.events + second.events)
    parts: list[dict[str, Any]] = (
        [{"text": text}]
        if call_id is None
        else [{"text": "thinking", "thought": True}, {"functionCall": {"name": "bash", "args": ARGS}}]
    )
    answer = gemini_stream(M, parts, usage)
    return answer if stream else Plain(200, answer.events[0][1])


@dataclass(frozen=True)
class Wire:
    route: str
    path: Callable[[bool], str]
    body: Callable[[str, list[Turn], bool], dict[str, Any]]
    answer: Callable[[str | None, str | None, bool], Sse | Plain]
    call_id: str | None


WIRES = {
    "chat": Wire("openai", lambda s: "chat/completions", chat_body, chat_answer, "call_a"),
    "responses": Wire("openai", lambda s: "responses", responses_body, responses_answer, "call_a"),
    "messages": Wire("anthropic", lambda s: "v1/messages", messages_body, messages_answer, "toolu_a"),
    "gemini": Wire(
        "gemini",
        lambda s: f"v1beta/models/{M}:" + ("streamGenerateContent?alt=sse" if s else "generateContent"),
        gemini_body,
        gemini_answer,
        None,
    ),
}


def scripted(wire: Wire, stream: bool) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        text = json.dumps(request.body)
        if TITLE_SYSTEM in text:
            return wire.answer(TITLE, None, stream)
        if "continue" in text:
            return Plain(503, {"error": {"message": "overloaded, try later", "type": "overloaded"}})
        if LISTING[:9] in text:
            return wire.answer(DONE, None, stream)
        return wire.answer(None, wire.call_id or "", stream)

    return respond


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway() as gw:
        yield gw


def converse(gateway: Gateway, wire: Wire, stream: bool, listing: str = LISTING) -> Recorder:
    """The scripted conversation through the gateway: task, tool call, its result, answer; a side call; a
    'continue' the provider fails."""
    with CliServer(scripted(wire, stream)) as server:
        session = gateway.open(threading.Event())
        recorder = session.recorder = Recorder()
        base = server.url + ("/v1" if wire.route == "openai" else "")
        url = session.route(Route(wire.route, base, "sk-real-key-0123456789", wire.route))
        call_id = wire.call_id or ""
        conversations: list[tuple[str, list[Turn]]] = [
            (SYSTEM, [("user", TASK)]),
            (TITLE_SYSTEM, [("user", TASK)]),
            (SYSTEM, [("user", TASK), ("call", call_id, "bash"), ("result", call_id, listing)]),
            (SYSTEM, [("user", TASK), ("call", call_id, "bash"), ("result", call_id, listing), ("user", "continue")]),
        ]
        with httpx.Client(timeout=30) as client:
            for system, turns in conversations:
                answer = client.post(f"{url}/{wire.path(stream)}", json=wire.body(system, turns, stream))
                answer.read()
        session.close()
    return recorder


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("name", list(WIRES))
def test_a_conversation_through_the_gateway_becomes_its_steps(gateway: Gateway, name: str, stream: bool) -> None:
    wire = WIRES[name]
    trajectory = converse(gateway, wire, stream).trajectory(AgentInfo(name="cli", version="1"))
    assert trajectory is not None
    document = json.loads(trajectory.to_json())
    assert_atif(document)
    steps = document["steps"]
    assert [(s["source"], s["message"]) for s in steps[:2]] == [("system", SYSTEM), ("user", TASK)]
    call_step, done_step, again, failed = steps[2:]
    (call,) = call_step["tool_calls"]
    assert (call["function_name"], call["arguments"]) == ("bash", ARGS)
    (result,) = call_step["observation"]["results"]
    assert (result["source_call_id"], result["content"]) == (call["tool_call_id"], LISTING)
    assert call_step["model_name"] == (M if name != "gemini" else f"{M}") and call_step["metrics"]["prompt_tokens"] > 0
    assert call_step["extra"]["api"] == name and call_step["extra"]["status"] == 200
    assert (done_step["source"], done_step["message"]) == ("agent", DONE) and "tool_calls" not in done_step
    assert (again["source"], again["message"]) == ("user", "continue")
    assert failed["source"] == "system" and failed["extra"]["error"] is True and failed["extra"]["status"] == 503
    assert "overloaded" in failed["message"]
    if name == "messages":
        assert call_step["message"] == "Let me look."
    if name == "gemini":
        assert call_step["reasoning_content"] == "thinking"
    (side,) = document["subagent_trajectories"]
    assert [(s["source"], s["message"]) for s in side["steps"]] == [
        ("system", TITLE_SYSTEM),
        ("user", TASK),
        ("agent", TITLE),
    ]


def test_a_ten_megabyte_tool_result_is_cut_with_a_mark(gateway: Gateway) -> None:
    huge = "A" * (5 * 1024 * 1024) + "MIDDLE" + "Z" * (5 * 1024 * 1024)
    trajectory = converse(gateway, WIRES["chat"], True, listing=huge).trajectory(AgentInfo(name="cli", version="1"))
    assert trajectory is not None
    sealed = seal(trajectory, lambda text: (text, 0))
    document = json.loads(sealed.text)
    assert_atif(document)
    (result,) = document["steps"][2]["observation"]["results"]
    content = result["content"]
    assert len(content.encode()) <= MAX_TEXT_BYTES and content.startswith("AAAA") and content.endswith("ZZZZ")
    assert "MIDDLE" not in content and content.count("bytes cut by worktrial") == 1
    said = int(content.split("[... ")[1].split(" bytes")[0])
    kept = len(content) - len(CUT_MARK.format(n=said))
    assert said + kept == len(huge)  # the mark counts every byte both cuts took, the recorder's and the seal's
    assert sealed.cut_texts >= 1 and len(sealed.text) < 200_000
