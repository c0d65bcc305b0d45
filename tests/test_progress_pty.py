"""The live progress view under a real pseudo-terminal: elapsed time and phase stay true while an attempt runs."""

from __future__ import annotations

import os
import re
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


def _on_a_terminal(repo: Path, args: list[str], columns: int) -> pexpect.spawn[str]:
    """A worktrial command under a real pseudo-terminal ``columns`` wide."""
    return pexpect.spawn(
        sys.executable,
        ["-c", "from worktrial.cli import main; main()", *args],
        cwd=str(repo),
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "40"},
        encoding="utf-8",
        timeout=DEADLINE_SECS,
        dimensions=(40, columns),
    )


def _held(tmp_path: Path) -> tuple[Path, str]:
    """A file whose existence holds a command (``sh -c '... hold ...'``) until the test removes it: the display is
    read while a step is known to be running, never at a guessed moment."""
    hold = tmp_path / "hold"
    hold.touch()
    return hold, f"while [ -e {hold} ]; do sleep 0.05; done"


@pytest.mark.pty
@pytest.mark.slow
def test_check_shows_each_phase_and_the_reruns_with_count_and_eta(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    hold, wait = _held(tmp_path)
    count = tmp_path / "verifications"
    # The oracle's own verification counts 0, the first re-run 1; the second re-run waits until the test lets it go.
    verify = f"test -f done.txt && n=$(cat {count} 2>/dev/null || echo 0) && echo $((n + 1)) > {count} && "
    verify += f'if [ "$n" = 2 ]; then {wait}; fi'
    suite = write_suite([task("fix-pipe-cell-escaping", verify_commands=[{"sh": verify}])])
    child = _on_a_terminal(repo, ["check", str(suite), "--trust", "--repeats", "3", "--sandbox", "off"], 100)
    try:
        child.expect("check 1/3: running the oracle agent on 1 task")
        child.expect("check 2/3: running the nop agent on 1 task")
        child.expect("check 3/3: re-running the verifier of 1 task 3 times on the oracle's result")
        child.expect(r"1/3 · elapsed \d+:\d\d · ETA ~\d+:\d\d")  # one re-run done, the second held
        child.expect(r"fix-pipe-cell-escaping: re-run 2 of 3")
        hold.unlink()
        child.expect(r"3/3 · elapsed \d+:\d\d · ETA ~0:00")
        child.expect("verifier on oracle result")  # the report
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 1  # its findings: the lints name the two files outside the worktree this verifier uses


@pytest.mark.pty
@pytest.mark.slow
def test_at_80_columns_setup_is_named_and_task_ids_are_never_cut(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    hold, wait = _held(tmp_path)
    ids = ["fix-pipe-cell-escaping-in-tables-with-unicode", "fix-pipe-cell-escaping-in-headers-with-unicode"]
    suite = write_suite([task(i) for i in ids], environment={"setup": [{"sh": wait}]})
    args = ["eval", "--suite", str(suite), "--trust", "--agent", "oracle", "--sandbox", "off"]
    child = _on_a_terminal(repo, args, 80)
    try:
        child.expect(r"-with-unicode #1\s+setup\s+\d+s")  # the environment's setup runs: said, not "starting"
        hold.unlink()
        child.expect("## Tasks|Tasks")
        child.expect(pexpect.EOF)
        report = str(child.before)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "…" not in report
    table = "".join(re.findall(r"^ (\S+)", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", report), re.MULTILINE))
    assert all(i in table for i in ids)  # each id whole once its wrapped pieces are joined
