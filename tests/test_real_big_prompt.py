"""A ~1 MiB prompt through the real Codex, Gemini, Qwen Code and OpenCode CLIs: each takes it on stdin, and the
model receives all of it.

As an argument or in ``WORKTRIAL_PROMPT`` such a prompt fails every attempt with "Argument list too long"
(Linux allows 128 KiB per string). The scripted servers of the other real-CLI tests answer; this test checks
that the last line of the prompt reached the model and that the attempt passed. The prompt stays just under
1,048,576 characters: Codex itself refuses longer input ("Input exceeds the maximum length").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.cli_servers import CliServer
from tests.real_agents.install import Tool
from tests.real_agents.support import (
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
from tests.test_real_agents import codex, codex_model
from tests.test_real_chat_agents import chat_model, qwen
from tests.test_real_gemini import gemini, gemini_model

pytestmark = [pytest.mark.agents, pytest.mark.slow]
__all__ = ["codex", "gemini", "home", "marker", "qwen"]  # fixtures used by name

END = "The last line of a very long prompt: 5d1e0c7a."


def big_task() -> dict[str, object]:
    filler = "Background the agent may skim: the repository has a notes directory.\n" * 15_000
    prompt = f"{TASK['prompt']}\n{filler}{END}\n"
    assert 1_000_000 < len(prompt) < 1024 * 1024
    return {**TASK, "prompt": prompt}


def _opencode_config(home: Path, url: str) -> None:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{url}/v1", "apiKey": "sk-opencode"},
                "models": {"coder-1": {"name": "coder-1"}},
            }
        },
        "model": "scripted/coder-1",
    }
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))


@pytest.mark.parametrize("agent", ["codex", "gemini-cli", "qwen-code", "opencode"])
def test_a_prompt_of_almost_1mib_reaches_the_model(
    agent: str,
    request: pytest.FixtureRequest,
    home: Path,
    cli: Callable[..., Result],
    repo: Path,
    write_suite,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served = Served()
    args: list[str] = []
    if agent == "codex":
        tool: Tool = request.getfixturevalue("codex")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test")
        model = codex_model(served)
        args, suffix = ["--model", "openai/gpt-5"], "/v1"
    elif agent == "gemini-cli":
        tool = request.getfixturevalue("gemini")
        model = gemini_model(served)
        args, suffix = ["--model", "gemini/gemini-2.5-pro"], ""
    elif agent == "qwen-code":
        tool = request.getfixturevalue("qwen")
        model = chat_model(served, "run_shell_command")
        args, suffix = ["--model", "openai/coder-1"], "/v1"
    else:
        tool = installed("opencode")
        on_path(monkeypatch, tool)
        model = chat_model(served, "bash", side=Served())
    with CliServer(model) as server:
        if agent == "opencode":
            _opencode_config(home, server.url)
        else:
            args += ["--base-url", server.url + suffix]
        result, envelope = evaluate(cli, repo, write_suite([big_task()]), "--agent", agent, *args)
        # The agent's own model calls (a title call of OpenCode's carries no tools and only a summary).
        bodies = [json.dumps(r.body) for r in server.requests if r.method == "POST"]
        bodies = [body for body in bodies if agent != "opencode" or '"tools"' in body]
    assert envelope is not None, result.output
    attempt = only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert bodies and all(END in body for body in bodies), "every model call carried the whole prompt"
    assert_nothing_left()
