"""Files worktrial reads from input: opened as regular files only, and read within a size limit.

A suite, an envelope, a trace an envelope names, a run directory's files, ``config.toml`` and ``worktrial.toml``
are input: a path to a FIFO would block ``open`` forever, ``/dev/zero`` (or a symlink to it) would be read until
memory runs out, a terminal or a tape drive has effects of its own when opened. Every such read goes through
``read_input``:

- the path is looked at first (``stat``, or ``lstat`` when links are not followed) and anything but a regular
  file is refused without being opened;
- it is then opened with ``O_NONBLOCK`` (a FIFO swapped in meanwhile cannot block) and ``O_NOCTTY``, and the
  open descriptor is checked again with ``fstat``: ``S_ISREG`` or nothing;
- at most ``limit`` bytes are read; a larger file is refused, never truncated.

A refusal is an ``InputFileError``: one line of bad input (exit 2) naming the path. It is also a ``ValueError``,
so code that treats every unusable file alike (an agent's usage file becomes a note) keeps doing so. Paths a
user names (``--suite``, an envelope, ``config.toml``) follow symlinks to regular files; the harness's own files
(the run store, an agent's usage file) are read with ``follow_symlinks=False`` through
``worktrial.isolation.safefs.read_regular``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat

from worktrial.errors import BadInputError

_CHUNK = 1024 * 1024
_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


class InputFileError(BadInputError, ValueError):
    """An input path that is not a regular file, or is larger than its limit.

    ``problem`` is the phrase (``is a named pipe (FIFO), not a regular file``, ``is larger than 16 MiB``) for callers
    that name the file their own way; ``str()`` is ``<path>: <problem>``.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def size_text(limit: int) -> str:
    """``16 MiB`` for a whole number of MiB or KiB, else the bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} bytes"


def _check(path: str | os.PathLike[str], st: os.stat_result, limit: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
        raise InputFileError(path, f"is {kind}, not a regular file")
    if st.st_size > limit:
        raise InputFileError(path, f"is larger than {size_text(limit)}")


def _open(path: str | os.PathLike[str], limit: int, follow_symlinks: bool) -> int:
    """A descriptor of the regular file at ``path`` (checked before and after opening), or the error."""
    if follow_symlinks:
        before = os.stat(path)
    else:
        before = os.lstat(path)
        if stat.S_ISLNK(before.st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    _check(path, before, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        _check(path, os.fstat(fd), limit)  # what was opened, not what was looked at: a swap cannot slip through
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_input(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file at ``path``, of at most ``limit`` bytes.

    Raises ``InputFileError`` for anything else, ``IsADirectoryError`` for a directory and the usual ``OSError``
    (``FileNotFoundError``, ``PermissionError``) when it cannot be opened; with ``follow_symlinks=False`` a
    symlink is ``OSError(ELOOP)``, as ``O_NOFOLLOW`` makes it.
    """
    fd = _open(path, limit, follow_symlinks)
    try:
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise InputFileError(path, f"is larger than {size_text(limit)}")
        return b"".join(chunks)
    finally:
        os.close(fd)


def input_sha256(path: str | os.PathLike[str], limit: int) -> str:
    """The SHA-256 of the regular file at ``path`` (at most ``limit`` bytes), read in chunks: a large input
    (a git bundle a suite ships) is hashed without being held in memory. Errors as ``read_input``."""
    fd = _open(path, limit, True)
    digest = hashlib.sha256()
    total = 0
    try:
        while chunk := os.read(fd, _CHUNK):
            total += len(chunk)
            if total > limit:
                raise InputFileError(path, f"is larger than {size_text(limit)}")
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()
