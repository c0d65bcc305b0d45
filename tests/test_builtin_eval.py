"""End to end: ``worktrial eval --model ...`` through the real SDKs against a scripted loopback provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builtin_support import BUNDLED, one_task_suite, run_eval, traces, write_user_config
from tests.scripted_provider import (
    Reply,
    Request,
    ScriptedProvider,
    anthropic_error,
    anthropic_reply,
    anthropic_usage,
    openai_error,
    openai_reply,
    openai_usage,
    turn_index,
)
from worktrial.agents.pricing import price_table

SECRET = "sk-test-SECRET-do-not-leak-0123456789"
WRITE_HELLO_CALL = ("write_file", {"path": "worktrial-hello.txt", "content": "Hello, worktrial!\n"})

# A stateless scripted model: for each bundled task (found by a phrase of its prompt), the tool calls of each turn.
SOLUTIONS: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    "worktrial-hello.txt": [
        [("write_file", {"path": "worktrial-hello.txt", "content": "Hello, worktrial!\n"})],
        [("finish", {"status": "success", "summary": "created the file"})],
    ],
    "worktrial-docs/guides/setup": [
        [("write_file", {"path": "worktrial-docs/guides/setup/README.md", "content": "#Setup\nRun make demo.\n"})],
        [("finish", {"status": "success", "summary": "wrote the README"})],
    ],
    "worktrial-data/config.json": [
        [("write_file", {"path": "worktrial-data/config.json", "content": '{"name":"worktrial","count":3}\n'})],
        [("finish", {"status": "success", "summary": "wrote the config"})],
    ],
    "worktrial-notes.md": [
        [("write_file", {"path": "worktrial-notes.md", "content": "Notes\n"})],
        [("bash", {"command": "git add worktrial-notes.md && git commit -q -m 'Add worktrial notes'"})],
        [("finish", {"status": "success", "summary": "committed"})],
    ],
    "worktrial_calc/calc.py": [
        [("read_file", {"path": "worktrial_calc/calc.py"})],
        [("edit_file", {"path": "worktrial_calc/calc.py", "old_string": "a - b", "new_string": "a + b"})],
        [("bash", {"command": "python3 worktrial_calc/test_calc.py"})],
        [("finish", {"status": "success", "summary": "fixed add"})],
    ],
}
USAGE_PER_TURN = (1000, 50, 200, 10)  # prompt, completion, cached, reasoning


def task_prompt(request: Request) -> str:
    messages = request.body["messages"]
    first_user = next(m for m in messages if m["role"] == "user")
    content = first_user["content"]
    return content if isinstance(content, str) else content[0]["text"]


def solver(request: Request) -> Reply:
    prompt = task_prompt(request)
    script = next(steps for phrase, steps in SOLUTIONS.items() if phrase in prompt)
    return openai_reply(*script[turn_index(request)], usage=openai_usage(*USAGE_PER_TURN))


@pytest.mark.slow
def test_bundled_suite_passes_against_any_openai_compatible_server(cli: Any, repo: Path) -> None:
    with ScriptedProvider(solver) as server:
        # Two jobs: attempts run side by side, each with its own SDK client and conversation.
        result = run_eval(
            cli, repo, BUNDLED, "--model", "openai-compatible/scripted-coder", "--base-url", server.openai_url, jobs=2
        )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    outcomes = {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}
    assert set(outcomes.values()) == {"pass"}, outcomes
    assert (envelope["provider"], envelope["model"]) == ("openai-compatible", "scripted-coder")
    agent = envelope["agent"]
    assert agent["name"] == "builtin" and agent["route"] == "openai-compatible/scripted-coder"
    assert agent["max_turns"] == 50 and "temperature" not in agent
    assert agent["tools"] == ["bash", "read_file", "write_file", "edit_file", "list_files", "search", "finish"]
    # No price is known for this route: cost is unknown, never zero.
    assert envelope["report"]["cost_usd"] is None and envelope["report"]["unpriced_runs"] == 5
    by_task = {t["task_id"]: t for t in traces(repo)}
    calc = by_task["fix-failing-test"]
    assert calc["turns"] == 4
    assert calc["tool_counts"] == {"read_file": 1, "edit_file": 1, "bash": 1, "finish": 1}
    prompt, completion, cached, reasoning = USAGE_PER_TURN
    assert calc["tokens"] == {
        "input": 4 * prompt,
        "output": 4 * completion,
        "cached_input": 4 * cached,
        "cache_creation": None,
        "reasoning": 4 * reasoning,
    }
    assert calc["latency_ms"]["count"] == 4 and calc["cost_usd"] is None
    assert calc["error_counts"] == {}
    # Every request went to the chat completions endpoint with the tools and the task prompt.
    assert {r.path for r in server.requests} == {"/v1/chat/completions"}
    first = server.requests[0].body
    assert [t["function"]["name"] for t in first["tools"]] == agent["tools"]
    assert first["model"] == "scripted-coder" and first["messages"][0]["role"] == "system"


def test_priced_route_records_cost_and_never_leaks_the_key(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    suite = one_task_suite(write_suite)
    with ScriptedProvider(solver) as server:
        result = run_eval(cli, repo, suite, "--model", "openai/gpt-5.1", "--base-url", server.openai_url)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass"
    price = price_table().models["openai/gpt-5.1"]
    prompt, completion, cached, _ = USAGE_PER_TURN
    assert price.cached_input is not None
    expected = 2 * ((prompt - cached) * price.input + cached * price.cached_input + completion * price.output) / 1e6
    assert attempt["cost_usd"] == pytest.approx(expected)
    assert traces(repo)[0]["cost_usd"] == pytest.approx(expected)
    assert envelope["report"]["cost_usd"] == pytest.approx(expected) and envelope["report"]["unpriced_runs"] == 0
    assert envelope["agent"]["pricing"] == {"source": "table", "taken_on": price_table().taken_on}
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    written = result.output + json.dumps(traces(repo)) + json.dumps(envelope)
    assert SECRET not in written


def test_config_price_override_and_cli_settings(cli: Any, repo: Path, write_suite: Any) -> None:
    write_user_config('[pricing."openai-compatible/*"]\ninput = 1.0\noutput = 2.0\ncached_input = 0.5\n')
    suite = one_task_suite(write_suite)
    with ScriptedProvider(solver) as server:
        result = run_eval(
            cli,
            repo,
            suite,
            *("--model", "openai-compatible/local-model", "--base-url", server.openai_url),
            *("--temperature", "0.2", "--max-turns", "7", "--max-tokens", "100000"),
        )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    prompt, completion, cached, _ = USAGE_PER_TURN
    expected = 2 * ((prompt - cached) * 1.0 + cached * 0.5 + completion * 2.0) / 1e6
    assert envelope["report"]["tasks"][0]["attempts"][0]["cost_usd"] == pytest.approx(expected)
    agent = envelope["agent"]
    assert (agent["temperature"], agent["max_turns"], agent["max_total_tokens"]) == (0.2, 7, 100000)
    assert agent["pricing"] == {"source": "config", "taken_on": None}
    assert all(r.body["temperature"] == 0.2 for r in server.requests)


@pytest.mark.slow
def test_anthropic_messages_with_prompt_caching(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    suite = one_task_suite(write_suite)
    steps = [
        anthropic_reply(
            ("write_file", {"path": "worktrial-hello.txt", "content": "Hello, worktrial!\n"}),
            text="Writing the file.",
            usage=anthropic_usage(900, 40, cache_read=0, cache_write=800),
        ),
        anthropic_reply(("finish", {"status": "success", "summary": "done"}), usage=anthropic_usage(100, 20, 800, 60)),
    ]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "anthropic/claude-haiku-4-5", "--base-url", server.anthropic_url)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass"
    # input counts every prompt token: uncached + cache reads + cache writes, as Anthropic reported them.
    assert attempt["tokens"] == {
        "input": 900 + 800 + 100 + 800 + 60,
        "output": 60,
        "cached_input": 800,
        "cache_creation": 860,
        "reasoning": None,
    }
    price = price_table().models["anthropic/claude-haiku-4-5"]
    assert price.cached_input is not None and price.cache_write is not None
    expected = (1000 * price.input + 800 * price.cached_input + 860 * price.cache_write + 60 * price.output) / 1e6
    assert attempt["cost_usd"] == pytest.approx(expected)
    assert {r.path for r in server.requests} == {"/v1/messages"}
    # SDK versions differ in the header that carries the key; either way it must be this one.
    assert all(SECRET in (r.headers.get("x-api-key"), r.headers.get("authorization", "")[7:]) for r in server.requests)
    second = server.requests[1].body
    assert second["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert second["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    last_block = second["messages"][-1]["content"][-1]
    assert last_block["type"] == "tool_result" and last_block["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][1]["content"][0] == {"type": "text", "text": "Writing the file."}
    assert second["max_tokens"] == 8192


def test_claiming_success_without_the_work_fails(cli: Any, repo: Path, write_suite: Any) -> None:
    suite = one_task_suite(write_suite)
    claim = ("finish", {"status": "success", "summary": "all done"})
    steps: list[Any] = [openai_reply(claim, usage=openai_usage(10, 5))]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "openai-compatible/liar", "--base-url", server.openai_url)
    assert result.exit_code == 0, result.output
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert (attempt["outcome"], attempt["claimed"], attempt["verified"]) == ("fail", True, False)


def test_rate_limit_then_success_is_retried_by_the_sdk(cli: Any, repo: Path, write_suite: Any) -> None:
    suite = one_task_suite(write_suite)
    steps: list[Any] = [openai_error(429, "slow down", "rate_limit_exceeded"), solver, solver]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "openai-compatible/m", "--base-url", server.openai_url)
    assert result.exit_code == 0, result.output
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass"
    trace = traces(repo)[0]
    assert trace["error_counts"] == {"provider_rate_limit": 1}
    assert trace["turns"] == 2 and len(server.requests) == 3


def test_server_error_after_retries_is_an_error_outcome_and_the_run_goes_on(
    cli: Any, repo: Path, write_suite: Any
) -> None:
    write_user_config("[agents.builtin]\nmax_retries = 1\n")
    bundled = json.loads(BUNDLED.read_text())["tasks"]
    suite = write_suite(bundled[:2])
    steps: list[Any] = [openai_error(500, "boom"), openai_error(500, "boom"), solver, solver]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "openai-compatible/m", "--base-url", server.openai_url)
    assert result.exit_code == 0, result.output
    tasks = json.loads(result.stdout)["report"]["tasks"]
    first, second = (t["attempts"][0] for t in tasks)
    assert first["outcome"] == "error" and first["error_category"] == "provider_server"
    assert "HTTP 500" in first["reason"] and "after 1 retries" in first["reason"]
    assert second["outcome"] == "pass"
    assert traces(repo)[0]["error_counts"] == {"provider_server": 2}
    assert len(server.requests) == 4


def test_rejected_key_stops_the_run_with_one_message(cli: Any, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    steps: list[Any] = [openai_error(401, f"Incorrect API key provided: {SECRET}", "invalid_api_key")] * 10
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, BUNDLED, "--model", "openai/gpt-5.1", "--base-url", server.openai_url)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("worktrial: error:")]
    assert len(errors) == 1, result.stderr
    assert "HTTP 401" in errors[0] and "OPENAI_API_KEY" in errors[0] and "would repeat" in errors[0]
    assert SECRET not in result.output
    assert len(server.requests) == 1  # 401 is not retried, and no second attempt was started
    assert traces(repo)[0]["error_counts"] == {"provider_auth": 1}


def test_unknown_model_stops_the_run(cli: Any, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    steps: list[Any] = [anthropic_error(404, "not_found_error", "model: claude-nope")] * 5
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, BUNDLED, "--model", "anthropic/claude-nope", "--base-url", server.anthropic_url)
    assert result.exit_code == 2
    assert "model 'claude-nope' not found (HTTP 404" in result.stderr
    assert len(server.requests) == 1


def test_missing_key_is_caught_before_any_attempt(cli: Any, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = run_eval(cli, repo, BUNDLED, "--model", "openai/gpt-5.1")
    assert result.exit_code == 2
    assert "needs an API key: set OPENAI_API_KEY" in result.stderr


def test_anthropic_overload_and_rate_limit_are_retried_and_counted(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    suite = one_task_suite(write_suite)
    steps: list[Any] = [
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(429, "rate_limit_error", "slow down"),
        anthropic_reply(WRITE_HELLO_CALL, usage=anthropic_usage(50, 10)),
        anthropic_reply(("finish", {"status": "success", "summary": "ok"}), usage=anthropic_usage(60, 10)),
    ]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "anthropic/claude-haiku-4-5", "--base-url", server.anthropic_url)
    assert result.exit_code == 0, result.output
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass" and attempt["tokens"]["input"] == 110
    assert traces(repo)[0]["error_counts"] == {"provider_server": 1, "provider_rate_limit": 1}
    assert len(server.requests) == 4
