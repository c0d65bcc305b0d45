"""aider and mini-swe-agent (pinned in tests/real_agents/versions.toml, each in its own venv) end to end.

Both call models through litellm, here against a loopback OpenAI Chat Completions server answering without
streaming (aider runs with ``--no-stream``, the only way its token figures are the provider's). aider's scripted
model answers in aider's "whole" edit format; mini-swe-agent's runs its bash tool once and then submits. The
envelope must show the outcome, the claim, the tokens the server served, the cost (null when unpriced, never 0;
from the price table when the model is known), the model the server was asked for, the version, and no process
left. One test per tool configures the provider only in the user's own files, which must reach the attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import CliServer, Plain, Request, chat_has_tool_result, chat_plain, chat_usage
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
PRICED = "openrouter/openai/gpt-5.1"
"""In worktrial's price table but not in litellm's: both tools report cost 0 for it, worktrial prices it."""
WHOLE_EDIT = "I will create the file.\n\nnotes/hello.txt\n```\nhi\n```\n"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
REJECTED = Plain(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})


def chat_model(served: Served, tool: str, fail: Plain | None = None) -> Callable[[Request], Plain]:
    """aider: one reply in its whole-file edit format. mini: bash with the solution, then bash with the submit."""

    def respond(request: Request) -> Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        if fail is not None:
            return fail
        model = str(request.body.get("model"))
        if tool == "aider":
            # The answer reports no cached or reasoning tokens: 0 of each, as the model gateway reads them.
            served.add(model, Tokens(input=1000, output=50, cached_input=0, reasoning=0))
            return chat_plain(model, chat_usage(1000, 50), text=WHOLE_EDIT)
        if not chat_has_tool_result(request.body.get("messages", [])):
            served.add(model, Tokens(input=1000, cached_input=300, output=50, reasoning=10))
            usage = chat_usage(1000, 50, cached=300, reasoning=10)
            return chat_plain(model, usage, text="Creating it.", call=("bash", {"command": SOLVE}))
        served.add(model, Tokens(input=1300, cached_input=1000, output=9, reasoning=2))
        usage = chat_usage(1300, 9, cached=1000, reasoning=2)
        return chat_plain(model, usage, text="Done.", call=("bash", {"command": SUBMIT}))

    return respond


@pytest.fixture
def litellm_offline(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm would fetch its price map from the internet at start; its bundled copy is the pinned one.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for var in ("OPENAI_API_BASE", "OPENROUTER_API_KEY", "OPENROUTER_API_BASE", "MSWEA_MODEL_NAME"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def aider(litellm_offline: None, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("aider")
    on_path(monkeypatch, tool)
    return tool


@pytest.fixture
def mini(litellm_offline: None, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("mini-swe-agent")
    on_path(monkeypatch, tool)
    monkeypatch.delenv("MSWEA_GLOBAL_CONFIG_DIR", raising=False)
    return tool


def priced(tokens: Tokens) -> float | None:
    price = resolve_price(PRICED)
    assert price is not None
    return cost_usd(tokens, price.price)


# ---- aider ---------------------------------------------------------------------------------------------------------


def test_aider_solves_a_task_with_exact_usage_and_unknown_cost(
    aider: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-aider")
    with CliServer(chat_model(served, "aider")) as server:
        args = ["--agent", "aider", "--model", "openai/coder-1", "--base-url", f"{server.url}/v1"]
        result, envelope = evaluate(cli, repo, write_suite([TASK]), *args)
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert keys == {"Bearer sk-aider"}
    assert served.models == ["coder-1"]  # litellm sends the name without its provider prefix
    # With --no-stream aider logs the provider's figures; it reports no cached or reasoning tokens.
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 1
    # aider reports cost 0 for a model it cannot price: unknown, never free.
    assert attempt["cost_usd"] is None and envelope["report"]["unpriced_runs"] == 1
    assert envelope["agent"]["version"] == f"aider {aider.version}"
    assert_nothing_left()


def test_aider_uses_the_users_own_config_and_is_priced(
    aider: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    """Nothing in worktrial's config: ~/.aider.conf.yml names the model, ~/.env the provider's key and URL, on this
    host's loopback, reached from the default sandbox through the model gateway."""
    served = Served()
    with CliServer(chat_model(served, "aider")) as server:
        (home / ".aider.conf.yml").write_text(f"model: {PRICED}\nedit-format: whole\n")
        (home / ".env").write_text(f"OPENROUTER_API_KEY=sk-aider-env\nOPENROUTER_API_BASE={server.url}/v1\n")
        result, envelope = evaluate(cli, repo, write_suite([TASK]), "--agent", "aider", network=None)
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert keys == {"Bearer sk-aider-env"}
    assert served.models == ["openai/gpt-5.1"]
    assert (envelope["provider"], envelope["model"], envelope["model_source"]) == (
        "openrouter",
        "openai/gpt-5.1",
        "agent",
    )
    # Routed through the model gateway (the key and the endpoint in the user's ~/.env are OpenRouter's, which the
    # gateway speaks): the figures are the provider's, cached and reasoning counts included.
    assert attempt["tokens"] == served.tokens.model_dump()
    # The model came from the user's file; aider names it in its banner, so the run is priced from the table.
    assert attempt["cost_usd"] == pytest.approx(priced(served.tokens), rel=1e-6)
    assert sorted(p.name for p in home.iterdir()) == [".aider.conf.yml", ".env"]  # copied, nothing written here
    assert_nothing_left()


def test_aider_rejected_key_stops_the_run(
    aider: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aider prints litellm.AuthenticationError and exits 0: a provider failure, not a claimed success."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-bad")
    with CliServer(chat_model(Served(), "aider", fail=REJECTED)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        args = ["--agent", "aider", "--model", "openai/coder-1", "--base-url", f"{server.url}/v1", "--jobs", "1"]
        result, _ = evaluate(cli, repo, suite, *args)
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "stopping the run" in result.output
    assert_nothing_left()


# ---- mini-swe-agent ------------------------------------------------------------------------------------------------


def test_mini_swe_agent_uses_the_users_own_config_with_exact_usage_and_price(
    mini: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    """Nothing in worktrial's config: mini's global .env names the model, the key and the URL (on this host's
    loopback, reached from the default sandbox through the model gateway)."""
    served = Served()
    user_config = home / ".config" / "mini-swe-agent"
    user_config.mkdir(parents=True)
    with CliServer(chat_model(served, "mini")) as server:
        (user_config / ".env").write_text(
            f"MSWEA_MODEL_NAME={PRICED}\nOPENROUTER_API_KEY=sk-mini\nOPENROUTER_API_BASE={server.url}/v1\n"
        )
        result, envelope = evaluate(cli, repo, write_suite([TASK]), "--agent", "mini-swe-agent", network=None)
        keys = {r.headers.get("authorization") for r in server.posts("/chat/completions")}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert keys == {"Bearer sk-mini"}
    assert served.models == ["openai/gpt-5.1", "openai/gpt-5.1"]
    assert (envelope["provider"], envelope["model"], envelope["model_source"]) == (
        "openrouter",
        "openai/gpt-5.1",
        "agent",
    )
    # Routed through the model gateway (OpenRouter's key and endpoint in mini's .env): the provider's figures.
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 2
    # mini's instance_cost is 0.0 for a model litellm cannot price; the model it ran is in the table.
    assert attempt["cost_usd"] == pytest.approx(priced(served.tokens), rel=1e-6)
    assert envelope["agent"]["version"] == f"mini-swe-agent {mini.version}"  # mini has no --version
    assert sorted(p.name for p in user_config.iterdir()) == [".env"]  # no trajectory went into the user's dir
    assert_nothing_left()


def test_mini_swe_agent_rejected_key_stops_the_run(
    mini: Tool, cli: Callable[..., Result], repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-bad")
    with CliServer(chat_model(Served(), "mini", fail=REJECTED)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        args = ["--agent", "mini-swe-agent", "--model", "openai/coder-1", "--base-url", f"{server.url}/v1"]
        result, _ = evaluate(cli, repo, suite, *args, "--jobs", "1")
        calls = len(server.posts("/chat/completions"))
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "stopping the run" in result.output
    assert calls == 1  # mini does not retry an authentication error, and the second task never started
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest
