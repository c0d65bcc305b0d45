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
import shlex
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from worktrial.errors import WorkspaceError
from worktrial.isolation import proc, safefs

if TYPE_CHECKING:
    from worktrial.isolation.slot_ns import SlotNamespaces

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
    held: SlotNamespaces | None = field(default=None, compare=False)
    """The slot's namespaces it is mounted in (``slot_ns.py``): its programs enter them instead of mounting it each
    (``prefix``)."""

    @property
    def mount_path(self) -> Path:
        return self.base / self.mountpoint

    def mounted(self) -> bool:
        """Whether the overlay is mounted in the slot's namespaces, which its programs then enter."""
        return self.held is not None and self.held.holds(self.base, self.mountpoint)

    def options(self) -> str:
        opts = f"lowerdir={':'.join(self.lowers)},upperdir={self.upper},workdir={self.work}"
        # redirect_dir: renaming a directory of a lower layer works (as on any filesystem) instead of failing with
        # EXDEV; it needs trusted xattrs, so root's overlays only (an unprivileged harness uses the copying path).
        return opts + ",redirect_dir=on" if _trusted_xattrs() else opts + ",userxattr"

    def prefix(self) -> list[str]:
        """The argv in front of bubblewrap's: a mount namespace with this overlay mounted at ``mountpoint``."""
        if _trusted_xattrs():
            unshare = ["unshare", "--mount", "--propagation", "private", "--"]
            return [*unshare, "sh", "-c", _SCRIPT, "sh", str(self.base), self.options(), self.mountpoint]
        unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--"]
        script = _UNPRIVILEGED_SCRIPT.replace("$WT_UID", str(os.geteuid())).replace("$WT_GID", str(os.getegid()))
        return [*unshare, "sh", "-c", script, "sh", str(self.base), self.options(), self.mountpoint]


def _trusted_xattrs() -> bool:
    """Whether this harness's overlays keep their metadata in ``trusted.*`` xattrs (root, whose mount is made
    without ``userxattr``) rather than in ``user.*`` ones (``userxattr``, an unprivileged harness's)."""
    return os.geteuid() == 0


def xattr_prefix() -> str:
    """The only namespace of overlay metadata the harness reads: the one its own mounts make the kernel honour.

    On a root overlay the kernel reads ``trusted.overlay.*`` and ignores ``user.overlay.*``, which any process may
    set on its own files (the agent, uid 60901, can): read here, such an xattr would make the harness see a
    rename or a deletion the verifier's room never shows. With ``userxattr`` it is the other way round."""
    return "trusted.overlay." if _trusted_xattrs() else "user.overlay."


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
        (base / "lower" / "dir").mkdir()
        (base / "lower" / "dir" / "file").write_bytes(b"in a directory\n")
        check = 'test "$(cat merged/probe)" = lower && echo upper > merged/probe && rm merged/probe'
        check += (
            f" && {shlex.quote(sys.executable)} -c \"import os; os.rename('merged/dir', 'merged/moved')\" 2>/dev/null"
        )
        check += " || { test -e merged/dir && echo 'renaming a directory fails (EXDEV): redirect_dir needs root' >&2"
        check += " && exit 3; }"
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


def is_opaque(path: Path | str, namespace: str | None = None) -> bool:
    """Whether overlayfs marked this upper directory opaque (nothing of the layers below shows through), in the
    namespace the kernel reads (``xattr_prefix``)."""
    with contextlib.suppress(OSError):
        return os.getxattr(path, (namespace or xattr_prefix()) + "opaque", follow_symlinks=False) == b"y"
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
    origins: dict[str, str] = field(default_factory=dict)
    """Directories that merge with a lower directory at another path (a renamed directory, ``redirect_dir``, and
    the directories below it): path -> that lower path."""

    def __bool__(self) -> bool:
        return bool(self.present or self.whiteouts or self.opaque or self.odd or self.dirs)


def scan_upper(upper_fd: int) -> UpperChanges:
    """One walk of the upper directory (by descriptor): O(what the agent changed), never of the repository.

    Overlay metadata is read only in the namespace the kernel honours on the harness's mounts (``xattr_prefix``),
    and a redirect only when it names a path the kernel would look up (``_redirect_target``): anything else is an
    ordinary directory, as the kernel shows it in both rooms."""
    namespace = xattr_prefix()
    present: list[str] = []
    whiteouts: list[str] = []
    opaque: list[str] = []
    dirs: list[str] = []
    odd: list[str] = []
    origins: dict[str, str] = {}
    for top, subdirs, names, dir_fd in os.fwalk(".", dir_fd=upper_fd, follow_symlinks=False):
        prefix = "" if top == "." else top.removeprefix("./") + "/"
        parent = top.removeprefix("./") if top != "." else ""
        for name in subdirs:
            rel = prefix + name
            dirs.append(rel)
            path = f"/proc/self/fd/{dir_fd}/{name}"
            if is_opaque(path, namespace):
                opaque.append(rel)
            redirect = _redirect_target(path, namespace, origins.get(parent, parent) if parent else "")
            if redirect is not None:
                origins[rel] = redirect
            elif parent in origins:
                origins[rel] = f"{origins[parent]}/{name}"
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
    return UpperChanges(present, whiteouts, opaque, dirs, odd, origins)


_MAX_REDIRECT_BYTES = 4096


def _redirect_target(path: str, namespace: str, base: str) -> str | None:
    """The lower-layer path (relative to the layer's root) a renamed directory's redirect names, or None.

    As the kernel reads it (``ovl_get_redirect_xattr``): an absolute value is a path from the layer's root, made of
    non-empty components; a relative one is a single name in the directory's parent (``base``, itself perhaps
    redirected). A ``.`` or ``..`` component, a NUL or anything longer than a path is never a lookup the kernel
    makes, so it is no redirect at all: the directory is an ordinary one. Whether the target exists, and is
    reached without a symlink, is the lower layer's to say when it is read (``lower_files``)."""
    try:
        value = os.getxattr(path, namespace + "redirect", follow_symlinks=False)
    except OSError:
        return None
    if not value or len(value) > _MAX_REDIRECT_BYTES or b"\0" in value:
        return None
    text = value.decode("utf-8", "surrogateescape")
    if text.startswith("/"):
        parts = text[1:].split("/")
    elif "/" in text:
        return None
    else:
        parts = [*(base.split("/") if base else []), text]
    if any(part in ("", ".", "..") for part in parts):
        return None
    return "/".join(parts)


def moved_files(lower_fd: int, changes: UpperChanges) -> dict[str, str]:
    """Files that show at a new path because a directory of the lower layer was renamed (``redirect_dir``):
    merged path -> its lower path. What the upper layer holds at a path (a file, a whiteout, a directory) wins.
    The lower layer is read only below ``lower_fd`` and never through a symlink (``lower_files``)."""
    entries = {*changes.present, *changes.whiteouts, *changes.dirs, *changes.odd}
    opaque = set(changes.opaque)
    found: dict[str, str] = {}
    for rel, origin in changes.origins.items():
        if rel in opaque:
            continue
        try:
            fd = safefs.open_dir_below(lower_fd, origin)
        except (OSError, WorkspaceError):
            continue  # no such directory in the lower layer (or one reached through a link): nothing moved
        try:
            names = os.listdir(fd)
        finally:
            os.close(fd)
        for name in names:
            if f"{rel}/{name}" in entries:
                continue  # the upper layer's own entry (or, for a directory, its own origin above)
            for path in lower_files(lower_fd, f"{origin}/{name}"):
                found[f"{rel}/{path[len(origin) + 1 :]}"] = path
    return found


def lower_kind(lower_fd: int, rel: str) -> str | None:
    """``file``, ``link``, ``dir``, ``other`` or None (absent, or reached only through a symlink) for the lower
    layer's entry at ``rel``."""
    try:
        parent, name = _parent_below(lower_fd, rel)
    except (OSError, WorkspaceError):
        return None
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        return None
    finally:
        os.close(parent)
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "dir" if stat.S_ISDIR(mode) else "other"


def _parent_below(root_fd: int, rel: str) -> tuple[int, str]:
    """The directory holding ``rel`` below ``root_fd`` (opened without following a link) and the last name."""
    head, _, name = rel.rpartition("/")
    if name in ("", ".", ".."):
        raise WorkspaceError(f"unsafe relative path {rel!r}")
    return safefs.open_dir_below(root_fd, head), name


def lower_files(lower_fd: int, rel: str) -> list[str]:
    """The regular files and symlinks of the lower layer at ``rel``: itself, or everything below a directory.

    Read below ``lower_fd`` only, every component opened without following a symlink, so each path returned names
    the entry itself from ``lower_fd`` (a link into the host in the repository's tree is a link, never its
    target's files)."""
    kind = lower_kind(lower_fd, rel)
    if kind in ("file", "link"):
        return [rel]
    if kind != "dir":
        return []
    try:
        top = safefs.open_dir_below(lower_fd, rel)
    except (OSError, WorkspaceError):
        return []
    found: list[str] = []
    try:
        for sub, _subdirs, names, dir_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            prefix = rel if sub == "." else f"{rel}/{sub.removeprefix('./')}"
            for name in names:
                with contextlib.suppress(OSError):
                    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                        found.append(f"{prefix}/{name}")
    finally:
        os.close(top)
    return found


def affected_lower(lower_fd: int, changes: UpperChanges) -> list[str]:
    """The lower layer's files the upper layer changes: replaced, deleted or hidden by an opaque directory."""
    found: set[str] = set()
    for rel in [*changes.present, *changes.whiteouts, *changes.opaque, *changes.odd]:
        found.update(lower_files(lower_fd, rel))
    for rel in changes.dirs:  # a directory that replaced a lower file
        if lower_kind(lower_fd, rel) not in ("dir", None):
            found.update(lower_files(lower_fd, rel))
    for rel in changes.origins:  # a renamed directory hides whatever the lower layer had at its new path
        found.update(lower_files(lower_fd, rel))
    return sorted(found)
