"""``--trajectories`` with the real CLIs (Claude Code, Codex, Gemini CLI) through the model gateway against
scripted loopback servers: the stored trajectory's main conversation is the scripted one (the task, the one shell
command with its output, the final answer), the CLI's side calls are side conversations, the file is valid ATIF,
and secrets planted in the prompt, in the tool's output and in the agent's environment (the gateway's token, a
--pass-env value) never appear in it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.atif_check import assert_atif
from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    anthropic_plain,
    anthropic_stream,
    gemini_has_function_response,
    gemini_stream,
    gemini_usage,
    has_tool_result,
    responses_function_call,
    responses_message,
    responses_stream,
    responses_usage,
)
from tests.real_agents.support import (
    TASK,
    assert_nothing_left,
    evaluate,
    home,
    installed,
    marker,
    on_path,
    only_attempt,
)

pytestmark = [pytest.mark.agents, pytest.mark.slow]

PROMPT_SECRET = "sk-ant-api03-PLANTEDinTHEprompt0123456789"
PASSED_SECRET = "planted-pass-env-value-0123456789"
DONE = "Created notes/hello.txt."
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}}


def command(key_var: str) -> str:
    """Solves the task and prints what must never be stored: the gateway's token and a --pass-env value."""
    return f"mkdir -p notes && echo hi > notes/hello.txt && cat notes/hello.txt; echo ${key_var}; echo $WT_PLANTED"


def claude_model(cmd: str) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/v1/messages" not in request.path:
            return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
        if "count_tokens" in request.path:
            return Plain(200, {"input_tokens": 10})
        body = request.body
        model = str(body.get("model"))
        usage = {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 300}
        if "Bash" not in {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}:
            side = [{"type": "text", "text": "Notes"}]
            return (
                anthropic_stream(model, side, usage, "end_turn")
                if body.get("stream")
                else anthropic_plain(model, "Notes", usage)
            )
        if not has_tool_result(body.get("messages", [])):
            call = {"type": "tool_use", "id": "toolu_solve", "name": "Bash", "input": {"command": cmd}}
            return anthropic_stream(model, [{"type": "text", "text": "I will create it."}, call], usage, "tool_use")
        return anthropic_stream(model, [{"type": "text", "text": DONE}], usage, "end_turn")

    return respond


def codex_model(cmd: str) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/responses"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        model = str(request.body.get("model"))
        if not has_tool_result(request.body.get("input", [])):
            call = responses_function_call("exec_command", {"cmd": cmd})
            return responses_stream(model, [call], responses_usage(900, 300, 60, 20))
        return responses_stream(model, [responses_message(DONE)], responses_usage(1100, 800, 15, 5))

    return respond


def gemini_model(cmd: str) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/models/" not in request.path:
            return Plain(404, {"error": {"code": 404, "message": "no such route", "status": "NOT_FOUND"}})
        model = request.path.split("/models/", 1)[1].split(":", 1)[0]
        if not gemini_has_function_response(request.body.get("contents", [])):
            call = {"functionCall": {"name": "run_shell_command", "args": {"command": cmd, "description": "solve"}}}
            return gemini_stream(model, [call], gemini_usage(700, 45, cached=200, thoughts=15))
        return gemini_stream(model, [{"text": DONE}], gemini_usage(900, 8, cached=600, thoughts=4))

    return respond


@dataclass(frozen=True)
class Cli:
    route: str
    key_var: str
    key: str
    model: Callable[[str], Callable[[Request], Sse | Plain]]
    suffix: str
    """What the base URL needs after the server's root."""
    shell: str
    """The name of the CLI's shell tool."""


CLIS = {
    "claude-code": Cli(
        "anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY", "sk-ant-key-0000000000", claude_model, "", "Bash"
    ),
    "codex": Cli("openai/gpt-5", "OPENAI_API_KEY", "sk-openai-key-000000000000", codex_model, "/v1", "exec_command"),
    "gemini-cli": Cli(
        "gemini/gemini-2.5-pro", "GEMINI_API_KEY", "gemini-key-0000000000", gemini_model, "", "run_shell_command"
    ),
}


@pytest.mark.parametrize("preset", list(CLIS))
def test_a_real_clis_trajectory_is_its_scripted_conversation_without_secrets(
    preset: str, home: Path, cli: Callable[..., Result], repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = CLIS[preset]
    route, key_var, key, model, suffix, shell = spec.route, spec.key_var, spec.key, spec.model, spec.suffix, spec.shell
    on_path(monkeypatch, installed(preset))
    if preset == "gemini-cli":
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    monkeypatch.setenv(key_var, key)
    monkeypatch.setenv("WT_PLANTED", PASSED_SECRET)
    cmd = command("CODEX_API_KEY" if preset == "codex" else key_var)
    prompt = f"{TASK['prompt']} (The deploy key is {PROMPT_SECRET}; ignore it.)"
    with CliServer(model(cmd)) as server:
        result, envelope = evaluate(
            cli, repo, write_suite([dict(TASK, prompt=prompt)]), "--agent", preset, "--model", route,
            "--base-url", server.url + suffix, "--pass-env", "WT_PLANTED", "--trajectories",
        )  # fmt: skip
        tokens_sent = {r.headers.get("authorization") or r.headers.get("x-api-key") for r in server.requests}
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    text = (repo / attempt["trajectory"]["path"]).read_text()
    document = json.loads(text)
    assert_atif(document)
    for secret in (PROMPT_SECRET, PASSED_SECRET, key, "wt-gw-"):
        assert secret not in text, secret
    steps = document["steps"]
    agent_steps = [s for s in steps if s["source"] == "agent"]
    assert len(agent_steps) == 2, [(s["source"], s["message"][:60]) for s in steps]
    solve, done = agent_steps
    (call,) = solve["tool_calls"]
    assert call["function_name"] == shell
    assert cmd in json.dumps(call["arguments"])
    (output,) = solve["observation"]["results"]
    assert output["source_call_id"] == call["tool_call_id"]
    assert "hi" in output["content"] and "[REDACTED]" in output["content"], output
    assert done["message"] == DONE and not done.get("tool_calls")
    assert all(s["metrics"]["prompt_tokens"] > 0 and s["extra"]["status"] == 200 for s in agent_steps)
    task_step = next(s for s in steps if s["source"] == "user" and "notes/hello.txt" in s["message"])
    assert "[REDACTED]" in task_step["message"]
    assert steps.index(task_step) < steps.index(solve) < steps.index(done)
    assert document["agent"]["name"] == preset and document["agent"]["version"] != "unknown"
    # The trace and the envelope hold no transcript: the file is only named by the record.
    trace = (repo / attempt["trace"]).read_text()
    assert "notes/hello.txt" not in trace and "notes/hello.txt" not in json.dumps(envelope)
    assert tokens_sent  # the server was reached through the gateway
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest
