"""The command-agent contract: its environment, and the usage file (each key judged on its own, never an error)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import Result

from tests.conftest import task
from tests.fakes import share_with_sandbox
from worktrial.agents.simple import read_usage_file


def test_valid_usage_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text(
        json.dumps(
            {
                "input_tokens": 10,
                "output_tokens": 2,
                "cached_input_tokens": 4,
                "cost_usd": 0,
                "turns": 3,
                "tool_calls": {"edit": 2},
                "errors": {"timeout": 1},
                "unknown_key": "ignored",
            }
        )
    )
    usage = read_usage_file(path)
    assert (usage.tokens.input, usage.tokens.output, usage.tokens.cached_input) == (10, 2, 4)
    assert (usage.cost_usd, usage.turns, usage.tool_counts, usage.error_counts) == (0.0, 3, {"edit": 2}, {"timeout": 1})
    assert usage.notes == []


def test_bad_values_are_dropped_one_by_one(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text(
        '{"input_tokens": -1, "output_tokens": 5, "cost_usd": "1.0", "turns": true,'
        ' "tool_calls": {"edit": 1.5}, "errors": [], "reasoning_tokens": 7}'
    )
    usage = read_usage_file(path)
    assert (usage.tokens.input, usage.tokens.output, usage.tokens.reasoning) == (None, 5, 7)
    assert usage.cost_usd is None and usage.turns is None and usage.tool_counts == {} and usage.error_counts == {}
    assert usage.notes == [
        "usage file: input_tokens must be a non-negative integer; ignored",
        "usage file: cost_usd must be a non-negative number; ignored",
        "usage file: turns must be a non-negative integer; ignored",
        "usage file: tool_calls must be an object of name -> non-negative integer; ignored",
        "usage file: errors must be an object of name -> non-negative integer; ignored",
    ]


def test_unreadable_shapes_become_notes(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    assert read_usage_file(path).notes == []
    path.write_text("[1, 2]")
    assert read_usage_file(path).notes == ["usage file must hold a JSON object; ignored"]
    path.write_bytes(b"\xff\xfe")
    assert read_usage_file(path).notes == ["usage file is not valid JSON: UnicodeDecodeError"]
    path.write_text('{"cost_usd": Infinity}')
    assert read_usage_file(path).notes == ["usage file: cost_usd must be a non-negative number; ignored"]


def test_command_and_custom_agents_see_the_same_worktrial_variables(
    cli: Callable[..., Result], repo: Path, write_suite: Any, tmp_path: Path
) -> None:
    """One definition of the command-agent environment serves ``--agent-cmd`` and ``[agents.NAME]`` alike."""
    dump = "env | grep '^WORKTRIAL_' | grep -v '^WORKTRIAL_PROC' | cut -d= -f1 | sort > {out}"
    out = tmp_path / "out"
    out.mkdir()
    share_with_sandbox(out)  # the agents write their environment where the test can read it
    (repo / "worktrial.toml").write_text(f'[agents.mine]\ncommand = "{dump.format(out=out / "custom")}"\n')
    suite = write_suite([task("t", verify=["true"])])
    for args in (["--agent", "mine"], ["--agent-cmd", dump.format(out=out / "command")]):
        result = cli(["eval", "--suite", str(suite), *args, "--trust", "--trust-project", "-q"], cwd=repo)
        assert result.exit_code == 0, result.output
    names = (out / "command").read_text().split()
    assert names == (out / "custom").read_text().split()
    expected = ["PROMPT", "TASK_ID", "ATTEMPT", "WORKTREE", "SCRATCH", "USAGE_FILE"]
    assert {f"WORKTRIAL_{name}" for name in expected} <= set(names)


def test_a_number_too_long_to_read_is_a_note_and_never_a_retried_crash(
    tmp_path: Path, cli: Callable[..., Result], repo: Path, write_suite: Any
) -> None:
    """A 5,000-digit integer made the reader crash, which counted as infrastructure: --retry-errors then re-ran the
    attempt, so an agent could re-roll every miss by writing one. Now it is a note on an attempt that stands."""
    path = tmp_path / "usage.json"
    path.write_text('{"input_tokens": ' + "9" * 5000 + "}")
    usage = read_usage_file(path)
    assert usage.tokens.input is None and usage.notes == ["usage file holds a number too long to read; ignored"]
    agent = f'printf \'{{"input_tokens": {"9" * 5000}}}\' > "$WORKTRIAL_USAGE_FILE"; exit 1'
    suite = write_suite([task("t")])
    result = cli(
        ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--retry-errors", "2", "--format", "json"],
        cwd=repo,
    )
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "fail" and attempt["retries"] == 0, attempt
