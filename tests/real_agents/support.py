"""Shared pieces of the real-CLI end-to-end tests: the pinned tools, a user's home of its own, what was served."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import alive_with_env, task
from tests.real_agents.install import Tool, tools
from worktrial.model.records import Tokens

MARKER_VAR = "WORKTRIAL_REAL_CLI_TEST"
"""Set to a fresh uuid per test and inherited by every process the run starts: how "no process left" finds
this test's processes and never another test run's, though all run the same CLIs from the same cache."""
TOOLS = tools()  # read at import: the tests change $HOME, under which the cache lies by default
SOLVE = "mkdir -p notes && echo hi > notes/hello.txt"
TASK = task(
    "hello",
    prompt="Create notes/hello.txt containing the line hi.",
    timeout_secs=240,
    verify_commands=["grep -qx hi notes/hello.txt"],
)


@dataclass
class Served:
    """What the scripted server answered, summed: the figures the envelope must show."""

    tokens: Tokens = field(default_factory=Tokens)
    calls: int = 0
    models: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, model: str, tokens: Tokens) -> None:
        with self.lock:
            self.tokens = self.tokens.add(tokens)
            self.calls += 1
            self.models.append(model)


def installed(name: str) -> Tool:
    tool = TOOLS[name]
    if not tool.installed:
        pytest.fail(f"{tool.package} {tool.version} is not installed in {tool.home}; run `make agents`")
    return tool


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's process marker; at teardown, no process carrying it may be left."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARKER_VAR, value)
    yield value
    assert_nothing_left(value)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str) -> Path:
    """A user's home of its own, so the test neither reads nor writes the real user's CLI settings."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    config_dirs = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
    keys = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY", "GEMINI_API_KEY")
    urls = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_API_KEY")
    for var in (*config_dirs, *keys, *urls, "XDG_STATE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("IS_SANDBOX", "1")  # Claude Code as root needs it for bypassPermissions
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    return path


def on_path(monkeypatch: pytest.MonkeyPatch, tool: Tool) -> None:
    monkeypatch.setenv("PATH", f"{tool.executable.parent}{os.pathsep}{os.environ['PATH']}")


def evaluate(
    cli: Callable[..., Result], repo: Path, suite: Path, *args: str, network: str | None = "host"
) -> tuple[Result, dict[str, Any] | None]:
    # The scripted model servers listen on this host's loopback: the attempts share the host's network to reach
    # them, as a user with a model server on localhost does (a CLI that is not routed through the model gateway
    # could not reach them from a network of its own). ``network=None``: the default sandbox.
    flags = ["--network", network] if network else []
    argv = ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *flags, *args]
    result = cli(argv, cwd=repo)
    envelope = json.loads(result.stdout) if result.exit_code == 0 else None
    return result, envelope


def only_attempt(envelope: dict[str, Any]) -> dict[str, Any]:
    attempt: dict[str, Any] = envelope["report"]["tasks"][0]["attempts"][0]
    return attempt


def assert_nothing_left(value: str | None = None) -> None:
    """No process started by this test (it carries the test's marker) outlives the run. Killed processes get a
    deadline to finish exiting: on a loaded machine the kernel may take a moment to tear a SIGKILLed tree down."""
    value = value or os.environ[MARKER_VAR]
    deadline = time.monotonic() + 30
    while alive_with_env(MARKER_VAR, value) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive_with_env(MARKER_VAR, value) == []


def codex_model_running(served: Served, command: str) -> Callable[[Any], Any]:
    """The Responses API as Codex speaks it: ``exec_command`` of ``command`` once, polled with ``write_stdin`` while
    Codex says it still runs (its exec returns after ``yield_time_ms`` however loaded the machine), then a final
    message; every answer's usage counted in ``served``."""
    from tests.cli_servers import (
        Plain,
        Request,
        has_tool_result,
        responses_function_call,
        responses_message,
        responses_stream,
        responses_usage,
        still_running,
    )

    def respond(request: Request) -> Any:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/responses"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        model = str(request.body.get("model"))
        items = request.body.get("input", [])
        if not has_tool_result(items):
            served.add(model, Tokens(input=900, cached_input=300, output=60, reasoning=20, cache_creation=0))
            call = responses_function_call("exec_command", {"cmd": command, "yield_time_ms": 120_000})
            return responses_stream(model, [call], responses_usage(900, 300, 60, 20))
        served.add(model, Tokens(input=1100, cached_input=800, output=15, reasoning=5, cache_creation=0))
        if (session := still_running(items)) is not None:
            poll = responses_function_call("write_stdin", {"session_id": session, "chars": "", "yield_time_ms": 30_000})
            return responses_stream(model, [poll], responses_usage(1100, 800, 15, 5))
        return responses_stream(model, [responses_message("Done.")], responses_usage(1100, 800, 15, 5))

    return respond
