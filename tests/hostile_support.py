"""Helpers for the hostile-agent tests: run the real CLI in a bounded subprocess, fingerprint the user's repo."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import git

RUN_TIMEOUT_SECS = 240
PROJECT = str(Path(__file__).resolve().parent.parent)


def run_worktrial(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_SECS
) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process; a hang fails the test instead of blocking it (the child is killed)."""
    # This checkout's code (src) and its tests package (the project root), whatever the venv was installed from.
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(PROJECT) / "src"), PROJECT]), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "worktrial", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def make_precious(repo: Path) -> None:
    """Give the user's repository what a reset gone wrong would destroy: history, edits, untracked files."""
    (repo / "second.txt").write_text("second commit\n")
    git(repo, "add", "second.txt")
    git(repo, "commit", "-qm", "second")
    git(repo, "branch", "feature")
    (repo / "README.md").write_text("# sample repo\nuncommitted edit\n")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "debug.log").write_text("ignored but precious\n")


def fingerprint(repo: Path) -> dict[str, str]:
    """Everything the user would miss: fsck-clean objects, refs, and the bytes of every file in the work tree."""
    fsck = subprocess.run(["git", "fsck", "--full", "--strict"], cwd=repo, capture_output=True, text=True)
    files = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo)
        if rel.parts[0] in (".git", ".worktrial") or path.is_dir():
            continue
        files[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "fsck": str(fsck.returncode),
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "log": git(repo, "log", "--all", "--format=%H %s"),
        "objects": git(repo, "count-objects", "-v"),
        "files": repr(files),
        "config": (repo / ".git" / "config").read_text(),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
    }
