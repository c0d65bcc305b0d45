"""The live progress view under a real pseudo-terminal: elapsed time and phase stay true while an attempt runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import SuiteWriter, task

DEADLINE_SECS = 120


def _eval_on_a_terminal(repo: Path, suite: Path, agent_cmd: str, **env: str) -> pexpect.spawn[str]:
    """``worktrial eval`` of a command agent under a real 120x40 pseudo-terminal."""
    argv = ["-c", "from worktrial.cli import main; main()", "eval", "--suite", str(suite), "--trust"]
    return pexpect.spawn(
        sys.executable,
        [*argv, "--agent-cmd", agent_cmd],
        cwd=str(repo),
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40", **env},
        encoding="utf-8",
        timeout=DEADLINE_SECS,
        dimensions=(40, 120),
    )


@pytest.mark.pty
@pytest.mark.slow
def test_running_attempt_shows_phase_and_growing_elapsed(repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite([task("slow-task", verify_commands=["true"], setup_commands=["true"])])
    child = _eval_on_a_terminal(repo, suite, "sleep 4")
    try:
        child.expect(r"slow-task #1\s+agent\s+1s")
        child.expect(r"slow-task #1\s+agent\s+2s")
        child.expect(r"ETA")
        child.expect(r"1 pass")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_eta_comes_from_observed_durations() -> None:
    from worktrial.cli.progress import ProgressReporter
    from worktrial.model.records import AttemptRecord

    now = [100.0]
    reporter = ProgressReporter(quiet=True, clock=lambda: now[0])
    reporter.begin("run", to_run=4, done=2)
    assert reporter.done == 2 and reporter.total == 6
    assert reporter.eta_secs() is None  # nothing observed yet: no guess
    reporter.start("a", 1)
    now[0] += 10
    record = AttemptRecord(
        task_id="a",
        attempt=1,
        outcome="pass",
        claimed=True,
        verified=True,
        duration_secs=10.0,
        agent_secs=9.0,
        verify_secs=1.0,
    )
    reporter.attempt(record)
    assert reporter.done == 3
    assert reporter.eta_secs() == pytest.approx(30.0)  # three more at 10 s each, one at a time


@pytest.mark.slow
@pytest.mark.pty
def test_report_on_a_terminal_is_drawn_as_tables_and_piped_is_markdown(repo: Path, write_suite: SuiteWriter) -> None:
    import json
    import subprocess

    suite = write_suite([task("t1")])
    code = "from worktrial.cli import main; main()"
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "eval",
            "--suite",
            str(suite),
            "--trust",
            "-q",
            "--agent",
            "oracle",
            "--format",
            "json",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    run_id = json.loads(made.stdout)["run"]["id"]
    piped = subprocess.run([sys.executable, "-c", code, "report", run_id], cwd=repo, capture_output=True, text=True)
    assert "|---|" in piped.stdout
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    child = pexpect.spawn(
        sys.executable,
        ["-c", code, "report", run_id],
        cwd=str(repo),
        env=env,
        encoding="utf-8",
        timeout=DEADLINE_SECS,
        dimensions=(60, 120),
    )
    try:
        child.expect(pexpect.EOF)
        screen = str(child.before)
    finally:
        child.close(force=True)
    assert "|---|" not in screen and "─" * 10 in screen and "t1" in screen
    assert "sandbox" in screen and ("bubblewrap" in screen or "none" in screen)  # what contained the attempts


@pytest.mark.pty
@pytest.mark.slow
def test_ctrl_c_on_a_terminal_says_stopping_at_once_and_leaves_nothing(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    suite = write_suite([task("slow-task", timeout_secs=300, verify_commands=["true"])])
    child = _eval_on_a_terminal(repo, suite, "sleep 300", TMPDIR=str(tmp))
    try:
        child.expect(r"slow-task #1\s+agent")
        child.sendintr()
        child.expect("worktrial: stopping… ending the running attempts")
        child.expect("interrupted")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130
    assert list(tmp.iterdir()) == []  # no worktree, slot or scratch directory left to delete by hand
