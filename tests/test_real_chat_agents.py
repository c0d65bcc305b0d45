"""OpenCode and Qwen Code (pinned in tests/real_agents/versions.toml) against a loopback Chat Completions server.

Both speak OpenAI's streamed ``chat/completions`` with tool calls. The scripted model runs one shell command and
finishes; the envelope must show the outcome, the claim, the tokens the server served for the agent's own calls,
the model the server was asked for, and no process left. OpenCode is configured only by the user's own
``~/.config/opencode/opencode.json`` (copied into each attempt) and started with a stale ``$PWD`` pointing at the
user's checkout, which it must not touch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    chat_has_tool_result,
    chat_stream,
    chat_usage,
    has_tool_result,
    responses_function_call,
    responses_message,
    responses_stream,
    responses_usage,
)
from tests.conftest import git
from tests.real_agents.install import Tool
from tests.real_agents.support import (
    SOLVE,
    TASK,
    Served,
    assert_nothing_left,
    evaluate,
    home,
    installed,
    marker,
    on_path,
    only_attempt,
)
from worktrial.model.records import Tokens

pytestmark = [pytest.mark.agents, pytest.mark.slow]


def chat_model(
    served: Served, shell_tool: str, side: Served | None = None, fail: Plain | None = None
) -> Callable[[Request], Sse | Plain]:
    """The shell tool once, then a final message; calls without tools (titles) are tallied in ``side``."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        if fail is not None:
            return fail
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            if side is not None:
                side.add(model, Tokens(input=40, cached_input=0, output=6, reasoning=0))
            return chat_stream(model, chat_usage(40, 6), text="A title")
        if not chat_has_tool_result(body.get("messages", [])):
            served.add(model, Tokens(input=1000, cached_input=300, output=50, reasoning=10))
            call = (shell_tool, {"command": SOLVE, "description": "solve"})
            return chat_stream(model, chat_usage(1000, 50, cached=300, reasoning=10), call=call)
        served.add(model, Tokens(input=1300, cached_input=1000, output=9, reasoning=2))
        return chat_stream(model, chat_usage(1300, 9, cached=1000, reasoning=2), text="Created notes/hello.txt.")

    return respond


# ---- OpenCode ------------------------------------------------------------------------------------------------------


def test_opencode_uses_the_users_provider_and_never_the_users_checkout(
    home: Path, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = installed("opencode")
    on_path(monkeypatch, tool)
    monkeypatch.setenv("PWD", str(repo))  # the stale $PWD OpenCode used to take as its project directory
    served, side = Served(), Served()
    with CliServer(chat_model(served, "bash", side=side)) as server:
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted",
                    "options": {"baseURL": f"{server.url}/v1", "apiKey": "sk-opencode"},
                    "models": {"coder-1": {"name": "coder-1"}},
                }
            },
            "model": "scripted/coder-1",
        }
        (home / ".config" / "opencode").mkdir(parents=True)
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
        result, envelope = evaluate(cli, repo, write_suite([TASK]), "--agent", "opencode", network=None)
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert set(served.models) == {"coder-1"}
    # Routed through the model gateway (the provider and its key are in the user's opencode.json): every call the
    # server served is counted, OpenCode's title call too.
    assert attempt["tokens"] == served.tokens.add(side.tokens).model_dump()
    assert attempt["turns"] == served.calls == 2
    # OpenCode reports cost 0 for a model it cannot price: unknown, never free.
    assert attempt["cost_usd"] is None and envelope["report"]["unpriced_runs"] == 1
    assert git(repo, "status", "--porcelain") == ""  # the user's checkout is untouched
    assert_nothing_left()


# ---- Qwen Code -----------------------------------------------------------------------------------------------------


@pytest.fixture
def qwen(home: Path, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("qwen-code")
    on_path(monkeypatch, tool)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-qwen")
    return tool


def test_qwen_code_solves_a_task_with_exact_usage(
    qwen: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    served = Served()
    with CliServer(chat_model(served, "run_shell_command")) as server:
        result, envelope = evaluate(
            cli,
            repo,
            write_suite([TASK]),
            "--agent",
            "qwen-code",
            "--model",
            "openai/coder-1",
            "--base-url",
            f"{server.url}/v1",
        )
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert attempt["claimed"] is True and attempt["verified"] is True
    print("DEBUG", attempt.get("reason"), keys, served.calls, [r.path for r in server.requests])
    assert keys == {"Bearer sk-qwen"}
    assert set(served.models) == {"coder-1"}
    # Qwen Code reports no reasoning figures itself; through the model gateway every figure is exact.
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 2
    assert attempt["cost_usd"] is None  # no price for this model: unknown, never 0
    assert not (home / ".qwen" / "projects").exists()  # per-worktree state went to the attempt's scratch dir
    assert_nothing_left()


def test_qwen_code_rejected_key_stops_the_run(qwen: Tool, cli: Callable[..., Result], repo: Path, write_suite) -> None:
    fail = Plain(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    with CliServer(chat_model(Served(), "run_shell_command", fail=fail)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        args = ["--agent", "qwen-code", "--model", "coder-1", "--base-url", f"{server.url}/v1", "--jobs", "1"]
        result, _ = evaluate(cli, repo, suite, *args)
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "HTTP 401" in result.output
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest


def responses_model(served: Served, side: Served) -> Callable[[Request], Sse | Plain]:
    """OpenCode's OpenAI provider speaks the Responses API: bash once, then a final message; calls without tools
    (titles, with a small model of OpenCode's choice) are tallied in ``side``."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/responses"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            side.add(model, Tokens(input=40, cached_input=0, output=6, reasoning=0, cache_creation=0))
            return responses_stream(model, [responses_message("A title")], responses_usage(40, 0, 6, 0))
        if not has_tool_result(body.get("input", [])):
            served.add(model, Tokens(input=900, cached_input=300, output=60, reasoning=20, cache_creation=0))
            call = responses_function_call("bash", {"command": SOLVE, "description": "solve"})
            return responses_stream(model, [call], responses_usage(900, 300, 60, 20))
        served.add(model, Tokens(input=1100, cached_input=800, output=15, reasoning=5, cache_creation=0))
        done = responses_message("Created notes/hello.txt.")
        return responses_stream(model, [done], responses_usage(1100, 800, 15, 5))

    return respond


def test_opencode_through_the_gateway_with_the_users_openai_key(
    home: Path, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--model openai/...`` with ``OPENAI_API_KEY``: OpenCode's OpenAI provider is pointed at the run's gateway
    (an inline config), holds only the attempt's token, and the usage is the gateway's reading of the answers."""
    tool = installed("opencode")
    on_path(monkeypatch, tool)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-opencode-real-key")
    served, side = Served(), Served()
    with CliServer(responses_model(served, side)) as server:
        args = ["--agent", "opencode", "--model", "openai/gpt-4o-mini", "--base-url", f"{server.url}/v1"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("authorization") for r in server.posts("/responses")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt["reason"]
    assert keys == {"Bearer sk-opencode-real-key"}
    assert set(served.models) == {"gpt-4o-mini"}
    assert attempt["tokens"] == served.tokens.add(side.tokens).model_dump()  # the title calls are counted too
