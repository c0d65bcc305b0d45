"""What changed in a worktree since a mark, by the filesystem's own change times (the copying slot's way).

git trusts stat data at one-second ctime granularity, so an edit that keeps size and restores the mtime (``cp -p``,
``touch -r``) within the same second would survive a ``git reset``. The filesystem's own ctime, in nanoseconds,
cannot be forged: creating, deleting, renaming, linking or chmod-ing anything changes the ctime of the entry or of
its directory, so the entries newer than the mark are all that changed. A directory moved into place keeps the old
change times of the files inside: it is found by its inode, recorded when the harness last left the tree.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from worktrial.isolation import proc, safefs

GITFILE = ".git"
_FIND_OUTPUT_LIMIT = 4 * 1024 * 1024
_CLOCK_SLACK_NS = 1_000_000
_MARK_WAIT_SECS = 0.02


@dataclass(frozen=True)
class Mark:
    """When a reset (or build) finished: by the filesystem's clock (``fs_ns``, what ctimes are compared with), by
    the wall and the monotonic clock, and whether the filesystem's time was seen to move past every write the
    harness made (``exact``)."""

    fs_ns: int
    wall_ns: int
    mono_ns: int
    exact: bool

    def trusted(self) -> bool:
        """Whether "nothing is newer than the mark" proves "nothing changed": the filesystem's clock moved past the
        harness's own writes, and the wall clock (which stamps ctimes) was not stepped back since (by NTP, by
        hand), which could stamp an agent's write with a time before the mark."""
        if not self.exact:
            return False
        wall, mono = time.time_ns() - self.wall_ns, time.monotonic_ns() - self.mono_ns
        return wall >= mono - _CLOCK_SLACK_NS


UNMARKED = Mark(0, 0, 0, exact=False)


def fs_mark(dir_fd: int) -> Mark:
    """A filesystem time after every write made so far, so that anything stamped at or after it is later.

    Coarse timestamps (a clock tick of a few milliseconds, or a second on some filesystems) give writes made in the
    same tick the same ctime: waiting for the next tick separates the harness's last write from the agent's first.
    If the tick does not come within a few milliseconds, the mark is the current time and not ``exact``: every
    reset then runs git in full (the ctime check still removes same-second edits).
    """
    first = fs_now_ns(dir_fd)
    deadline = time.monotonic() + _MARK_WAIT_SECS
    now = fs_now_ns(dir_fd)
    while now <= first and time.monotonic() < deadline:
        time.sleep(0.0002)
        now = fs_now_ns(dir_fd)
    return Mark(now, time.time_ns(), time.monotonic_ns(), exact=now > first)


def fs_now_ns(dir_fd: int) -> int:
    """The filesystem clock (coarser than time.time_ns), read from a file just created (and removed)."""
    name = f".worktrial-clock-{secrets.token_hex(6)}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600, dir_fd=dir_fd)
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)


@dataclass(frozen=True)
class Changes:
    """Entries of a worktree whose ctime is at or after a mark (paths relative to it, without ``./``)."""

    files: list[str]
    dirs: list[str]

    def __bool__(self) -> bool:
        return bool(self.files or self.dirs)


def changed_since(worktree_fd: int, worktree: Path, mark_ns: int) -> Changes:
    """Every entry under the worktree (but its ``.git`` link) whose ctime is at or after ``mark_ns``.

    find(1) walks the tree in C; the reference time is one nanosecond before the mark so that its strict
    "newer than" comparison means "at or after". If find is missing (or lacks GNU ``-printf``) or lists more
    than fits the buffer, the walk is done in Python instead.
    """
    ref = mark_ns - 1
    cwd = safefs.fd_path(worktree_fd) if safefs.has_fd_paths() else worktree
    newer = f"@{ref // 1_000_000_000}.{ref % 1_000_000_000:09d}"
    argv = ["find", ".", "-path", "./.git", "-prune", "-o", "-newerct", newer]
    argv += ["(", "-type", "d", "-printf", r"d%p\0", "-o", "-printf", r"f%p\0", ")"]
    result = proc.run(argv, cwd=cwd, timeout=600, sweep=False, tail_bytes=_FIND_OUTPUT_LIMIT)
    if not (result.ok and result.stdout_bytes < _FIND_OUTPUT_LIMIT):
        return _walk_changed(worktree_fd, mark_ns)
    files: list[str] = []
    dirs: list[str] = []
    for entry in result.stdout_tail.split(b"\0"):
        if not entry:
            continue
        rel = entry[1:].decode("utf-8", "surrogateescape").removeprefix("./")
        (dirs if entry[:1] == b"d" else files).append(rel)
    return Changes(files, dirs)


def _walk_changed(worktree_fd: int, mark_ns: int) -> Changes:
    files: list[str] = []
    dirs: list[str] = []
    for top, subdirs, names, dir_fd in os.fwalk(".", dir_fd=worktree_fd, follow_symlinks=False):
        if top == ".":
            subdirs[:] = [d for d in subdirs if d != GITFILE]
            names = [f for f in names if f != GITFILE]
            if os.fstat(dir_fd).st_ctime_ns >= mark_ns:
                dirs.append(".")
        prefix = "" if top == "." else f"{top.removeprefix('./')}/"
        for name, into in [*((n, files) for n in names), *((d, dirs) for d in subdirs)]:
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(name, dir_fd=dir_fd).st_ctime_ns >= mark_ns:
                    into.append(prefix + name)
    return Changes(files, dirs)


def dir_inodes(work_fd: int) -> dict[str, int]:
    """Every directory of the worktree (but ``.git``) -> its inode (one walk, at a slot's build)."""
    found = {".": os.fstat(work_fd).st_ino}
    for top, subdirs, _names, dir_fd in os.fwalk(".", dir_fd=work_fd, follow_symlinks=False):
        if top == ".":
            subdirs[:] = [d for d in subdirs if d != GITFILE]
        prefix = "" if top == "." else top.removeprefix("./") + "/"
        for name in subdirs:
            with contextlib.suppress(OSError):
                found[prefix + name] = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
    return found


def _inode_of(work_fd: int, rel: str) -> int | None:
    try:
        st = os.stat(rel, dir_fd=work_fd, follow_symlinks=False) if rel != "." else os.fstat(work_fd)
    except OSError:
        return None
    return st.st_ino if stat.S_ISDIR(st.st_mode) else None


def with_replaced(changes: Changes, work_fd: int, inodes: dict[str, int]) -> Changes:
    """The walk's changes plus everything below each directory that is not the one the harness left there (new,
    or moved in from elsewhere, so the files inside kept their old change times)."""
    replaced = sorted(
        (d for d in changes.dirs if d != "." and _inode_of(work_fd, d) != inodes.get(d)), key=lambda d: d.count("/")
    )
    outer: list[str] = []
    for d in replaced:
        if not any(d.startswith(o + "/") for o in outer):
            outer.append(d)
    if not outer:
        return changes
    files, dirs = set(changes.files), set(changes.dirs)
    for d in outer:
        try:
            top_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work_fd)
        except OSError:
            continue
        try:
            for top, subdirs, names, _fd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
                prefix = d + "/" + ("" if top == "." else top.removeprefix("./") + "/")
                dirs.update(prefix + n for n in subdirs)
                files.update(prefix + n for n in names)
        finally:
            os.close(top_fd)
    return Changes(sorted(files), sorted(dirs))


def update_dir_inodes(
    inodes: dict[str, int], work_fd: int, changed: Changes, removed: Iterable[str], written: Iterable[str]
) -> None:
    """After a reset, in proportion to it: what it ``removed`` loses its entries, the directories it kept or made
    (those of the changed entries, and the parents of every file it ``written`` back) get their inode."""
    for rel in removed:
        for key in [k for k in inodes if k == rel or k.startswith(rel + "/")]:
            del inodes[key]
    touched = {".", *changed.dirs}
    for path in written:
        parts = path.split("/")[:-1]
        touched.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for rel in touched:
        ino = _inode_of(work_fd, rel)
        if ino is None:
            inodes.pop(rel, None)
        else:
            inodes[rel] = ino
