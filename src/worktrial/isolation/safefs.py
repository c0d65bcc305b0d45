"""File operations that never follow what an agent left behind.

An agent (or a process it left running) can replace any directory next to its worktree with a symlink to the
user's repository between two harness steps. Path-based calls (``Path.iterdir``, ``write_bytes``,
``git -C path``) would then act on the link's target. Everything here works on directory file descriptors
opened with ``O_NOFOLLOW`` and checked against the (device, inode) the harness recorded when it created the
directory: a component that is a symlink, or not the directory the harness made, is refused, never entered.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import WorkspaceError
from worktrial.safe_read import read_input

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | _DIRECTORY | _CLOEXEC


@dataclass(frozen=True)
class Identity:
    """Which inode a path named when the harness created it."""

    dev: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino)


def identity(path: Path) -> Identity:
    """The identity of a directory the harness just created (raises if it is not a real directory)."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"{path} is not a directory")
    return Identity.of(st)


def open_dir(name: str | Path, expected: Identity | None, *, dir_fd: int | None = None) -> int:
    """A file descriptor of the directory ``name`` (relative to ``dir_fd``), refusing symlinks and strangers."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise WorkspaceError(f"{name}: not the directory the harness created ({exc.strerror})") from None
    if expected is not None and Identity.of(os.fstat(fd)) != expected:
        os.close(fd)
        raise WorkspaceError(f"{name}: replaced since the harness created it")
    return fd


@contextlib.contextmanager
def opened_dir(name: str | Path, expected: Identity | None, *, dir_fd: int | None = None) -> Iterator[int]:
    fd = open_dir(name, expected, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def fd_path(fd: int) -> Path:
    """A path naming exactly the inode behind ``fd``, also for child processes (Linux ``/proc``).

    Where there is no ``/proc`` the caller falls back to the path it has already checked.
    """
    return Path(f"/proc/{os.getpid()}/fd/{fd}")


def has_fd_paths() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir(f"/proc/{os.getpid()}/fd")


def remove_at(dir_fd: int | None, name: str) -> None:
    """Remove ``name`` (inside ``dir_fd``, or a path) whatever it is; a symlink is unlinked, never followed.

    Works on trees an agent made read-only or unreadable (also without root) and on any nesting depth:
    no recursion deeper than ``_MAX_DEPTH`` and no more open descriptors than that.
    """
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(FileNotFoundError):
            _unlink(dir_fd, name)
        return
    top = _open_for_removal(dir_fd, name)
    try:
        for _ in range(_MAX_ROUNDS):
            if not _empty(top, top, 0):
                break
    finally:
        os.close(top)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=dir_fd)


_MAX_DEPTH = 32
_MAX_ROUNDS = 1_000_000


def _unlink(dir_fd: int | None, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except PermissionError:
        if dir_fd is None:
            _chmod_dir(os.path.dirname(os.path.abspath(name)))
        else:
            os.fchmod(dir_fd, os.fstat(dir_fd).st_mode | stat.S_IRWXU)
        os.unlink(name, dir_fd=dir_fd)


def _open_for_removal(dir_fd: int | None, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        # Unreadable (chmod 000 by the agent): give the owner rwx back, then open it; symlinks never get here.
        if stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
            os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _empty(fd: int, top: int, depth: int) -> bool:
    """Remove what is inside ``fd``; directories nested too deep move up into ``top``. True if any moved."""
    moved = False
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, os.fstat(fd).st_mode | stat.S_IRWXU)
    for name in os.listdir(fd):
        try:
            st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(FileNotFoundError):
                _unlink(fd, name)
            continue
        if depth + 1 >= _MAX_DEPTH:
            os.rename(name, f".worktrial-rm-{os.urandom(8).hex()}", src_dir_fd=fd, dst_dir_fd=top)
            moved = True
            continue
        sub = _open_for_removal(fd, name)
        try:
            moved = _empty(sub, top, depth + 1) or moved
        finally:
            os.close(sub)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(name, dir_fd=fd)
    return moved


def clear_dir(dir_fd: int, keep: frozenset[str] = frozenset()) -> list[str]:
    """Remove every entry of the directory but ``keep``; returns the names removed."""
    removed = []
    for name in os.listdir(dir_fd):
        if name not in keep:
            remove_at(dir_fd, name)
            removed.append(name)
    return removed


def _open_parent(root_fd: int, rel: str, *, create: bool) -> tuple[int, str]:
    """A new fd of the directory holding ``rel`` (each component opened with O_NOFOLLOW), and the last name."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise WorkspaceError(f"unsafe relative path {rel!r}")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            nxt = open_dir(part, None, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def open_dir_below(root_fd: int, rel: str) -> int:
    """A new fd of the directory at ``rel`` below ``root_fd`` (``""``: ``root_fd`` itself), every component opened
    with O_NOFOLLOW: a symlink, ``.``, ``..`` or a non-directory anywhere on the way raises (``WorkspaceError``)."""
    if not rel:
        return os.dup(root_fd)
    parent, name = _open_parent(root_fd, rel, create=False)
    try:
        return open_dir(name, None, dir_fd=parent)
    finally:
        os.close(parent)


def write_at(root_fd: int, rel: str, data: bytes, mode: int = 0o644) -> None:
    """Create ``rel`` under ``root_fd`` with exactly ``data``; never through a link or into an existing file."""
    parent, name = _open_parent(root_fd, rel, create=True)
    try:
        remove_at(parent, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    finally:
        os.close(parent)


def makedirs_at(root_fd: int, rel: str) -> None:
    parent, name = _open_parent(root_fd, rel, create=True)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    finally:
        os.close(parent)


def unlink_rel(root_fd: int, rel: str) -> None:
    """Unlink a non-directory at ``rel`` below ``root_fd``; a symlinked component on the way stops it."""
    try:
        parent, name = _open_parent(root_fd, rel, create=False)
    except (OSError, WorkspaceError):
        return
    try:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            if not stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
                os.unlink(name, dir_fd=parent)
    finally:
        os.close(parent)


def chmod_dir_rel(root_fd: int, rel: str, mode: int) -> None:
    """Set the mode of the directory at ``rel`` below ``root_fd``; a symlink anywhere on the way (or in its place)
    stops it. For the harness's reset, when no process of the attempt is left to swap anything in."""
    try:
        parent, name = _open_parent(root_fd, rel, create=False)
    except (OSError, WorkspaceError):
        return
    try:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            if stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
                os.chmod(name, mode, dir_fd=parent)
    finally:
        os.close(parent)


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, never through a symlink, FIFO or device.

    ``worktrial.safe_read.read_input`` without following links: a symlink is ``OSError(ELOOP)``, anything but a
    regular file (or a larger one) an ``InputFileError`` (a ``ValueError``); a FIFO never blocks.
    """
    return read_input(path, limit, follow_symlinks=False)


def _chmod_dir(path: str) -> None:
    """Give the owner rwx on a directory (never on what a symlink points to)."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, st.st_mode | stat.S_IRWXU)


FileId = tuple[int, int, int, int]
"""(inode, ctime in ns, size, links) of a file: what a later write, replacement or link to it would change."""


def file_id(dir_fd: int, rel: str) -> FileId | None:
    try:
        st = os.stat(rel, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns, st.st_size, st.st_nlink) if stat.S_ISREG(st.st_mode) else None


def stash_if_same(dir_fd: int, rel: str, known: FileId | None, into_fd: int, name: str) -> bool:
    """Move the file at ``rel`` out to ``name`` in ``into_fd`` if it is still exactly the one identified by ``known``
    (the harness wrote it and nothing changed it since: a change would have moved its ctime, which no process can
    set back). Lets the harness keep a large file of its own (an index) instead of writing it again."""
    if known is None or file_id(dir_fd, rel) != known:
        return False
    try:
        os.rename(rel, name, src_dir_fd=dir_fd, dst_dir_fd=into_fd)
    except OSError:
        return False
    return True
