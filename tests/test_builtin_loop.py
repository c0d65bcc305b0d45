"""The builtin agent's loop against a scripted provider: bad tool calls, escapes, budgets and context limits."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.builtin_support import one_task_suite, run_eval, traces, write_user_config
from tests.scripted_provider import (
    Reply,
    Request,
    ScriptedProvider,
    anthropic_error,
    openai_error,
    openai_reply,
    openai_usage,
    turn_index,
)
from worktrial.engine.run import RunOptions, run_suite
from worktrial.model.trace import FORBIDDEN_KEYS

WRITE_HELLO = ("write_file", {"path": "worktrial-hello.txt", "content": "Hello, worktrial!\n"})
FINISH_OK = ("finish", {"status": "success", "summary": "done"})


def tool_messages(request: Request) -> dict[str, str]:
    """tool_call_id -> content of the tool results in an OpenAI request."""
    return {m["tool_call_id"]: m["content"] for m in request.body["messages"] if m["role"] == "tool"}


def only_attempt(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0])


def eval_one(cli: Any, repo: Path, write_suite: Any, steps: Any, *args: str, **task: Any) -> tuple[Any, Any]:
    suite = one_task_suite(write_suite, **task)
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "openai-compatible/m", "--base-url", server.openai_url, *args)
    return result, server


def test_malformed_arguments_are_answered_and_counted(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [
        openai_reply(
            ("write_file", '{"path": "worktrial-hello.txt", "content": "Hello'),
            ("write_file", {"path": "worktrial-hello.txt"}),
            ("finish", {"status": "done", "summary": "?"}),
            usage=openai_usage(10, 5),
        ),
        openai_reply(WRITE_HELLO, usage=openai_usage(10, 5)),
        openai_reply(FINISH_OK, usage=openai_usage(10, 5)),
    ]
    result, server = eval_one(cli, repo, write_suite, steps)
    assert only_attempt(result)["outcome"] == "pass"
    answers = list(tool_messages(server.requests[1]).values())
    assert "not a valid JSON object" in answers[0]
    assert "missing required argument(s): content" in answers[1]
    assert "status must be one of success, failure" in answers[2]
    trace = traces(repo)[0]
    assert trace["error_counts"] == {"invalid_tool_call": 3}
    assert trace["tool_counts"] == {"write_file": 3, "finish": 2}


def test_unknown_tool_is_answered_and_counted(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [
        openai_reply(("delete_repository", {"force": True}), usage=openai_usage(10, 5)),
        openai_reply(WRITE_HELLO, usage=openai_usage(10, 5)),
        openai_reply(FINISH_OK, usage=openai_usage(10, 5)),
    ]
    result, server = eval_one(cli, repo, write_suite, steps)
    assert only_attempt(result)["outcome"] == "pass"
    (answer,) = tool_messages(server.requests[1]).values()  # only the first round so far
    assert "unknown tool 'delete_repository'" in answer and "read_file" in answer
    trace = traces(repo)[0]
    assert trace["error_counts"] == {"unknown_tool": 1}
    assert "delete_repository" not in trace["tool_counts"]


def test_paths_that_leave_the_worktree_are_rejected(cli: Any, repo: Path, write_suite: Any, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    steps = [
        openai_reply(
            ("write_file", {"path": "../../escaped.txt", "content": "x"}),
            ("write_file", {"path": str(outside / "absolute.txt"), "content": "x"}),
            ("read_file", {"path": "/etc/hostname"}),
            usage=openai_usage(10, 5),
        ),
        openai_reply(("bash", {"command": f"ln -s {outside} link"}), usage=openai_usage(10, 5)),
        openai_reply(
            ("write_file", {"path": "link/planted.txt", "content": "x"}),
            ("read_file", {"path": "link/secret.txt"}),
            ("edit_file", {"path": "link/secret.txt", "old_string": "top", "new_string": "no"}),
            usage=openai_usage(10, 5),
        ),
        openai_reply(("finish", {"status": "failure", "summary": "cannot"}), usage=openai_usage(10, 5)),
    ]
    result, server = eval_one(cli, repo, write_suite, steps)
    attempt = only_attempt(result)
    assert (attempt["outcome"], attempt["claimed"]) == ("fail", False)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"
    answers = list(tool_messages(server.requests[3]).values())  # the whole history
    escapes = [a for a in answers if "is outside the worktree" in a]
    assert len(escapes) == 6
    assert not any("top secret" in a for a in answers)
    assert traces(repo)[0]["error_counts"] == {"tool_error": 6}


def test_context_is_compacted_before_the_window_fills(cli: Any, repo: Path, write_suite: Any) -> None:
    window = 4096
    write_user_config(f"[agents.builtin]\ncontext_window = {window}\ntool_output_bytes = 3000\n")

    def model(request: Request) -> Reply:
        tokens = request.raw_size // 4  # this "tokenizer" counts 4 bytes of request as one token
        if tokens > window:
            return openai_error(400, f"maximum context length is {window} tokens", "context_length_exceeded")
        turn = turn_index(request)
        call = ("bash", {"command": "seq 1 5000"}) if turn < 8 else WRITE_HELLO if turn == 8 else FINISH_OK
        return openai_reply(call, usage=openai_usage(tokens, 20))

    result, server = eval_one(cli, repo, write_suite, model)
    assert only_attempt(result)["outcome"] == "pass"
    assert all(r.raw_size // 4 <= window for r in server.requests)
    last = tool_messages(server.requests[-1])
    assert any("elided to fit the context window" in content for content in last.values())
    trace = traces(repo)[0]
    assert "context_overflow" not in trace["error_counts"]
    assert trace["turns"] == 10 and trace["repeated_tool_calls"] == 7
    # The window really was the constraint: eight raw outputs alone would not have fit.
    assert sum(len(c) for c in last.values()) < 8 * 3000


def test_context_overflow_reported_by_the_provider_is_recovered(cli: Any, repo: Path, write_suite: Any) -> None:
    # The agent believes the window is large (the default); the server knows better.
    write_user_config("[agents.builtin]\ntool_output_bytes = 3000\n")
    limit = 3000

    def model(request: Request) -> Reply:
        tokens = request.raw_size // 4
        if tokens > limit:
            return openai_error(400, "This model's maximum context length is 3000 tokens.")
        turn = turn_index(request)
        call = ("bash", {"command": "seq 1 3000"}) if turn < 6 else WRITE_HELLO if turn == 6 else FINISH_OK
        return openai_reply(call, usage=openai_usage(tokens, 20))

    result, server = eval_one(cli, repo, write_suite, model)
    assert only_attempt(result)["outcome"] == "pass"
    overflows = sum(1 for r in server.requests if r.raw_size // 4 > limit)
    assert overflows >= 1
    assert traces(repo)[0]["error_counts"] == {"context_overflow": overflows}


def test_unrecoverable_context_overflow_ends_without_a_claim(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    suite = one_task_suite(write_suite)
    steps = [anthropic_error(400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum")]
    with ScriptedProvider(steps) as server:
        result = run_eval(cli, repo, suite, "--model", "anthropic/claude-haiku-4-5", "--base-url", server.anthropic_url)
    attempt = only_attempt(result)
    assert (attempt["outcome"], attempt["claimed"]) == ("fail", None)
    assert "context window exhausted" in attempt["reason"]
    assert traces(repo)[0]["error_counts"] == {"context_overflow": 1}


def test_turn_budget_and_repeated_calls(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [openai_reply(("list_files", {}), usage=openai_usage(10, 5)) for _ in range(5)]
    result, server = eval_one(cli, repo, write_suite, steps, "--max-turns", "3")
    attempt = only_attempt(result)
    assert (attempt["outcome"], attempt["claimed"]) == ("fail", None)
    assert "turn budget of 3 model calls exhausted" in attempt["reason"]
    trace = traces(repo)[0]
    assert trace["turns"] == 3 and trace["repeated_tool_calls"] == 2 and trace["tool_counts"] == {"list_files": 3}
    assert len(server.requests) == 3


def test_token_budget(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [openai_reply(("list_files", {"depth": n}), usage=openai_usage(100, 20)) for n in range(1, 6)]
    result, _ = eval_one(cli, repo, write_suite, steps, "--max-tokens", "250")
    attempt = only_attempt(result)
    assert attempt["claimed"] is None and "token budget of 250 tokens exhausted (360)" in attempt["reason"]
    assert attempt["tokens"]["input"] == 300 and attempt["turns"] == 3


@pytest.mark.slow
def test_bash_is_bounded_by_the_attempt_deadline(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [openai_reply(("bash", {"command": "sleep 60", "timeout_secs": 600}), usage=openai_usage(10, 5))]
    result, _ = eval_one(cli, repo, write_suite, steps, timeout_secs=2)
    assert only_attempt(result)["outcome"] == "timeout"  # not a 60 s sleep ended by its own 600 s limit


def test_replies_without_tool_calls_are_nudged_then_given_up(cli: Any, repo: Path, write_suite: Any) -> None:
    steps = [openai_reply(text="I think it is done.", usage=openai_usage(10, 5)) for _ in range(3)]
    result, server = eval_one(cli, repo, write_suite, steps)
    attempt = only_attempt(result)
    assert attempt["claimed"] is None and "3 times without a tool call" in attempt["reason"]
    assert server.requests[1].body["messages"][-1]["role"] == "user"
    assert "call finish" in server.requests[1].body["messages"][-1]["content"]


def test_tools_work_and_traces_hold_no_content(cli: Any, repo: Path, write_suite: Any) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def greet():\n    return 'hi'\n\n\ndef other():\n    return 'hi'\n")
    from tests.conftest import git

    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "app")
    steps = [
        openai_reply(("list_files", {"path": "."}), ("search", {"pattern": r"def \w+", "glob": "*.py"})),
        openai_reply(
            ("edit_file", {"path": "src/app.py", "old_string": "return 'hi'", "new_string": "return 'hello'"})
        ),
        openai_reply(("read_file", {"path": "src/app.py", "start_line": 2, "end_line": 2}), WRITE_HELLO),
        openai_reply(("bash", {"command": "echo to-stderr >&2; cat worktrial-hello.txt; exit 3"})),
        openai_reply(FINISH_OK),
    ]
    result, server = eval_one(cli, repo, write_suite, steps)
    attempt = only_attempt(result)
    assert attempt["outcome"] == "pass"
    listing, found = tool_messages(server.requests[1]).values()
    assert "src/" in listing and "src/app.py" in listing and ".git/" not in listing
    assert "src/app.py:1: def greet():" in found and "src/app.py:5: def other():" in found
    *_, edit = tool_messages(server.requests[2]).values()
    assert "occurs 2 times" in edit
    *_, read, _ = tool_messages(server.requests[3]).values()
    assert "lines 2-2 of 6" in read and "return 'hi'" in read
    *_, shell = tool_messages(server.requests[4]).values()
    assert shell.startswith("exit code 3") and "to-stderr" in shell and "Hello, worktrial!" in shell
    trace = traces(repo)[0]
    # No usage was reported by this server: tokens and cost stay unknown, and the trace says why.
    assert trace["tokens"]["input"] is None and trace["cost_usd"] is None
    assert trace["notes"] == ["the provider reported no usage for 5 model call(s)"]
    assert trace["error_counts"] == {"tool_error": 1}
    text = json.dumps(trace)
    for fragment in ("Hello, worktrial", "to-stderr", "def greet", "repository root", "worktrial-hello.txt"):
        assert fragment not in text

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        return {k for v in value for k in keys(v)} if isinstance(value, list) else set()

    # tokens.output is a count; everything else must avoid the names that would carry transcript content.
    assert not keys({k: v for k, v in trace.items() if k != "tokens"}) & FORBIDDEN_KEYS


def test_python_api_runs_the_builtin_agent(repo: Path, write_suite: Any) -> None:
    suite = one_task_suite(write_suite)
    steps = [openai_reply(WRITE_HELLO, usage=openai_usage(10, 5)), openai_reply(FINISH_OK, usage=openai_usage(10, 5))]
    with ScriptedProvider(steps) as server:
        result = run_suite(
            suite,
            RunOptions(
                model="openai-compatible/api",
                base_url=server.openai_url,
                workspace=repo,
                agent_settings={"max_turns": 4},
            ),
        )
    assert result.envelope.report.overall.passed_runs == 1
    assert result.envelope.agent["max_turns"] == 4


def test_an_interrupted_run_stops_the_loop_before_the_next_call(tmp_path: Path) -> None:
    from worktrial.agents.base import AgentContext, AgentOptions
    from worktrial.agents.builtin import BuiltinAgent
    from worktrial.isolation import proc
    from worktrial.model.suite import Task

    worktree = tmp_path / "wt"
    worktree.mkdir()
    task = Task.model_validate({"id": "t", "prompt": "do it", "verify_commands": ["true"]})
    steps = [openai_reply(("list_files", {}), usage=openai_usage(10, 5)) for _ in range(5)]
    with ScriptedProvider(steps) as server:
        agent = BuiltinAgent(AgentOptions(model="openai-compatible/m", base_url=server.openai_url))
        scope = proc.ProcessScope()
        ctx = AgentContext(task, 1, worktree, time.monotonic() + 60, {}, tmp_path, scope)
        scope.stopping.set()
        result = agent.run(ctx)
    assert result.claimed is None and result.reason == "run interrupted"
    assert server.requests == []
