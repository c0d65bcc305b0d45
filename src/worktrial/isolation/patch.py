"""The agent's change as a patch: ``git diff`` of an attempt's worktree against the base commit.

Untracked files are included (staged with ``git add -A`` into an index in the private repository, which the
slot reset removes). Binary files are named, not inlined. The diff is written to a file and only its first
``max_bytes`` are read, so a huge change costs bounded memory. The worktree and its git config are the
agent's: hooks, fsmonitor and any filter or diff drivers it configured are overridden so that nothing the
agent left runs in the harness.

The worktree's ``.git`` link and the private repository's per-worktree files are the agent's too: a ``.git``
file pointing at the user's repository would make ``git add`` write there. So git is never left to discover the
repository: it gets the private repository and the worktree as descriptors the harness checked (``safefs``),
and a copy of the worktree's index as the bare repository's own.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import WorktrialError
from worktrial.isolation import ownership, proc, safefs
from worktrial.isolation.workspace import AttemptWorkspace

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
        "-c",
        "safe.directory=*",  # the worktree is the sandbox uid's when the harness is root
        *overrides,
        *args,
    ]
    return proc.run(argv, cwd=worktree, env=env, timeout=_GIT_TIMEOUT, sweep=False)


def _driver_overrides(worktree: Path, location: list[str]) -> list[str]:
    """``-c`` options neutralising every filter/diff/merge driver the repository's config defines."""
    listing = _git(worktree, location, "config", "--name-only", "--list")
    overrides: list[str] = []
    for key in listing.stdout_tail.decode("utf-8", "replace").splitlines():
        match = _DRIVER_KEY.match(key.strip())
        if match:
            neutral = "cat" if match.group(3) in ("clean", "smudge") else ""
            overrides += ["-c", f"{key.strip()}={neutral}"]
    return overrides


_INDEX_LIMIT = 512 * 1024 * 1024


def agent_patch(ws: AttemptWorkspace, base_commit: str, max_bytes: int, owner: int | None = None) -> PatchData | None:
    """The worktree's change against ``base_commit``, or None when git could not produce it (or the agent
    replaced the private repository or the worktree). What git wrote in the private repository (an index, objects)
    goes to ``owner``, the sandbox's uid, so that verification's git can still write there."""
    try:
        with contextlib.ExitStack() as fds:
            git_fd = fds.enter_context(safefs.opened_dir(ws.git_dir, ws.git_dir_id))
            work_fd = fds.enter_context(safefs.opened_dir(ws.worktree, ws.worktree_id))
            if safefs.has_fd_paths():
                git_dir, worktree = safefs.fd_path(git_fd), safefs.fd_path(work_fd)
            else:
                git_dir, worktree = ws.git_dir, ws.worktree
            try:  # the worktree's own index, as a stat cache: only read, never through a final symlink
                admin = git_dir / "worktrees" / (ws.admin or ws.worktree.name)
                index = safefs.read_regular(admin / "index", _INDEX_LIMIT)
            except (OSError, ValueError):
                index = b""
            safefs.write_at(git_fd, "index", index)
            location = ["-c", "core.bare=false", f"--git-dir={git_dir}", f"--work-tree={worktree}"]
            try:
                return _patch(worktree, location, base_commit, max_bytes)
            finally:
                ownership.hand_over_fd(git_fd, owner, recursive=True, only_foreign=True)
    except (OSError, WorktrialError):
        return None


def _patch(worktree: Path, location: list[str], base_commit: str, max_bytes: int) -> PatchData | None:
    overrides = location + _driver_overrides(worktree, location)
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
