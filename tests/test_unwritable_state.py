"""A state directory worktrial cannot write, or a full disk, is one line and exit 2 before any agent runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, task
from tests.hostile_support import PROJECT, run_worktrial

SUITE = '{"id": "s", "tasks": [{"id": "t", "prompt": "p", "verify_commands": ["test -f done.txt"]}]}'
# An agent that leaves proof it ran: it must not, when the run cannot store its result.
AGENT = "touch done.txt; echo ran >> $MARKER"


def _one_line(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("worktrial: warning:")]
    assert len(lines) == 1 and lines[0].startswith("worktrial: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory outside pytest's (mode 0700) temp tree, so an unprivileged user can reach it."""
    top = Path(tempfile.mkdtemp(prefix="wt-state-", dir="/tmp"))
    try:
        yield top
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_an_unwritable_state_directory_is_one_line(shared_dir: Path) -> None:
    """As an unprivileged user (``nobody`` via setpriv when the test runs as root): .worktrial is not writable."""
    repo = shared_dir / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "suite.json").write_text(SUITE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "init")
    home = shared_dir / "home"
    home.mkdir()
    marker = home / "agent-ran"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(PROJECT) / "src"),
        "HOME": str(home),
        "TMPDIR": str(home),
        "WORKTRIAL_CONFIG_DIR": str(home / "config"),
        "WORKTRIAL_CACHE_DIR": str(home / "cache"),
        "MARKER": str(marker),
    }
    (repo / ".worktrial").mkdir()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root")
        # The repository belongs to nobody (git refuses others' repositories), its .worktrial stays root's.
        for path in [shared_dir, repo, home, *repo.rglob("*")]:
            if path != repo / ".worktrial" and not path.is_relative_to(repo / ".worktrial"):
                os.lchown(path, 65534, 65534)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    else:
        prefix = []
    (repo / ".worktrial").chmod(0o555)
    args = ["eval", "--suite", "suite.json", "--agent-cmd", AGENT, "--trust"]
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "worktrial", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    _one_line(result, str(repo / ".worktrial"), "cannot write worktrial's run data", "not writable")
    assert not marker.exists(), "no agent runs when its result could not be stored"


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size``: only root can mount one, and only where mounting is allowed (else the test skips)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def tiny_disk(shared_dir: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, full."""
    with _tmpfs(shared_dir / "disk", "64k") as mount:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield mount


def test_a_full_disk_under_the_state_directory_is_one_line(
    repo: Path, write_suite, tiny_disk: Path, tmp_path: Path
) -> None:
    (repo / ".worktrial").symlink_to(tiny_disk)  # the user's own choice of where run data goes
    marker = tmp_path / "agent-ran"
    suite = write_suite([task("t")])
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent-cmd", AGENT, "--trust"], cwd=repo, env={"MARKER": str(marker)}
    )
    _one_line(result, "cannot write worktrial's run data", "No space left on device", "free some space")
    assert not marker.exists()
    assert not [name for name in os.listdir(tiny_disk) if "probe" in name], "the write probe is gone again"


FILL_THE_STORE = (
    'alt="$(cat "$(git rev-parse --path-format=absolute --git-common-dir)/objects/info/alternates")"\n'
    'repo="$(dirname "$(dirname "$alt")")"\n'
    'if [ -e "$FILL_WHILE" ]; then head -c 4000000 /dev/zero > "$repo/.worktrial/fill" 2>/dev/null; fi\n'
    "touch done.txt\n"
)


@pytest.mark.slow
def test_a_disk_that_fills_up_during_the_run_is_one_line_and_resumable(
    repo: Path, write_suite, shared_dir: Path, tmp_path: Path
) -> None:
    """An agent fills the disk under the run store: the run stops with one line (exit 1), and once there is space
    again ``worktrial resume`` finishes it with every attempt counted once."""
    agent = tmp_path / "fill.sh"
    filling = tmp_path / "filling"  # the agent fills the disk while this file exists
    filling.touch()
    agent.write_text(f"FILL_WHILE={filling}\n" + FILL_THE_STORE)
    suite = write_suite([task("t")], attempts=2)
    with _tmpfs(shared_dir / "disk", "1m") as disk:
        (repo / ".worktrial").symlink_to(disk)
        # Unsandboxed: a sandboxed agent cannot even see the store; here it stands for anything filling the disk.
        args = ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--trust", "--jobs", "1", "-q"]
        result = run_worktrial([*args, "--sandbox", "off"], cwd=repo)
        assert result.returncode == 1, result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if not line.lower().startswith("worktrial: warning:")]
        assert len(errors) == 1 and "No space left on device" in errors[0] and "Traceback" not in result.stderr, errors
        (run_id,) = os.listdir(disk / "runs")
        (disk / "fill").unlink()
        filling.unlink()
        # The run was started with --sandbox off, and its resume is too (the run's frozen config).
        resumed = run_worktrial(["resume", run_id, "--format", "json"], cwd=repo)
        assert resumed.returncode == 0, resumed.stderr
        attempts = json.loads(resumed.stdout)["report"]["tasks"][0]["attempts"]
        assert sorted(a["attempt"] for a in attempts) == [1, 2]
        assert all(a["outcome"] == "pass" for a in attempts)


UNREADABLE_AGENT = """set -e
mkdir -p locked/inner ../locked-next/inner
touch locked/inner/f ../locked-next/inner/f done.txt
chmod 000 locked/inner ../locked-next/inner
chmod 000 locked ../locked-next
"""


@pytest.mark.slow
def test_unreadable_directories_left_by_an_agent_are_removed_without_root(shared_dir: Path) -> None:
    """The whole harness as an unprivileged user: chmod 000 directories in and next to the worktree are removed
    (no TypeError in the removal, no worktree left in TMPDIR), and every attempt still passes."""
    repo = shared_dir / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "suite.json").write_text(SUITE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "init")
    home, tmp = shared_dir / "home", shared_dir / "tmp"
    home.mkdir()
    tmp.mkdir()
    (home / "agent.sh").write_text(UNREADABLE_AGENT)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(PROJECT) / "src"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "WORKTRIAL_CONFIG_DIR": str(home / "config"),
        "WORKTRIAL_CACHE_DIR": str(home / "cache"),
    }
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root")
        for path in [shared_dir, *shared_dir.rglob("*")]:
            os.lchown(path, 65534, 65534)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    else:
        prefix = []
    for jobs_and_pool in (["--jobs", "1"], ["--jobs", "2"]):
        args = ["eval", "--suite", "suite.json", "--agent-cmd", f"sh {home / 'agent.sh'}", "--trust", "-q"]
        args += ["--sandbox", "off"]  # the harness's removal is the subject; the sandbox keeps ../ read-only
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "worktrial", *args, "--attempts", "3", *jobs_and_pool],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and "could not remove" not in result.stderr, result.stderr
        assert "3/3" in result.stdout, result.stdout
        assert sorted(os.listdir(tmp)) == [], "every worktree and slot is gone"
