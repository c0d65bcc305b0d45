"""GitHub Copilot CLI, Continue CLI, Kilo Code CLI, gptme and Factory Droid (pinned in
tests/real_agents/versions.toml) against a loopback Chat Completions server.

Each CLI is pointed at the server with ``--base-url`` and an OpenAI-style key, as a user pointing it at an
OpenAI-compatible endpoint would: the scripted model calls the CLI's shell tool once with a command that solves the
task, then finishes (gptme's by calling its ``complete`` tool). The envelope must show a verified pass with the
claim, the tokens the server served for the agent's conversation, the key the server was sent, and no process left.
A server that refuses the key must stop the run with one line naming the CLI and the HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    anthropic_plain,
    anthropic_stream,
    chat_has_tool_result,
    chat_stream,
    chat_usage,
    has_tool_result,
)
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

KEY = "sk-scripted-0123"
FIRST = Tokens(input=1000, cached_input=300, output=50, reasoning=10)
SECOND = Tokens(input=1300, cached_input=1000, output=9, reasoning=2)


@dataclass(frozen=True)
class Cli:
    preset: str
    shell_tool: str
    """The name of the CLI's shell tool, as it offers it to the model."""
    finish_tool: str | None = None
    """A tool the CLI asks the model to call when done (gptme's ``complete``); None: a plain final message."""
    expected_tokens: Callable[[Tokens], Tokens] = lambda served: served
    """What the envelope must show, given what the server served (the figures a CLI does not report are None)."""


CLIS = {
    "copilot": Cli("copilot", "bash", expected_tokens=lambda t: t.model_copy(update={"cache_creation": 0})),
    "continue": Cli("continue", "Bash"),
    # Kilo (OpenCode's events): cache writes reported as 0.
    "kilo": Cli("kilo", "bash", expected_tokens=lambda t: t.model_copy(update={"cache_creation": 0})),
    "gptme": Cli("gptme", "shell", finish_tool="complete"),
    # Droid: cache writes reported as 0, reasoning not apart from output.
    "droid": Cli(
        "droid", "Execute", expected_tokens=lambda t: t.model_copy(update={"cache_creation": 0, "reasoning": None})
    ),
}


def chat_model(served: Served, cli: Cli, fail: Plain | None = None) -> Callable[[Request], Sse | Plain]:
    """The shell tool once, then the finish; calls without tools (titles, summaries) get a short, uncounted text."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        if fail is not None:
            return fail
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            return chat_stream(model, chat_usage(40, 6), text="A title")
        if not chat_has_tool_result(body.get("messages", [])):
            served.add(model, FIRST)
            call = (cli.shell_tool, {"command": SOLVE, "description": "solve"})
            return chat_stream(model, chat_usage(1000, 50, cached=300, reasoning=10), call=call)
        served.add(model, SECOND)
        usage = chat_usage(1300, 9, cached=1000, reasoning=2)
        if cli.finish_tool is not None:
            return chat_stream(model, usage, call=(cli.finish_tool, {}))
        return chat_stream(model, usage, text="Created notes/hello.txt.")

    return respond


@pytest.fixture(params=sorted(CLIS))
def agent(request: pytest.FixtureRequest, home: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    cli = CLIS[request.param]
    on_path(monkeypatch, installed(cli.preset))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return cli


def test_solves_a_task_through_its_base_url(
    agent: Cli, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    served = Served()
    with CliServer(chat_model(served, agent)) as server:
        args = ["--agent", agent.preset, "--model", "openai/coder-1", "--base-url", f"{server.url}/v1"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert keys == {f"Bearer {KEY}"}
    assert served.calls == 2 and set(served.models) == {"coder-1"}
    assert attempt["tokens"] == agent.expected_tokens(served.tokens).model_dump()
    assert attempt["turns"] == 2
    assert attempt["cost_usd"] is None  # no CLI prices an unknown model: unknown, never 0
    trace = json.loads((repo / attempt["trace"]).read_text())
    assert trace["tool_counts"].get(agent.shell_tool) == 1
    # Nothing of the CLI's state went to the user's home: every config directory is the attempt's own.
    assert sorted(p.name for p in home.iterdir()) in ([], [".cache"])  # download caches stay shared, as for OpenCode
    assert_nothing_left()


def test_a_refused_key_stops_the_run(agent: Cli, cli: Callable[..., Result], repo: Path, write_suite) -> None:
    fail = Plain(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    with CliServer(chat_model(Served(), agent, fail=fail)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        args = ["--agent", agent.preset, "--model", "openai/coder-1", "--base-url", f"{server.url}/v1", "--jobs", "1"]
        result, _ = evaluate(cli, repo, suite, *args)
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "HTTP 401" in result.output
    assert f"{agent.preset}: HTTP 401" in result.output and "stopping the run" in result.output
    assert_nothing_left()


def messages_model(served: Served, shell_tool: str) -> Callable[[Request], Sse | Plain]:
    """Anthropic Messages: the shell tool once, then a final message; usage with cache reads and writes."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/messages"):
            return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            usage = {"input_tokens": 40, "output_tokens": 6}
            if body.get("stream"):
                return anthropic_stream(model, [{"type": "text", "text": "A title"}], usage, "end_turn")
            return anthropic_plain(model, "A title", usage)
        if not has_tool_result(body.get("messages", [])):
            served.add(model, Tokens(input=1100, cached_input=300, cache_creation=100, output=50))
            call = {"type": "tool_use", "id": "toolu_solve", "name": shell_tool, "input": {"command": SOLVE}}
            usage = {"input_tokens": 700, "output_tokens": 50, "cache_read_input_tokens": 300}
            return anthropic_stream(model, [call], usage | {"cache_creation_input_tokens": 100}, "tool_use")
        served.add(model, Tokens(input=1300, cached_input=1000, cache_creation=0, output=9))
        usage = {
            "input_tokens": 300,
            "output_tokens": 9,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 0,
        }
        return anthropic_stream(model, [{"type": "text", "text": "Created notes/hello.txt."}], usage, "end_turn")

    return respond


@pytest.mark.parametrize("preset", ["copilot", "continue", "droid"])
def test_an_anthropic_route_speaks_messages_at_the_api_root(
    preset: str, home: Path, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--model anthropic/NAME --base-url ROOT``: the CLI calls ROOT/v1/messages with the Anthropic key, and its
    tokens (Anthropic counts cache reads and writes apart from input) are added up like every other preset's."""
    agent = CLIS[preset]
    on_path(monkeypatch, installed(preset))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted")
    served = Served()
    with CliServer(messages_model(served, agent.shell_tool)) as server:
        args = ["--agent", preset, "--model", "anthropic/claude-sonnet-4-5", "--base-url", server.url]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("x-api-key") for r in server.posts("/v1/messages")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert keys == {"sk-ant-scripted"}
    assert served.calls == 2 and set(served.models) == {"claude-sonnet-4-5"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert_nothing_left()


def test_droid_unknown_model_stops_the_run(
    home: Path, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Droid names an unknown model on stderr before it prints any event: one line, and no second attempt."""
    on_path(monkeypatch, installed("droid"))
    suite = write_suite([TASK, dict(TASK, id="second")])
    result, _ = evaluate(cli, repo, suite, "--agent", "droid", "--model", "no-such-model", "--jobs", "1")
    assert result.exit_code == 2, result.output
    assert "droid: provider error: the provider does not know this model" in result.output
    assert "Invalid model: no-such-model" in result.output and "stopping the run" in result.output
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest
