"""Handing an attempt's trees to the unprivileged uid its sandboxed programs run as (when the harness is root).

The harness makes the worktree, the private git dir, scratch and the homes as root; the agent, setup and verify
commands then run as another uid (``sandbox.agent_uid``) and must be able to write them. Ownership changes only
ever go through directory descriptors opened without following symlinks and ``lchown`` (a link is re-owned,
never its target); a file with more than one link is left alone, so a hard link to something outside cannot be
handed over. Nothing here runs while an agent's process is alive: each call is made before a sandboxed program
starts or after every one has ended.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def hand_over(root: Path, uid: int | None, *, only_foreign: bool = False) -> None:
    """Make ``root`` and everything under it belong to ``uid`` (and its group of the same number).

    ``only_foreign`` descends only into directories that do not belong to ``uid`` yet (the top excepted): what the
    harness just made there, not what the agent's own programs wrote, so the cost follows the harness's writes.
    A ``root`` that is missing or a symlink is left alone. ``uid`` None: nothing to do.
    """
    if uid is None:
        return
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        with contextlib.suppress(OSError):
            st = os.lstat(root)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid != uid:
                os.chown(root, uid, uid, follow_symlinks=False)
        return
    try:
        if os.fstat(fd).st_uid != uid:
            os.fchown(fd, uid, uid)
        _hand_over_at(fd, uid, only_foreign)
    finally:
        os.close(fd)


def _hand_over_at(dir_fd: int, uid: int, only_foreign: bool) -> None:
    for entry in os.scandir(dir_fd):
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        foreign = st.st_uid != uid or st.st_gid != uid
        if foreign and (is_dir or stat.S_ISLNK(st.st_mode) or st.st_nlink == 1):
            os.chown(entry.name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
        if is_dir and (foreign or not only_foreign):
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # replaced by a symlink in between: not followed
                continue
            try:
                _hand_over_at(child, uid, only_foreign)
            finally:
                os.close(child)


def hand_over_fd(fd: int, uid: int | None, *, recursive: bool = False, only_foreign: bool = False) -> None:
    """Hand a directory the harness holds by descriptor (and, ``recursive``, what is under it) to ``uid``."""
    if uid is None:
        return
    if os.fstat(fd).st_uid != uid:
        os.fchown(fd, uid, uid)
    if recursive:
        _hand_over_at(fd, uid, only_foreign)


def hand_over_rel(root_fd: int, rel: str, uid: int | None) -> None:
    """Hand what the harness (re)made in the directory at ``rel`` below ``root_fd`` to ``uid``: its entries that
    are not the uid's yet, and everything in the directories among them. A symlink anywhere on the way stops it."""
    if uid is None:
        return
    fd = os.dup(root_fd)
    try:
        for part in (p for p in rel.split("/") if p not in ("", ".")):
            if part == "..":
                return
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                return
            os.close(fd)
            fd = child
        hand_over_fd(fd, uid, recursive=True, only_foreign=True)
    finally:
        os.close(fd)


def hand_over_entry(dir_fd: int, name: str, uid: int | None) -> None:
    """Hand one file the harness just wrote in a directory (by descriptor) to ``uid``; a link is never followed."""
    if uid is not None:
        os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


_PRIVILEGE_BITS = stat.S_ISUID | stat.S_ISGID
_CAPABILITY_XATTR = "security.capability"


def strip_privileges(root: Path) -> int:
    """Make what a container left under ``root`` inert on this host; returns how many entries were changed.

    A container whose user is root (a Harbor task keeps its image's user) writes the bind-mounted attempt trees as
    this host's root: a file it made set-uid, set-gid or gave file capabilities would give root to whoever runs it
    here, and a device node it made would open a host device. The runtime mounts those trees ``nosuid,nodev``
    inside the container, but a kept worktree, a copy of it or a published tree keeps no mount option. So every
    regular file loses its set-uid and set-gid bits and its ``security.capability`` xattr, and every device node is
    removed, wherever files cross back from a container (after its last process is gone).

    The walk holds one directory descriptor at a time (each opened without following a link, checked on the way
    back up), so neither a deep tree nor a long path stops it, and it stays on ``root``'s filesystem."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return 0
    changed = 0
    device = os.fstat(fd).st_dev
    stack: list[tuple[tuple[int, int], list[str]]] = [(_id(fd), os.listdir(fd))]
    try:
        while stack:
            names = stack[-1][1]
            if not names:  # this directory is done: back to its parent
                stack.pop()
                if stack:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                    if _id(fd) != stack[-1][0]:
                        raise OSError(errno.ESTALE, f"{root}: a directory moved while its files were made inert")
                continue
            name = names.pop()
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_dev == device:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                stack.append((_id(fd), os.listdir(fd)))
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                os.unlink(name, dir_fd=fd)
                changed += 1
            elif stat.S_ISREG(st.st_mode):
                changed += _inert_file(fd, name, st)
        return changed
    finally:
        os.close(fd)


def _id(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _inert_file(dir_fd: int, name: str, st: os.stat_result) -> int:
    """Clear a regular file's set-uid and set-gid bits and its file capabilities (1 if it had any)."""
    changed = 0
    if st.st_mode & _PRIVILEGE_BITS:
        # Just seen as a regular file (not a link) with no container process left to swap it: chmod by name is safe.
        os.chmod(name, stat.S_IMODE(st.st_mode) & ~_PRIVILEGE_BITS, dir_fd=dir_fd)
        changed = 1
    if hasattr(os, "removexattr"):  # Linux: file capabilities exist
        try:
            os.removexattr(f"/proc/self/fd/{dir_fd}/{name}", _CAPABILITY_XATTR, follow_symlinks=False)
            changed = 1
        except OSError:
            pass  # none (ENODATA), or a filesystem without xattrs
    return changed
