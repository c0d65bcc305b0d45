"""The private git dir as the harness last left it, so that it is rebuilt only when something wrote to it.

Between the rooms the private git dir is the harness's: a reset puts back the snapshot taken at the slot's build
(``pool.py``) and the verifier's room its own state of it (``verifier.py``), each by clearing the directory and
writing every file again, about 130 file operations. Most attempts never write there (an agent that only edits
files, a verifier that only runs tests), so most of those writes put back what is already there.

``KeptGitDir`` remembers what the harness wrote last, and when by the filesystem's own clock. ``settle`` (before
any program of the next room starts) waits, when it must, until that clock has moved past the harness's last
write: from then on any write by anyone (a file written, chmod-ed, linked, created, removed or renamed, also one
that keeps its size and mtime) gives some entry of the git dir a ctime at or after the mark, which no process can
set back (``ctime.py``). If no entry has one, the directory still holds exactly what the harness wrote, and the
next state of it is reached by writing only the files that differ; otherwise it is rebuilt in full, as before.
"""

from __future__ import annotations

import os
import time

from worktrial.isolation import ownership, safefs
from worktrial.isolation.ctime import Mark, fs_now_ns

_SETTLE_SECS = 0.05
Files = dict[str, tuple[bytes, int]]
"""Relative path -> (content, mode) of every regular file the harness writes in the git dir, but the index."""


class KeptGitDir:
    """What the harness last wrote in one slot's private git dir (its index kept apart), and since when."""

    def __init__(self) -> None:
        self.files: Files | None = None
        """None: unknown (never written by this, or given up on): the next state is written in full."""
        self.index_snapshot = False
        """Whether the index is the snapshot's (else one ``git read-tree`` made, which the next state replaces)."""
        self._written_ns = 0
        self._mark: Mark | None = None

    def forget(self) -> None:
        self.files, self._mark = None, None

    def untouched(self, git_fd: int) -> bool:
        """Whether the git dir still holds exactly what the harness wrote last: settled before anything else ran, a
        clock that was not set back, and no entry changed since (one walk of a few dozen entries)."""
        mark = self._mark
        if self.files is None or mark is None or not mark.trusted():
            return False
        try:
            if os.fstat(git_fd).st_ctime_ns >= mark.fs_ns:
                return False
            for _top, subdirs, names, dir_fd in os.fwalk(".", dir_fd=git_fd, follow_symlinks=False):
                for name in (*subdirs, *names):
                    if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ctime_ns >= mark.fs_ns:
                        return False
        except OSError:
            return False
        return True

    def update(self, git_fd: int, wanted: Files, owner: int | None) -> None:
        """From what it holds (``untouched`` said so) to ``wanted``: only the files that differ are written (each
        handed to ``owner``), those no longer wanted removed."""
        assert self.files is not None
        for rel in self.files.keys() - wanted.keys():
            safefs.unlink_rel(git_fd, rel)
        for rel, (data, mode) in wanted.items():
            if self.files.get(rel) != (data, mode):
                safefs.write_at(git_fd, rel, data, mode)
                # No program ran since ``untouched`` walked it: the directories on the way are the harness's.
                ownership.hand_over_entry(git_fd, rel, owner)

    def wrote(self, files: Files, build_fd: int, *, index_snapshot: bool) -> None:
        """The harness just left the git dir holding ``files`` (and handed it over): remembered, not yet settled."""
        self.files = dict(files)
        self.index_snapshot = index_snapshot
        self._written_ns = fs_now_ns(build_fd)
        self._mark = None

    def wrote_file(self, rel: str, data: bytes, mode: int, build_fd: int) -> None:
        """The harness wrote one more file of its state (a room's worktree path) since ``wrote``."""
        if self.files is not None:
            self.files[rel] = (data, mode)
            self._written_ns = fs_now_ns(build_fd)
            self._mark = None

    def settle(self, build_fd: int) -> None:
        """Before a room's first program: the filesystem's clock past the harness's last write (usually it is
        already; else a wait of at most a clock tick). Without a known state there is nothing to settle."""
        if self.files is None:
            return
        now = fs_now_ns(build_fd)
        deadline = time.monotonic() + _SETTLE_SECS
        while now <= self._written_ns and time.monotonic() < deadline:
            time.sleep(0.0002)
            now = fs_now_ns(build_fd)
        exact = now > self._written_ns
        self._mark = Mark(now, time.time_ns(), time.monotonic_ns(), exact=exact) if exact else None
