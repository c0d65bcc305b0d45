"""``worktrial validate`` lints a suite as ``check`` does, without running anything."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import task


def test_validate_refuses_shell_syntax_in_a_plain_command(cli, tmp_path: Path, write_suite) -> None:
    # Split on whitespace, this runs `sleep` with the arguments "25;", "touch" and "b", and fails at run time.
    suite = write_suite([task(timeout_secs=120, verify_commands=["sleep 25; touch b"])])
    result = cli(["validate", str(suite)], cwd=tmp_path)
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith(f"{suite}: 1 problem found — 1 task")
    assert "## Lints" in result.stdout
    assert "`$.tasks[0].verify_commands[0]`: plain string command contains shell syntax" in result.stdout
    assert '— write it as `{"sh": "sleep 25; touch b"}`' in result.stdout
    assert "Traceback" not in result.output


def test_validate_prints_warnings_and_still_passes(cli, tmp_path: Path, write_suite) -> None:
    suite = write_suite([task(timeout_secs=120, verify_commands=["python3 check.py"])])
    result = cli(["validate", str(suite)], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{suite}: ok — 1 task, 1 attempt, suite file sha256 ")
    assert "1 warning (see Lints)" in result.stdout
    line = "- **warning** `$.tasks[0].verify_commands[0]`: its verdict is the exit status of code the agent controls"
    assert line in result.stdout


def test_a_clean_suite_is_one_line(cli, tmp_path: Path, write_suite) -> None:
    suite = write_suite([task(timeout_secs=120, verify_commands=[{"sh": "test -f done.txt"}])])
    result = cli(["validate", str(suite)], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and ": ok — 1 task" in result.stdout
