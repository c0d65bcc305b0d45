"""The --agent-cmd preflight refuses a missing program only when it knows for certain which program the shell runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.agents.base import AgentOptions
from worktrial.agents.command_line import command_program
from worktrial.agents.simple import CommandAgent
from worktrial.errors import BadInputError

# The two commands of issue 24 that were refused with "'rev-parse' is not installed" and "'-n' is not installed".
ASSIGNMENTS_THEN_AGENT = "u=/x; p=$(git rev-parse --git-dir); my-agent"
SUBSTITUTED_PREFIX = "VAR=$(sed -n 1p /dev/null) agent"


@pytest.fixture
def agents_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my-agent`` and ``agent``: real programs on PATH that solve the test task (write done.txt)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("my-agent", "agent"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\necho done > done.txt\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return bin_dir


@pytest.mark.parametrize(
    ("cmd", "program"),
    [
        ("no-such-binary --flag", "no-such-binary"),
        ("A=1 B='x y' my-agent --go", "my-agent"),
        ("my-agent > log 2>&1", "my-agent"),
        ("my-agent --go && echo ok", "my-agent"),
        ("my-agent | tee log", "my-agent"),
        ("my-agent # a comment", "my-agent"),
        ("/opt/agent/bin/run -x", "/opt/agent/bin/run"),
    ],
)
def test_the_program_of_a_plain_command_is_known(cmd: str, program: str) -> None:
    assert command_program(cmd) == program


@pytest.mark.parametrize(
    "cmd",
    [
        ASSIGNMENTS_THEN_AGENT,
        SUBSTITUTED_PREFIX,
        "a=`pwd` agent",
        "missing-tool || agent",
        "missing-tool; agent",
        "agent &",
        "(cd sub && agent)",
        "{ agent; }",
        "f() { agent; }; f",
        "PATH=/opt/bin:$PATH agent",
        "2>err agent",
        "$AGENT --go",
        "cd sub && agent",
        "exec agent",
        "agent 'unclosed",
        "agent \\\n --go",
    ],
)
def test_what_the_shell_decides_is_not_guessed(cmd: str) -> None:
    assert command_program(cmd) is None


@pytest.mark.parametrize("cmd", [ASSIGNMENTS_THEN_AGENT, SUBSTITUTED_PREFIX, "missing-tool || agent"])
def test_the_preflight_accepts_valid_shell(cmd: str, agents_on_path: Path) -> None:
    CommandAgent(AgentOptions(agent_cmd=cmd)).preflight()


def test_the_preflight_still_refuses_a_missing_program(agents_on_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^--agent-cmd: 'no-such-binary' is not installed or not on PATH"):
        CommandAgent(AgentOptions(agent_cmd="no-such-binary --flag")).preflight()


@pytest.mark.parametrize("cmd", [ASSIGNMENTS_THEN_AGENT, SUBSTITUTED_PREFIX])
def test_eval_runs_the_commands_it_used_to_refuse(cmd: str, cli, repo: Path, write_suite, agents_on_path) -> None:
    suite = write_suite([task()])
    args = ["eval", "--suite", str(suite), "--trust", "--sandbox", "off", "--format", "json", "-q", "--agent-cmd", cmd]
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    [attempt] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass", attempt
