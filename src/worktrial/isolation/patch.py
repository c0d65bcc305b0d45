"""The agent's change as a patch: ``git diff`` of an attempt's worktree against the base commit.

Untracked files are included (staged with ``git add -A`` into the disposable worktree's index, which the slot
reset restores). Binary files are named, not inlined. The diff is written to a file and only its first
``max_bytes`` are read, so a huge change costs bounded memory. The worktree and its git config are the
agent's: hooks, fsmonitor and any filter or diff drivers it configured are overridden so that nothing the
agent left runs in the harness.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from worktrial.isolation import proc

_GIT_TIMEOUT = 120.0
_DRIVER_KEY = re.compile(r"^(filter|diff|merge)\.(.+)\.(clean|smudge|process|textconv|command|driver)$")


@dataclass(frozen=True)
class PatchData:
    diff: bytes
    total_bytes: int
    truncated: bool
    files: list[str]


def _git(worktree: Path, overrides: list[str], *args: str) -> proc.ProcResult:
    env = proc.clean_env(
        extra={"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    )
    argv = [
        "git",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.untrackedCache=false",
        "-c",
        "diff.external=",
        *overrides,
        *args,
    ]
    return proc.run(argv, cwd=worktree, env=env, timeout=_GIT_TIMEOUT, sweep=False)


def _driver_overrides(worktree: Path) -> list[str]:
    """``-c`` options neutralising every filter/diff/merge driver the repository's config defines."""
    listing = _git(worktree, [], "config", "--name-only", "--list")
    overrides: list[str] = []
    for key in listing.stdout_tail.decode("utf-8", "replace").splitlines():
        match = _DRIVER_KEY.match(key.strip())
        if match:
            neutral = "cat" if match.group(3) in ("clean", "smudge") else ""
            overrides += ["-c", f"{key.strip()}={neutral}"]
    return overrides


def agent_patch(worktree: Path, base_commit: str, max_bytes: int) -> PatchData | None:
    """The worktree's change against ``base_commit``, or None when git could not produce it."""
    overrides = _driver_overrides(worktree)
    if not _git(worktree, overrides, "add", "-A", "--", ".").ok:
        return None
    names = _git(worktree, overrides, "diff", "--cached", "--name-only", "-z", "--no-renames", base_commit, "--")
    files = [n for n in names.stdout_tail.decode("utf-8", "replace").split("\0") if n]
    with tempfile.TemporaryDirectory(prefix="worktrial-patch-") as tmp:
        out = Path(tmp) / "patch.diff"
        result = _git(
            worktree,
            overrides,
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            f"--output={out}",
            base_commit,
            "--",
        )
        if not result.ok or not out.is_file():
            return None
        total = out.stat().st_size
        with open(out, "rb") as fh:
            diff = fh.read(max_bytes)
    return PatchData(diff=diff, total_bytes=total, truncated=total > max_bytes, files=files)
