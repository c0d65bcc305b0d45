"""Ctrl-C and SIGTERM: no process and no worktree left behind, partial report, exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import alive_with_marker, task


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_cleans_up(repo: Path, write_suite, tmp_path: Path, sig: signal.Signals) -> None:
    marker = f"wt-int-{uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    suite = write_suite([task("quick"), task("slow", timeout_secs=120), task("slow2", timeout_secs=120)], attempts=1)
    # The marker reaches the sleepers through the environment, so only they carry it in their argv.
    agent = (
        'if [ "$WORKTRIAL_TASK_ID" != quick ]; then setsid python3 -c "import time; time.sleep(300)" "$MARK" & '
        'python3 -c "import time; time.sleep(300)" "$MARK"; fi; touch done.txt'
    )
    env = {**os.environ, "TMPDIR": str(tmp), "WORKTRIAL_TRUST": "1", "MARK": marker}
    harness = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worktrial",
            "eval",
            "--suite",
            str(suite),
            "--agent-cmd",
            agent,
            "--format",
            "json",
            "--jobs",
            "2",
        ],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stored = repo / ".worktrial" / "runs"

    def quick_done() -> bool:
        return any(p.read_text().count("\n") == 1 for p in stored.glob("*/attempts.jsonl"))

    deadline = time.monotonic() + 30
    while (len(alive_with_marker(marker)) < 4 or not quick_done()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(alive_with_marker(marker)) >= 4 and quick_done(), "agents never started"
    harness.send_signal(sig)
    out, err = harness.communicate(timeout=30)
    assert harness.returncode == 130, err.decode()
    assert b"interrupted" in err
    envelope = json.loads(out)
    assert envelope["run"]["complete"] is False
    assert [t["total_runs"] for t in envelope["report"]["tasks"]] == [1, 0, 0], err.decode()
    assert b"worktrial resume " in err
    assert alive_with_marker(marker) == []
    assert list(tmp.iterdir()) == []


def test_second_interrupt_ends_at_once_and_leaves_nothing(repo: Path, write_suite, tmp_path: Path) -> None:
    """An agent that ignores the first Ctrl-C would hold the cleanup; a second one ends the run at once."""
    marker = f"wt-stubborn-{uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    suite = write_suite([task("t", timeout_secs=300)], attempts=1)
    project = str(Path(__file__).resolve().parent.parent)  # so the subprocess can import tests.agents_for_tests
    env = {**os.environ, "TMPDIR": str(tmp), "WORKTRIAL_TRUST": "1", "MARK": marker, "PYTHONPATH": project}
    harness = subprocess.Popen(
        [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent",
         "tests.agents_for_tests:StubbornAgent"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not alive_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive_with_marker(marker), "agent never started its child"
    harness.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert harness.poll() is None, "the stubborn agent should still be holding the first cleanup"
    assert alive_with_marker(marker) == []  # the first Ctrl-C already ended every process
    start = time.monotonic()
    harness.send_signal(signal.SIGINT)
    harness.communicate(timeout=20)
    assert harness.returncode == 130
    assert time.monotonic() - start < 5
    assert alive_with_marker(marker) == []
    assert list(tmp.iterdir()) == []
