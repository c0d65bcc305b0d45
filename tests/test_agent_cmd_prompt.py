"""``--agent-cmd`` splices ``{prompt}`` and ``{prompt_file}`` into its command line, shell-quoted, like custom
agents."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import task
from worktrial.agents.prompt import MAX_ARG_BYTES

pytestmark = pytest.mark.slow  # each test runs real evaluations

# Quotes of both kinds, a command substitution, backticks, a variable, a glob and newlines: any of them would
# change the command, run something or be mangled if the prompt reached the shell unquoted.
HOSTILE = 'Fix it\'s "parser"; $(touch pwned) `touch pwned2` $HOME *\n\nline three\\n {prompt_file}\n'


def _run(cli: Callable[..., Result], repo: Path, suite: Path, agent_cmd: str) -> dict[str, Any]:
    result = cli(
        ["eval", "--suite", str(suite), "--agent-cmd", agent_cmd, "--format", "json", "-q", "--trust"], cwd=repo
    )
    attempt: dict[str, Any] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    return attempt


def _suite_expecting(tmp_path: Path, write_suite, prompt: str, verify: list[Any]) -> Path:
    """A suite whose verifier compares the agent's files with the prompt, shipped as a declared suite file."""
    suite: Path = write_suite([task("t", prompt=prompt, verify_commands=verify)], files=["expected.txt"])
    (suite.parent / "expected.txt").write_bytes(prompt.encode())
    return suite


def test_the_prompt_placeholder_receives_the_real_prompt_quoted(cli, repo: Path, write_suite, tmp_path) -> None:
    verify = [
        {"sh": 'cmp got.txt "$WORKTRIAL_SUITE_DIR/expected.txt"'},
        {"sh": 'cmp from-file.txt "$WORKTRIAL_SUITE_DIR/expected.txt"'},
        {"sh": "test ! -e pwned && test ! -e pwned2"},
        {"sh": "test ! -s stdin.txt"},
    ]
    suite = _suite_expecting(tmp_path, write_suite, HOSTILE, verify)
    agent_cmd = "printf %s {prompt} > got.txt && cp {prompt_file} from-file.txt && cat > stdin.txt"
    attempt = _run(cli, repo, suite, agent_cmd)
    assert (attempt["outcome"], attempt["reason"]) == ("pass", None)


def test_a_prompt_too_long_for_the_command_line_is_one_clear_error(cli, repo, write_suite, tmp_path) -> None:
    prompt = "x" * (MAX_ARG_BYTES + 1)
    verify = [{"sh": 'cmp got.txt "$WORKTRIAL_SUITE_DIR/expected.txt"'}]
    suite = _suite_expecting(tmp_path, write_suite, prompt, verify)
    attempt = _run(cli, repo, suite, "printf %s {prompt} > got.txt")
    assert attempt["outcome"] == "error" and attempt["error_category"] == "prompt_too_long"
    assert "--agent-cmd" in attempt["reason"] and "{prompt_file}" in attempt["reason"]
    assert _run(cli, repo, suite, "cp {prompt_file} got.txt")["outcome"] == "pass"
