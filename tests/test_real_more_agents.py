"""GitHub Copilot CLI, Continue CLI, Kilo Code CLI, gptme and Factory Droid (pinned in
tests/real_agents/versions.toml) against a loopback Chat Completions server.

Each CLI is pointed at the server with ``--base-url`` and an OpenAI-style key, as a user pointing it at an
OpenAI-compatible endpoint would: the scripted model calls the CLI's shell tool once with a command that solves the
task, then finishes (gptme's by calling its ``complete`` tool). Every CLI is routed through the run's model gateway:
it holds the attempt's token and the gateway's URL, the server gets the real key from the gateway. The envelope must
show a verified pass with the claim, the tokens the server served (every call, side calls such as titles too, as
the gateway read them), their cost by the price table, and no process left; the real key must appear nowhere in the
CLI's environment. A server that refuses the key must stop the run with one line naming the HTTP status.
"""

from __future__ import annotations

import json
import os
import shlex
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
from worktrial.agents.pricing import cost_usd, resolve_price
from worktrial.gateway.session import TOKEN_PREFIX
from worktrial.model.records import Tokens

pytestmark = [pytest.mark.agents, pytest.mark.slow]

KEY = "sk-scripted-0123-real-key"
MODEL = "openai/gpt-4.1-mini"
"""A priced model, so the envelope's cost can be checked against the price table."""
FIRST = Tokens(input=1000, cached_input=300, output=50, reasoning=10)
SECOND = Tokens(input=1300, cached_input=1000, output=9, reasoning=2)


@dataclass(frozen=True)
class Cli:
    preset: str
    shell_tool: str
    """The name of the CLI's shell tool, as it offers it to the model."""
    finish_tool: str | None = None
    """A tool the CLI asks the model to call when done (gptme's ``complete``); None: a plain final message."""
    own_tokens: Callable[[Tokens], Tokens] = lambda served: served
    """What the CLI itself reports, given what the server served for its conversation (the figures it does not
    report are None): the cross-check the gateway's counts are compared with."""


CLIS = {
    "copilot": Cli("copilot", "bash", own_tokens=lambda t: t.model_copy(update={"cache_creation": 0})),
    "continue": Cli("continue", "Bash"),
    # Kilo (OpenCode's events): cache writes reported as 0.
    "kilo": Cli("kilo", "bash", own_tokens=lambda t: t.model_copy(update={"cache_creation": 0})),
    "gptme": Cli("gptme", "shell", finish_tool="complete"),
    # Droid: cache writes reported as 0, reasoning not apart from output.
    "droid": Cli(
        "droid", "Execute", own_tokens=lambda t: t.model_copy(update={"cache_creation": 0, "reasoning": None})
    ),
}


def chat_model(
    served: Served, cli: Cli, fail: Plain | None = None, side: Served | None = None
) -> Callable[[Request], Sse | Plain]:
    """The shell tool once, then the finish; calls without tools (titles, summaries) get a short text, tallied in
    ``side`` (the gateway counts them; the CLIs' own reports do not)."""

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


def environment_recorder(tmp_path: Path, tool: Tool, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a wrapper of the CLI first on PATH that appends the environment each attempt started it with to a file
    (in a directory the sandbox lets attempts write), then runs the CLI: where the key could have leaked to the
    agent, if anywhere. worktrial's own ``--version`` probe, outside any attempt, is not recorded."""
    wrappers, recorded = tmp_path / "wrappers", tmp_path / "recorded"
    wrappers.mkdir()
    recorded.mkdir()
    recorded.chmod(0o777)  # the sandbox runs the agent as a user of its own
    config = Path(os.environ["WORKTRIAL_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f"[sandbox]\nwritable = [{json.dumps(str(recorded))}]\n")
    real, log = shlex.quote(str(tool.executable)), shlex.quote(str(recorded / "environments.txt"))
    wrapper = wrappers / tool.executable.name
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = --version ] || /usr/bin/env >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
    return recorded / "environments.txt"


def priced(tokens: Tokens, route: str = MODEL) -> float | None:
    price = resolve_price(route)
    assert price is not None
    return cost_usd(tokens, price.price)


def test_solves_a_task_through_the_gateway(
    agent: Cli,
    home: Path,
    cli: Callable[..., Result],
    repo: Path,
    write_suite,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded = environment_recorder(tmp_path, installed(agent.preset), monkeypatch)
    served, side = Served(), Served()
    with CliServer(chat_model(served, agent, side=side)) as server:
        args = ["--agent", agent.preset, "--model", MODEL, "--base-url", f"{server.url}/v1"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert keys == {f"Bearer {KEY}"}  # the gateway sent the real key upstream
    assert served.calls == 2 and set(served.models + side.models) == {"gpt-4.1-mini"}
    # The gateway's reading of every answer the server gave, and its price.
    everything = served.tokens.add(side.tokens)
    assert attempt["tokens"] == everything.model_dump()
    assert attempt["cost_usd"] == pytest.approx(priced(everything), rel=1e-6)
    assert attempt["turns"] == 2
    trace = json.loads((repo / attempt["trace"]).read_text())
    assert trace["tool_counts"].get(agent.shell_tool) == 1
    assert trace["gateway"]["requests"] >= served.calls + side.calls and trace["gateway"]["failure"] is None
    # The CLI's own report is the cross-check: a note where it disagrees (it leaves side calls out), none else.
    own = agent.own_tokens(served.tokens)
    disagree = (own.input, own.output) != (everything.input, everything.output)
    assert any("usage cross-check" in note for note in trace["notes"]) == disagree, trace["notes"]
    # The CLI held the attempt's token and the gateway's URL, never the real key.
    environments = recorded.read_text()
    assert TOKEN_PREFIX in environments
    assert KEY not in environments
    # Nothing of the CLI's state went to the user's home: every config directory is the attempt's own.
    assert sorted(p.name for p in home.iterdir()) in ([], [".cache"])  # download caches stay shared, as for OpenCode
    assert_nothing_left()


@pytest.mark.sandbox
def test_reaches_a_loopback_server_from_a_network_of_its_own(
    agent: Cli, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    """With the sandbox's own network (``--network on``) the host's loopback is out of reach: the CLI reaches the
    scripted server only through the gateway's port forwarded into its namespace, as the older presets do."""
    served, side = Served(), Served()
    with CliServer(chat_model(served, agent, side=side)) as server:
        args = ["--agent", agent.preset, "--model", MODEL, "--base-url", f"{server.url}/v1"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args, "--sandbox", "on", "--network", "on")
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert envelope["run"]["sandbox"]["network"] == "on"
    assert attempt["tokens"] == served.tokens.add(side.tokens).model_dump()
    assert_nothing_left()


def test_a_refused_key_stops_the_run(agent: Cli, cli: Callable[..., Result], repo: Path, write_suite) -> None:
    fail = Plain(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    with CliServer(chat_model(Served(), agent, fail=fail)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        args = ["--agent", agent.preset, "--model", MODEL, "--base-url", f"{server.url}/v1", "--jobs", "1"]
        result, _ = evaluate(cli, repo, suite, *args)
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "HTTP 401" in result.output
    # The gateway saw the 401 and ended the attempt: its line, naming the key variable the user set.
    assert "model gateway" in result.output and "check OPENAI_API_KEY" in result.output
    assert "stopping the run" in result.output and len(result.output.strip().splitlines()) == 1
    assert_nothing_left()


def messages_model(served: Served, shell_tool: str, side: Served) -> Callable[[Request], Sse | Plain]:
    """Anthropic Messages: the shell tool once, then a final message; usage with cache reads and writes. Calls
    without tools (titles) are tallied in ``side``."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/messages"):
            return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            usage = {"input_tokens": 40, "output_tokens": 6}
            side.add(model, Tokens(input=40, cached_input=0, cache_creation=0, output=6))
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
    """``--model anthropic/NAME --base-url ROOT``: the CLI calls ROOT/v1/messages through the gateway, which sends
    the Anthropic key, and the tokens (Anthropic counts cache reads and writes apart from input) are the gateway's
    reading of every answer, priced by the table."""
    agent = CLIS[preset]
    on_path(monkeypatch, installed(preset))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted")
    served, side = Served(), Served()
    with CliServer(messages_model(served, agent.shell_tool, side)) as server:
        args = ["--agent", preset, "--model", "anthropic/claude-sonnet-4-5", "--base-url", server.url]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("x-api-key") for r in server.posts("/v1/messages")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", json.dumps(attempt)
    assert keys == {"sk-ant-scripted"}
    assert served.calls == 2 and set(served.models + side.models) == {"claude-sonnet-4-5"}
    everything = served.tokens.add(side.tokens)
    assert attempt["tokens"] == everything.model_dump()
    assert attempt["cost_usd"] == pytest.approx(priced(everything, "anthropic/claude-sonnet-4-5"), rel=1e-6)
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
