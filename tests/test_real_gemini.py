"""Gemini CLI (pinned in tests/real_agents/versions.toml) end to end against a loopback ``streamGenerateContent``.

Like tests/test_real_agents.py: a scripted model runs one shell command and finishes; the envelope must show the
outcome, the claim, the tokens the server served (output counting thinking tokens), the cost from the price table,
the model the server was asked for, and no process left. The user's ``~/.gemini/settings.json`` (which headless mode
needs for its auth type once a base URL is set) reaches each attempt's fresh ``GEMINI_CLI_HOME`` as a copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import CliServer, Plain, Request, Sse, gemini_has_function_response, gemini_stream, gemini_usage
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
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}}


def gemini_model(served: Served, fail: Plain | None = None) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/models/" not in request.path:
            return Plain(404, {"error": {"code": 404, "message": "no such route", "status": "NOT_FOUND"}})
        if fail is not None:
            return fail
        model = request.path.split("/models/", 1)[1].split(":", 1)[0]
        if not gemini_has_function_response(request.body.get("contents", [])):
            call = {"functionCall": {"name": "run_shell_command", "args": {"command": SOLVE, "description": "solve"}}}
            served.add(model, Tokens(input=700, cached_input=200, output=45 + 15, reasoning=15))
            return gemini_stream(model, [call], gemini_usage(700, 45, cached=200, thoughts=15))
        served.add(model, Tokens(input=900, cached_input=600, output=8 + 4, reasoning=4))
        return gemini_stream(
            model, [{"text": "Created notes/hello.txt."}], gemini_usage(900, 8, cached=600, thoughts=4)
        )

    return respond


@pytest.fixture
def gemini(home: Path, monkeypatch: pytest.MonkeyPatch) -> Tool:
    tool = installed("gemini-cli")
    on_path(monkeypatch, tool)
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test-key")
    return tool


def test_gemini_cli_solves_a_task_with_exact_usage_and_cost(
    gemini: Tool, home: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    served = Served()
    with CliServer(gemini_model(served)) as server:
        result, envelope = evaluate(
            cli,
            repo,
            write_suite([TASK]),
            "--agent",
            "gemini-cli",
            "--model",
            "gemini/gemini-2.5-pro",
            "--base-url",
            server.url,
        )
        keys = {r.headers.get("x-goog-api-key") for r in server.requests if r.method == "POST"}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["claimed"] is True and attempt["verified"] is True
    assert keys == {"gemini-test-key"}
    assert set(served.models) == {"gemini-2.5-pro"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == served.calls == 2
    price = resolve_price("gemini/gemini-2.5-pro")
    assert price is not None
    assert attempt["cost_usd"] == pytest.approx(cost_usd(served.tokens, price.price), rel=1e-6)
    # The user's settings were copied into the attempt, not changed, and no session went into the user's home.
    assert json.loads((home / ".gemini" / "settings.json").read_text()) == SETTINGS
    assert sorted(p.name for p in (home / ".gemini").iterdir()) == ["settings.json"]
    assert_nothing_left()


def test_gemini_cli_rejected_key_stops_the_run(
    gemini: Tool, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    fail = Plain(401, {"error": {"code": 401, "message": "API key not valid", "status": "UNAUTHENTICATED"}})
    with CliServer(gemini_model(Served(), fail=fail)) as server:
        suite = write_suite([TASK, dict(TASK, id="second")])
        result, _ = evaluate(cli, repo, suite, "--agent", "gemini-cli", "--base-url", server.url, "--jobs", "1")
    assert result.exit_code == 2, result.output
    assert "refused the credentials" in result.output and "HTTP 401" in result.output
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest
