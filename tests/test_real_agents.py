"""The presets against the real agent CLIs (versions pinned in tests/real_agents/versions.toml).

Each CLI runs through ``worktrial eval`` against a loopback model server that speaks its provider's streaming
wire format. The scripted model runs one shell command that solves the task and then finishes; the test checks
the outcome, the claim, tokens and cost equal to what the server served, the model the server was asked for,
and that no process of the CLI is left. ``make agents`` installs the CLIs; a missing one fails the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    anthropic_error,
    anthropic_plain,
    anthropic_stream,
    has_tool_result,
    responses_function_call,
    responses_message,
    responses_stream,
    responses_usage,
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
from worktrial.model.records import Tokens

pytestmark = [pytest.mark.agents, pytest.mark.slow]


# ---- Claude Code ---------------------------------------------------------------------------------------------------


def _not_a_message_call(request: Request) -> Plain | None:
    """The answer to anything but a Messages call: 404 for unknown routes, a token count for count_tokens."""
    if request.method != "POST" or "/v1/messages" not in request.path:
        return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
    if "count_tokens" in request.path:
        return Plain(200, {"input_tokens": 10})
    return None


def claude_model(served: Served, fail: Plain | None = None) -> Callable[[Request], Sse | Plain]:
    """Bash once, then a final message; side calls (no tools) get a short answer. Usage differs per call."""

    def respond(request: Request) -> Sse | Plain:
        body = request.body
        if (other := _not_a_message_call(request)) is not None:
            return other
        if fail is not None:
            return fail
        model = str(body.get("model"))
        tools_offered = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
        if "Bash" not in tools_offered:
            usage = {"input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 0}
            text = [{"type": "text", "text": "Notes"}]
            answer: Sse | Plain = (
                anthropic_stream(model, text, usage, "end_turn")
                if body.get("stream")
                else anthropic_plain(model, "Notes", usage)
            )
            served.add(model, Tokens(input=50, output=7, cached_input=0))
            return answer
        if not has_tool_result(body.get("messages", [])):
            call = {"type": "tool_use", "id": "toolu_solve", "name": "Bash", "input": {"command": SOLVE}}
            usage = {
                "input_tokens": 1200,
                "output_tokens": 40,
                "cache_read_input_tokens": 300,
                "cache_creation_input_tokens": 100,
            }
            served.add(model, Tokens(input=1600, output=40, cached_input=300, cache_creation=100))
            return anthropic_stream(model, [call], usage, "tool_use")
        usage = {
            "input_tokens": 1500,
            "output_tokens": 12,
            "cache_read_input_tokens": 1400,
            "cache_creation_input_tokens": 0,
        }
        served.add(model, Tokens(input=2900, output=12, cached_input=1400, cache_creation=0))
        return anthropic_stream(model, [{"type": "text", "text": "Created notes/hello.txt."}], usage, "end_turn")

    return respond


@pytest.fixture
def claude(home: Path, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("claude-code")
    on_path(monkeypatch, tool)
    return tool


def test_claude_code_solves_a_task_with_exact_usage_and_cost(
    claude: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with CliServer(claude_model(served)) as server:
        result, envelope = evaluate(
            cli,
            repo,
            write_suite([TASK]),
            "--agent",
            "claude-code",
            "--model",
            "anthropic/claude-sonnet-4-5",
            "--base-url",
            server.url,
            "--max-turns",
            "8",
        )
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    # The route is split: the API got the bare model name, and the envelope records that split.
    assert set(served.models) == {"claude-sonnet-4-5"}
    assert (envelope["provider"], envelope["model"], envelope["model_source"]) == (
        "anthropic",
        "claude-sonnet-4-5",
        "route",
    )
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 2  # the main loop's two model calls; side calls count in tokens only
    price = resolve_price("anthropic/claude-sonnet-4-5")
    assert price is not None
    assert attempt["cost_usd"] == pytest.approx(cost_usd(served.tokens, price.price), rel=1e-6)
    assert envelope["agent"]["version"].startswith(claude.version)
    assert_nothing_left()


def claude_spender(served: Served) -> Callable[[Request], Sse | Plain]:
    """A model that never stops: every main-loop call answers with another Bash call, each billed 1,600 tokens."""

    def respond(request: Request) -> Sse | Plain:
        body = request.body
        if (other := _not_a_message_call(request)) is not None:
            return other
        model = str(body.get("model"))
        if "Bash" not in {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}:
            usage = {"input_tokens": 50, "output_tokens": 7}
            served.add(model, Tokens(input=50, output=7))
            if body.get("stream"):
                return anthropic_stream(model, [{"type": "text", "text": "Notes"}], usage, "end_turn")
            return anthropic_plain(model, "Notes", usage)
        call = {"type": "tool_use", "id": f"toolu_{served.calls}", "name": "Bash", "input": {"command": "sleep 1"}}
        served.add(model, Tokens(input=1600, output=40))
        return anthropic_stream(model, [call], {"input_tokens": 1600, "output_tokens": 40}, "tool_use")

    return respond


def test_claude_code_is_ended_at_its_cost_cap_as_its_usage_streams(
    claude: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each main-loop call costs $0.0054 at Sonnet's price: a $0.01 cap ends the agent after its second call, as
    its stream shows the spend, long before the task's timeout would."""
    served = Served()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    suite = write_suite([dict(TASK, timeout_secs=120)])
    with CliServer(claude_spender(served)) as server:
        result, envelope = evaluate(
            cli, repo, suite, "--agent", "claude-code", "--model", "anthropic/claude-sonnet-4-5",
            "--base-url", server.url, "--max-cost-per-attempt", "0.01", "--grace-secs", "5",
        )  # fmt: skip
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "fail" and "cost cap" in attempt["reason"], attempt
    assert attempt["agent_ended"] in ("sigterm", "killed")
    main_calls = served.models.count("claude-sonnet-4-5")
    assert 2 <= main_calls <= 4  # ended at the call that passed the cap (and at most one already in flight)
    assert attempt["agent_secs"] < 100  # it never ran to its timeout
    assert_nothing_left()


def test_claude_code_uses_the_users_own_settings(
    claude: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    """Nothing in worktrial's config: ~/.claude/settings.json names the server (on this host's loopback, reached
    from the default sandbox through the model gateway), the key and the model."""
    served = Served()
    with CliServer(claude_model(served)) as server:
        settings = {
            "env": {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-settings"},
            "model": "claude-haiku-4-5",
        }
        (home / ".claude").mkdir()
        (home / ".claude" / "settings.json").write_text(json.dumps(settings))
        result, envelope = evaluate(cli, repo, write_suite([TASK]), "--agent", "claude-code", network=None)
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert served.calls >= 2 and set(served.models) == {"claude-haiku-4-5"}
    # No --model: the envelope records the model Claude Code's system/init event names.
    assert attempt["model"] == "claude-haiku-4-5"
    assert (envelope["provider"], envelope["model"], envelope["model_source"]) == (None, "claude-haiku-4-5", "agent")
    assert attempt["tokens"] == served.tokens.model_dump()
    price = resolve_price("anthropic/claude-haiku-4-5")
    assert price is not None
    assert attempt["cost_usd"] == pytest.approx(cost_usd(served.tokens, price.price), rel=1e-6)
    # The user's file was copied, not linked or changed, and no session went into the user's directory.
    assert json.loads((home / ".claude" / "settings.json").read_text()) == settings
    assert sorted(p.name for p in (home / ".claude").iterdir()) == ["settings.json"]
    assert_nothing_left()


@pytest.mark.parametrize(
    ("status", "kind", "category", "words"),
    [
        (401, "authentication_error", "provider_auth", "refused the credentials"),
        (404, "not_found_error", "model_not_found", "does not know this model"),
    ],
)
def test_claude_code_provider_failure_stops_the_run(
    claude: Tool,
    cli: Callable[..., Result],
    repo: Path,
    write_suite,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    kind: str,
    category: str,
    words: str,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-bad")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")  # the CLI's own retries, kept short for the test
    served = Served()
    with CliServer(claude_model(served, fail=anthropic_error(status, kind, "scripted failure"))) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        result, _ = evaluate(cli, repo, suite, "--agent", "claude-code", "--base-url", server.url, "--jobs", "1")
    assert result.exit_code == 2, result.output
    assert words in result.output and f"HTTP {status}" in result.output
    assert "stopping the run" in result.output
    assert_nothing_left()


# ---- Codex ---------------------------------------------------------------------------------------------------------


def codex_model(served: Served, cut_first: bool = False, fail: Plain | None = None) -> Callable[[Request], Sse | Plain]:
    """exec_command once, then a final message; the first stream may be cut so that Codex reconnects."""
    state = {"streams": 0}
    lock = threading.Lock()

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/responses"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        if fail is not None:
            return fail
        body = request.body
        model = str(body.get("model"))
        with lock:
            state["streams"] += 1
            first = state["streams"] == 1
        if not has_tool_result(body.get("input", [])):
            stream = responses_stream(
                model, [responses_function_call("exec_command", {"cmd": SOLVE})], responses_usage(900, 300, 60, 20)
            )
            if cut_first and first:
                stream.cut_after = 2  # the connection drops before response.completed: nothing was served
                return stream
            served.add(model, Tokens(input=900, cached_input=300, output=60, reasoning=20, cache_creation=0))
            return stream
        served.add(model, Tokens(input=1100, cached_input=800, output=15, reasoning=5, cache_creation=0))
        return responses_stream(
            model, [responses_message("Created notes/hello.txt.")], responses_usage(1100, 800, 15, 5)
        )

    return respond


@pytest.fixture
def codex(home: Path, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("codex")
    on_path(monkeypatch, tool)
    return tool


def codex_price(tokens: Tokens, route: str = "openai/gpt-5") -> float | None:
    price = resolve_price(route)
    assert price is not None
    return cost_usd(tokens, price.price)


@pytest.mark.parametrize("cut_first", [False, True], ids=["clean", "reconnect"])
def test_codex_solves_a_task_with_exact_usage_and_cost(
    codex: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch, cut_first: bool
) -> None:
    """Codex's reconnect notices and warnings (WebSocket fallback, unknown model metadata) are not a failure."""
    served = Served()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test")  # Codex itself only reads CODEX_API_KEY: mapped
    with CliServer(codex_model(served, cut_first=cut_first)) as server:
        result, envelope = evaluate(
            cli,
            repo,
            write_suite([TASK]),
            "--agent",
            "codex",
            "--model",
            "openai/gpt-5",
            "--base-url",
            f"{server.url}/v1",
        )
        auth = {r.headers.get("authorization") for r in server.posts("/responses")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert auth == {"Bearer sk-openai-test"}
    assert set(served.models) == {"gpt-5"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 2  # model calls, from Codex's session file
    assert attempt["cost_usd"] == pytest.approx(codex_price(served.tokens), rel=1e-6)
    trace = json.loads((repo / attempt["trace"]).read_text())
    if cut_first:
        assert trace["error_counts"].get("reconnect", 0) >= 1
    assert_nothing_left()


def test_codex_uses_the_users_own_provider(
    codex: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing in worktrial's config: ~/.codex/config.toml names a custom provider (on this host's loopback, reached
    from the default sandbox through the model gateway), its key variable and model."""
    served = Served()
    monkeypatch.setenv("SCRIPTED_PROVIDER_KEY", "sk-custom")
    with CliServer(codex_model(served)) as server:
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(
            'model = "gpt-5-mini"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "scripted"\n'
            f'base_url = "{server.url}/v1"\nenv_key = "SCRIPTED_PROVIDER_KEY"\nwire_api = "responses"\n'
        )
        result, envelope = evaluate(cli, repo, write_suite([TASK]), "--agent", "codex", network=None)
        auth = {r.headers.get("authorization") for r in server.posts("/responses")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert auth == {"Bearer sk-custom"}
    assert set(served.models) == {"gpt-5-mini"}
    assert (envelope["model"], envelope["model_source"]) == ("gpt-5-mini", "agent")
    assert attempt["tokens"] == served.tokens.model_dump()
    # The model came from the user's config; Codex names it in its session file, so the run is priced.
    assert attempt["cost_usd"] == pytest.approx(codex_price(served.tokens, "openai/gpt-5-mini"), rel=1e-6)
    assert sorted(p.name for p in (home / ".codex").iterdir()) == ["config.toml"]
    assert_nothing_left()


@pytest.mark.parametrize(
    ("fail", "words"),
    [
        (Plain(401, {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}), "credentials"),
        (
            Plain(404, {"error": {"message": "The model `gpt-5` does not exist", "code": "model_not_found"}}),
            "does not know this model",
        ),
    ],
    ids=["auth", "unknown-model"],
)
def test_codex_provider_failure_stops_the_run(
    codex: Tool,
    cli: Callable[..., Result],
    repo: Path,
    write_suite,
    monkeypatch: pytest.MonkeyPatch,
    fail: Plain,
    words: str,
) -> None:
    monkeypatch.setenv("CODEX_API_KEY", "sk-bad")
    with CliServer(codex_model(Served(), fail=fail)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        result, _ = evaluate(
            cli, repo, suite, "--agent", "codex", "--model", "gpt-5", "--base-url", f"{server.url}/v1", "--jobs", "1"
        )
    assert result.exit_code == 2, result.output
    assert words in result.output and "stopping the run" in result.output
    assert_nothing_left()


def test_codex_refuses_budgets_it_cannot_honour(
    codex: Tool, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    result, _ = evaluate(cli, repo, write_suite([TASK]), "--agent", "codex", "--max-turns", "5")
    assert result.exit_code == 2
    assert "codex has no equivalent of --max-turns" in result.output


__all__ = ["home", "marker"]  # fixtures, imported for pytest


# ---- Both through the model gateway, in a sandbox of their own network ---------------------------------------------


@pytest.mark.sandbox
@pytest.mark.parametrize("network", ["on", "off"])
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_usage_through_the_gateway_equals_what_the_server_served(
    home: Path,
    cli: Callable[..., Result],
    repo: Path,
    write_suite,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    network: str,
) -> None:
    """The CLI runs in the sandbox with a network of its own, which cannot reach the host's loopback: it reaches the
    loopback server only through the run's gateway (its port forwarded to the gateway's socket), holding the
    attempt's token. Tokens, cost and model come from the gateway's reading of the server's own answers."""
    tool = installed(agent)
    on_path(monkeypatch, tool)
    served = Served()
    key = "sk-real-key-for-the-gateway-only"
    if agent == "claude-code":
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        model, responder, base, route = "anthropic/claude-sonnet-4-5", claude_model(served), "", "anthropic"
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
        model, responder, base, route = "openai/gpt-5", codex_model(served), "/v1", "openai"
    with CliServer(responder) as server:
        args = ["--agent", agent, "--model", model, "--base-url", f"{server.url}{base}"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args, "--sandbox", "on", "--network", network)
        seen_keys = {r.headers.get("x-api-key") or r.headers.get("authorization") for r in server.posts("")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert envelope["run"]["sandbox"]["network"] == network
    assert attempt["tokens"] == served.tokens.model_dump()
    price = resolve_price(model)
    assert price is not None
    assert attempt["cost_usd"] == pytest.approx(cost_usd(served.tokens, price.price), rel=1e-6)
    assert seen_keys <= {key, f"Bearer {key}"}  # the server got the real key, the agent only the token
    trace = json.loads((repo / attempt["trace"]).read_text())
    assert trace["gateway"]["requests"] >= served.calls and trace["gateway"]["failure"] is None
    assert not [note for note in trace["notes"] if "cross-check" in note], trace["notes"]
    assert route in {"anthropic", "openai"}
    assert_nothing_left()
