"""Overlay rooms: the agent's worktree as an overlay of the slot's pristine checkout, so a room costs O(1).

The slot keeps its pristine checkout (after environment setup) as a read-only *lower* layer that no process of an
attempt ever writes. Each attempt gets a new empty *upper* directory: every sandboxed program of the attempt starts
in a mount namespace of its own where an overlay of the two is mounted at the attempt's worktree path, so whatever
the agent writes, deletes, renames or chmods lands in the upper directory and nowhere else. Resetting the slot is
removing the upper directory (its size is the agent's change, not the repository's), and the agent's change is
exactly what the upper directory holds: regular files and symlinks it wrote, *whiteouts* (character devices 0/0)
for what it deleted, and *opaque* directories (an xattr) that hide everything below them in the lower layer.

The verifier's room is another overlay: the agent's upper directory, taken as data (only regular files, symlinks,
directories and whiteouts are kept; its ``.git`` link never), becomes a second read-only lower layer above the
pristine checkout, with a fresh upper directory of the verifier's own.

The mount is made by a small wrapper in front of bubblewrap (bubblewrap 0.8 has no overlay option): ``unshare``
makes a private mount namespace (and, for an unprivileged harness, a user namespace in which it may mount), mounts
the overlay there, and executes bubblewrap, which binds the mounted overlay like any other directory. Layer paths
are passed relative to the slot's build directory, whose entries only the harness names (random tokens), so no
path reaches the kernel's comma- and colon-separated option string.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from worktrial.isolation import proc

DISABLE_VAR = "WORKTRIAL_OVERLAY"
"""``WORKTRIAL_OVERLAY=off`` makes every slot use the copying path (how the tests run both paths)."""
_SCRIPT = 'cd "$1" && mount -t overlay overlay -o "$2" "$3" && shift 3 && exec "$@"'
_UNPRIVILEGED_SCRIPT = (
    'cd "$1" && mount -t overlay overlay -o "$2" "$3" && shift 3 && exec unshare --user --map-user="$WT_UID" '
    '--map-group="$WT_GID" -- "$@"'
)
WHITEOUT = stat.S_IFCHR


@dataclass(frozen=True)
class Layers:
    """One overlay: entries of ``base`` (the slot's build directory), named by the harness.

    ``lowers`` are read-only, the first one on top; ``upper`` takes every write, ``work`` is overlayfs's own
    scratch space (same filesystem as ``upper``), ``mountpoint`` is where programs see the merged tree.
    """

    base: Path
    lowers: tuple[str, ...]
    upper: str
    work: str
    mountpoint: str

    @property
    def mount_path(self) -> Path:
        return self.base / self.mountpoint

    def options(self) -> str:
        opts = f"lowerdir={':'.join(self.lowers)},upperdir={self.upper},workdir={self.work}"
        return opts if os.geteuid() == 0 else opts + ",userxattr"

    def prefix(self) -> list[str]:
        """The argv in front of bubblewrap's: a mount namespace with this overlay mounted at ``mountpoint``."""
        if os.geteuid() == 0:
            unshare = ["unshare", "--mount", "--propagation", "private", "--"]
            return [*unshare, "sh", "-c", _SCRIPT, "sh", str(self.base), self.options(), self.mountpoint]
        unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--"]
        script = _UNPRIVILEGED_SCRIPT.replace("$WT_UID", str(os.geteuid())).replace("$WT_GID", str(os.getegid()))
        return [*unshare, "sh", "-c", script, "sh", str(self.base), self.options(), self.mountpoint]


def disabled() -> bool:
    return os.environ.get(DISABLE_VAR, "").strip().lower() in ("off", "0", "no", "false")


@functools.cache
def unavailable() -> str | None:
    """Why overlays cannot be mounted here (None when they can): probed once, by mounting one in a temp dir."""
    for tool in ("unshare", "mount", "sh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    with tempfile.TemporaryDirectory(prefix="worktrial-overlay-probe-") as tmp:
        base = Path(tmp)
        for name in ("lower", "upper", "work", "merged"):
            (base / name).mkdir()
        (base / "lower" / "probe").write_bytes(b"lower\n")
        layers = Layers(base, ("lower",), "upper", "work", "merged")
        check = 'test "$(cat merged/probe)" = lower && echo upper > merged/probe && rm merged/probe'
        argv = [*layers.prefix(), "sh", "-c", f"cd {str(base)!r} && {check}"]
        result = proc.run(argv, cwd=tmp, timeout=30, sweep=False)
        if not result.ok:
            detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
            return detail[-1] if detail else result.describe_failure("overlay mount")
        if not is_whiteout(base / "upper" / "probe"):
            return "the overlay left no whiteout for a deleted file"
    return None


def usable() -> bool:
    return not disabled() and unavailable() is None


def is_whiteout(path: Path | str, dir_fd: int | None = None) -> bool:
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: Path | str) -> bool:
    """Whether overlayfs marked this upper directory opaque (nothing of the layers below shows through)."""
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
    return False


@dataclass(frozen=True)
class UpperChanges:
    """What an upper directory says about the tree below it, paths relative to the worktree."""

    present: list[str]
    """Regular files and symlinks the upper layer holds: written, replaced, chmod-ed or new."""
    whiteouts: list[str]
    """Deleted: whatever the lower layers had at these paths (a file, or a directory and all below it)."""
    opaque: list[str]
    """Directories whose lower contents are all hidden (deleted), but what ``present`` lists under them."""
    dirs: list[str]
    """Every directory the upper layer holds (copied up, new or opaque)."""
    odd: list[str]
    """Anything else (a FIFO, a socket): not file contents, dropped from the agent's change."""

    def __bool__(self) -> bool:
        return bool(self.present or self.whiteouts or self.opaque or self.odd)


def scan_upper(upper_fd: int) -> UpperChanges:
    """One walk of the upper directory (by descriptor): O(what the agent changed), never of the repository."""
    present: list[str] = []
    whiteouts: list[str] = []
    opaque: list[str] = []
    dirs: list[str] = []
    odd: list[str] = []
    for top, subdirs, names, dir_fd in os.fwalk(".", dir_fd=upper_fd, follow_symlinks=False):
        prefix = "" if top == "." else top.removeprefix("./") + "/"
        for name in subdirs:
            rel = prefix + name
            dirs.append(rel)
            if is_opaque(f"/proc/self/fd/{dir_fd}/{name}"):
                opaque.append(rel)
        for name in names:
            rel = prefix + name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                present.append(rel)
            elif stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                whiteouts.append(rel)
            else:
                odd.append(rel)
    return UpperChanges(present, whiteouts, opaque, dirs, odd)


def lower_files(lower: Path, rel: str) -> list[str]:
    """The regular files and symlinks of the lower layer at ``rel``: itself, or everything below a directory."""
    path = lower / rel
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return [rel] if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) else []
    found: list[str] = []
    for top, _subdirs, names, dir_fd in os.fwalk(path, follow_symlinks=False):
        sub = os.path.relpath(top, lower)
        for name in names:
            with contextlib.suppress(OSError):
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                    found.append(f"{sub}/{name}")
    return found


def affected_lower(lower: Path, changes: UpperChanges) -> list[str]:
    """The lower layer's files the upper layer changes: replaced, deleted or hidden by an opaque directory."""
    found: set[str] = set()
    for rel in [*changes.present, *changes.whiteouts, *changes.opaque, *changes.odd]:
        found.update(lower_files(lower, rel))
    for rel in changes.dirs:  # a directory that replaced a lower file
        path = lower / rel
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                found.update(lower_files(lower, rel))
    return sorted(found)
