"""Ctrl-C, SIGTERM and SIGHUP: no process and no worktree left behind, partial report, exit 130."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SuiteWriter, alive_with_marker, task

# The interpreter itself, not `python3`: a pyenv-style shim runs as several processes that all carry the marker.
PY = shlex.quote(sys.executable)


def stable_count(marker: str, want: int, ready: Callable[[], bool] = lambda: True) -> list[int]:
    """The marked processes once exactly ``want`` of them are alive in two polls in a row (and ``ready()``).

    A fixed count on one poll flakes: a process can be between fork and exec, or a wrapper can still be alive.
    """
    deadline = time.monotonic() + 60
    previous: list[int] = []
    while time.monotonic() < deadline:
        current = sorted(alive_with_marker(marker))
        if len(current) == want and current == previous and ready():
            return current
        previous = current
        time.sleep(0.05)
    raise AssertionError(f"expected {want} live processes marked {marker}, saw {len(previous)}")


def wait_until_none(marker: str) -> None:
    """Every marked process is gone (killed processes may take a moment to be reaped by init)."""
    deadline = time.monotonic() + 30
    while alive_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive_with_marker(marker) == []


def end(harness: subprocess.Popen[bytes], marker: str) -> None:
    """For ``finally``: never leave the harness or its agents running when a test fails half-way."""
    if harness.poll() is None:
        harness.kill()
        harness.communicate(timeout=30)
    for pid in alive_with_marker(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_cleans_up(repo: Path, write_suite: SuiteWriter, tmp_path: Path, sig: signal.Signals) -> None:
    marker = f"wt-int-{uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    suite = write_suite([task("quick"), task("slow", timeout_secs=120), task("slow2", timeout_secs=120)], attempts=1)
    # The marker reaches the sleepers through the environment, so only they carry it in their argv.
    agent = (
        f'if [ "$WORKTRIAL_TASK_ID" != quick ]; then '
        f'env -u WORKTRIAL_PROC_TOKEN setsid {PY} -c "import time; time.sleep(300)" "$MARK" & '
        f'{PY} -c "import time; time.sleep(300)" "$MARK"; fi; touch done.txt'
    )
    env = {**os.environ, "TMPDIR": str(tmp), "WORKTRIAL_TRUST": "1", "MARK": marker}
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd", agent,
            "--format", "json", "--jobs", "2", "--pass-env", "MARK"]  # fmt: skip
    harness = subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stored = repo / ".worktrial" / "runs"

        def quick_done() -> bool:
            return any(p.read_text().count("\n") == 1 for p in stored.glob("*/attempts.jsonl"))

        stable_count(marker, 4, quick_done)  # two slow attempts, each with a sleeper and a setsid'd daemon
        harness.send_signal(sig)
        out, err = harness.communicate(timeout=60)
        assert harness.returncode == 130, err.decode()
        assert b"interrupted" in err
        # Said at once, before the attempts are ended and the report is printed.
        assert b"worktrial: stopping\xe2\x80\xa6 ending the running attempts" in err
        assert err.index(b"worktrial: stopping") < err.index(b"interrupted")
        envelope = json.loads(out)
        assert envelope["run"]["complete"] is False
        assert [t["total_runs"] for t in envelope["report"]["tasks"]] == [1, 0, 0], err.decode()
        assert b"worktrial resume " in err
        assert alive_with_marker(marker) == []
        assert list(tmp.iterdir()) == []
    finally:
        end(harness, marker)


@pytest.mark.slow
def test_second_interrupt_ends_at_once_and_leaves_nothing(repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    """An agent that ignores the first Ctrl-C would hold the cleanup; a second one ends the run at once."""
    marker = f"wt-stubborn-{uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    suite = write_suite([task("t", timeout_secs=300)], attempts=1)
    project = str(Path(__file__).resolve().parent.parent)  # so the subprocess can import tests.agents_for_tests
    path = os.pathsep.join([f"{project}/src", project])
    env = {**os.environ, "TMPDIR": str(tmp), "WORKTRIAL_TRUST": "1", "MARK": marker, "PYTHONPATH": path}
    harness = subprocess.Popen(
        [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent",
         "tests.agents_for_tests:StubbornAgent"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stable_count(marker, 1)
        harness.send_signal(signal.SIGINT)
        # The first Ctrl-C ends every process at once, while the stubborn agent still holds the cleanup.
        wait_until_none(marker)
        assert harness.poll() is None, "the stubborn agent should still be holding the first cleanup"
        harness.send_signal(signal.SIGINT)
        harness.communicate(timeout=60)  # without the second Ctrl-C the agent would hold it for 120 s
        assert harness.returncode == 130
        assert alive_with_marker(marker) == []
        assert list(tmp.iterdir()) == []
    finally:
        end(harness, marker)
