"""The agent's change as a patch: the attempt's files against the commit it started from.

Untracked files are included, binary files are named, not inlined. The diff is written to a file and only its first
``max_bytes`` are read, so a huge change costs bounded memory.

Everything in and next to the worktree is the agent's (DESIGN.md, "Trust boundary"): the private repository's
index (where ``git update-index --assume-unchanged`` hides an edit from ``git add``), its config (filter and diff
drivers, ``diff.submodule=diff`` with a nested repository's diff command, ``core.fsmonitor``), its hooks, its
``info/`` and its refs (``git replace``). So the patch never reads any of it: git runs on a git directory only the
harness writes (``PATCH_GIT`` next to the worktree, out of the agent's sight), whose config defines no driver, whose
objects borrow only the stores the base commit lives in, and whose index the harness made from that commit and
keeps as a stat cache between the slot's attempts (an edit changes a file's ctime, which no process can set back).
The worktree is named by a descriptor the harness checked, so a worktree replaced by a symlink is never followed.
Attributes in the tree can still select a driver by name, but none is defined, so nothing of the agent's runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import WorktrialError
from worktrial.isolation import proc, safefs
from worktrial.isolation.alternates import write_alternates
from worktrial.isolation.workspace import AttemptWorkspace

_GIT_TIMEOUT = 120.0
PATCH_GIT = "patch.git"
"""The harness's own git directory for patches, next to the slot's worktree and private repository."""
_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
_HARNESS_ONLY = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.trustctime=true",
    "-c",
    "core.checkStat=default",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "diff.external=",
    "-c",
    "diff.submodule=short",
    "-c",
    "safe.directory=*",  # the worktree is the sandbox uid's when the harness is root
]


@dataclass(frozen=True)
class PatchData:
    diff: bytes
    total_bytes: int
    truncated: bool
    files: list[str]


def _git(git_dir: Path, worktree: Path, *args: str) -> proc.ProcResult:
    env = proc.clean_env(
        extra={"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    )
    argv = ["git", *_HARNESS_ONLY, f"--git-dir={git_dir}", f"--work-tree={worktree}", *args]
    return proc.run(argv, cwd=worktree, env=env, timeout=_GIT_TIMEOUT, sweep=False)


def _harness_git_dir(git_dir: Path, start_commit: str, borrowed: Sequence[Path], worktree: Path) -> bool:
    """The harness's git directory for this worktree's patches, made on first use with an index of
    ``start_commit``; later patches keep its index as their stat cache. False when it cannot be made."""
    if (git_dir / "HEAD").is_file() and (git_dir / "index").is_file():
        return True
    git_dir.mkdir(mode=0o700, exist_ok=True)
    for sub in ("refs/heads", "refs/tags", "objects/info"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "config").write_bytes(_CONFIG)
    (git_dir / "HEAD").write_text(f"{start_commit}\n")
    write_alternates(git_dir, [Path(b) for b in borrowed])
    return _git(git_dir, worktree, "read-tree", start_commit).ok


def agent_patch(
    ws: AttemptWorkspace, start_commit: str, max_bytes: int, borrowed: Sequence[Path], home: Path | None = None
) -> PatchData | None:
    """The worktree's change against ``start_commit`` (the commit the attempt started from), computed in the
    harness's own git directory ``home`` (default: ``PATCH_GIT`` next to the worktree) that borrows ``borrowed``
    object stores; None when git could not produce it or the agent replaced the worktree."""
    git_dir = home or ws.root / PATCH_GIT
    try:
        with safefs.opened_dir(ws.worktree, ws.worktree_id) as work_fd:
            worktree = safefs.fd_path(work_fd) if safefs.has_fd_paths() else ws.worktree
            if not _harness_git_dir(git_dir, start_commit, borrowed, worktree):
                return None
            try:
                return _patch(git_dir, worktree, start_commit, max_bytes)
            finally:
                _drop_loose_objects(git_dir)
    except (OSError, WorktrialError):
        return None


def _drop_loose_objects(git_dir: Path) -> None:
    """The blobs ``git add`` wrote are only needed by this patch's diff. The index keeps naming them, but an entry
    whose file changed is restored by the next reset (a new ctime), so it is hashed again before any diff."""
    objects = git_dir / "objects"
    with contextlib.suppress(OSError):
        for entry in os.scandir(objects):
            if entry.name not in ("info", "pack") and entry.is_dir(follow_symlinks=False):
                for item in os.scandir(entry.path):
                    with contextlib.suppress(OSError):
                        os.unlink(item.path)
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _patch(git_dir: Path, worktree: Path, start_commit: str, max_bytes: int) -> PatchData | None:
    if not _git(git_dir, worktree, "add", "-A", "--", ".").ok:
        return None
    names = _git(git_dir, worktree, "diff", "--cached", "--name-only", "-z", "--no-renames", start_commit, "--")
    files = [n for n in names.stdout_tail.decode("utf-8", "replace").split("\0") if n]
    with tempfile.TemporaryDirectory(prefix="worktrial-patch-") as tmp:
        out = Path(tmp) / "patch.diff"
        result = _git(
            git_dir,
            worktree,
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            f"--output={out}",
            start_commit,
            "--",
        )
        if not result.ok or not out.is_file():
            return None
        total = out.stat().st_size
        with open(out, "rb") as fh:
            diff = fh.read(max_bytes)
    return PatchData(diff=diff, total_bytes=total, truncated=total > max_bytes, files=files)
