"""Reusable attempt workspaces: one slot per job, reset exactly between attempts, never following the agent.

Creating a worktree costs a checkout of every file; resetting one costs what the agent changed. A slot is a
private repository plus its worktree (see ``workspace.create_attempt_workspace``) in a randomly named build
directory. Right after creation its whole administrative state (everything in the private git dir but the
object store) and the pristine index are kept in memory; a reset throws away everything the agent could have
touched in git — refs, stash, reflogs, config, hooks, info/, per-worktree state and every object it wrote —
restores the saved state, moves the worktree to a fresh unpredictable path, and then lets git bring the files
back (``reset --hard`` + ``clean -ffdx``, which also removes ignored files and nested repositories).

The agent is hostile (DESIGN.md, "Trust boundary"): it may have replaced any directory of the slot with a
symlink to the user's repository. So the reset works only on directory descriptors opened with O_NOFOLLOW and
checked against the (device, inode) recorded at build time (``safefs``); anything unexpected makes the slot be
discarded — the link itself removed, never its target — and rebuilt from scratch. The harness keeps its
bookkeeping (snapshot, pristine index, reset time) in memory, where no relative path reaches it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import ownership, proc, safefs
from worktrial.isolation.environment import ENV_OBJECTS
from worktrial.isolation.patch import PATCH_GIT
from worktrial.isolation.safefs import Identity
from worktrial.isolation.workspace import (
    GIT_DIR_NAME,
    AttemptWorkspace,
    SourceRepo,
    create_attempt_workspace,
    git,
    remove_tree,
)

SCRATCH = "scratch"
log = logging.getLogger(__name__)
_FIND_OUTPUT_LIMIT = 4 * 1024 * 1024
_GITFILE = ".git"


@dataclass(frozen=True)
class AdminSnapshot:
    files: dict[str, tuple[bytes, int]]
    """Administrative files of the private git dir: relative path -> (content, mode)."""
    index_rel: str
    index: bytes
    admin: str
    """Name of the worktree's directory under ``worktrees/`` in the private git dir."""


@dataclass(frozen=True)
class _Ids:
    build: Identity
    git_dir: Identity
    worktree: Identity


def admin_snapshot(ws: AttemptWorkspace) -> AdminSnapshot:
    """The git dir as ``git worktree add`` left it, read before any agent ran."""
    files: dict[str, tuple[bytes, int]] = {}
    index_rel, index = "", b""
    for path in ws.git_dir.rglob("*"):
        rel = path.relative_to(ws.git_dir).as_posix()
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or (rel.startswith("objects/") and rel != "objects/info/alternates"):
            continue
        if path.name == "index" and rel.startswith("worktrees/"):
            index_rel, index = rel, path.read_bytes()
            continue
        files[rel] = (path.read_bytes(), stat.S_IMODE(st.st_mode))
    if not index_rel:
        raise WorkspaceError("new worktree has no index")
    return AdminSnapshot(files=files, index_rel=index_rel, index=index, admin=index_rel.split("/")[1])


def _token(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


class Slot:
    """One reusable workspace; not thread-safe (each job owns one).

    The slot creates its own directory, named ``root`` plus a random suffix, inside ``root``'s parent (which
    must exist); it holds only the current build directory. If the agent replaced it, a new one is made.
    """

    def __init__(
        self,
        source: SourceRepo,
        base_commit: str,
        root: Path,
        prepare: Callable[[AttemptWorkspace], str] | None = None,
        owner: int | None = None,
    ) -> None:
        self.source = source
        self.owner = owner
        """The uid the attempts' sandboxed programs run as when the harness is root: the slot's trees are its."""
        self.pinned_commit = base_commit
        self.base_commit = base_commit
        self._prepare = prepare
        """Runs once per build on the fresh checkout (environment setup) and returns the commit to reset to."""
        self.builds = 0
        self._base = root
        self._parent_id = safefs.identity(root.parent)
        self.root = root
        self._root_id: Identity | None = None
        self._ws: AttemptWorkspace | None = None
        self._ids: _Ids | None = None
        self._snap: AdminSnapshot | None = None
        self._dirty = False
        self._mark = _Mark(0, 0, 0, exact=False)
        self._dir_mode = 0o755
        """The mode git gave the checkout's directories (0777 less the umask), restored where an agent changed it."""

    def acquire(self) -> AttemptWorkspace:
        """A workspace at the base commit with nothing of any earlier attempt in it."""
        if self._ws is not None and self._dirty:
            try:
                self._reset()
            except (WorktrialError, OSError, RecursionError) as exc:
                # Safe (the slot is rebuilt from scratch) but slow, and a sign something fights the reset.
                log.warning("slot %s: reset failed, rebuilding it: %s", self.root, exc)
                self._discard()
        if self._ws is None:
            self._build()
        ws, ids = self._ws, self._ids
        assert ws is not None and ids is not None
        self._dirty = True
        with self._open_build(ids) as build_fd:
            safefs.remove_at(build_fd, SCRATCH)
            os.mkdir(SCRATCH, 0o700, dir_fd=build_fd)
            ownership.hand_over_entry(build_fd, SCRATCH, self.owner)
        return ws

    @property
    def snapshot(self) -> AdminSnapshot | None:
        """The private repository's administrative state as the harness left it before any agent ran."""
        return self._snap

    def untouched(self) -> bool:
        """Whether nothing in the worktree changed since its last reset (one walk, no git), so an attempt whose
        agent changed nothing has an empty patch without asking git. False whenever that cannot be established."""
        ws, ids = self._ws, self._ids
        if ws is None or ids is None:
            return False
        try:
            with (
                self._open_build(ids) as build_fd,
                safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd) as fd,
            ):
                return self._mark.trusted() and not _changed_since(fd, ws.worktree, self._mark.fs_ns)
        except (OSError, WorktrialError):
            return False

    def close(self) -> None:
        self._discard()
        if self._root_id is not None:
            with contextlib.suppress(OSError, WorktrialError), self._open_root() as root_fd:
                safefs.clear_dir(root_fd)
            with contextlib.suppress(OSError):
                os.rmdir(self.root)
            self._root_id = None

    @contextlib.contextmanager
    def _open_root(self) -> Iterator[int]:
        with safefs.opened_dir(self.root, self._root_id) as fd:
            yield fd

    @contextlib.contextmanager
    def _open_build(self, ids: _Ids) -> Iterator[int]:
        assert self._ws is not None
        with self._open_root() as root_fd, safefs.opened_dir(self._ws.root.name, ids.build, dir_fd=root_fd) as fd:
            yield fd

    def _build(self) -> None:
        if self._root_id is None:
            self._make_root()
        self.base_commit = self.pinned_commit
        ws = create_attempt_workspace(self.source, self.base_commit, self.root / _token("b"), worktree_name=_token("w"))
        self.builds += 1
        log.info("slot %s: built at %s (build %d)", self.root, self.base_commit, self.builds)
        try:
            ids = _Ids(safefs.identity(ws.root), safefs.identity(ws.git_dir), safefs.identity(ws.worktree))
            self._dir_mode = stat.S_IMODE(os.stat(ws.worktree).st_mode)
            ownership.hand_over(ws.root, self.owner)  # environment setup already runs as the sandbox's uid
            if self._prepare is not None:
                self.base_commit = self._prepare(ws)
                ownership.hand_over(ws.root, self.owner)  # and what the harness committed for it
            self._snap = admin_snapshot(ws)
        except BaseException:
            remove_tree(ws.root)
            raise
        self._ws, self._ids = ws, ids
        self._dirty = False
        with self._open_build(ids) as build_fd:
            self._mark = _fs_mark(build_fd)

    def _discard(self) -> None:
        """Forget the current build and remove it (a symlink in its place is unlinked, never followed)."""
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(OSError, WorktrialError), self._open_root() as root_fd:
                safefs.remove_at(root_fd, ws.root.name)
        self._ws = self._ids = self._snap = None
        try:
            with self._open_root():
                pass
        except WorktrialError:
            self._root_id = None  # replaced by the agent: the next build makes a new one, never enters this

    def _make_root(self) -> None:
        """A new slot directory, created through a checked descriptor of the run's own directory."""
        name = _token(self._base.name)
        with safefs.opened_dir(self._base.parent, self._parent_id) as parent_fd:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            self._root_id = Identity.of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
        self.root = self._base.parent / name

    def _reset(self) -> None:
        ws, ids, snap = self._ws, self._ids, self._snap
        assert ws is not None and ids is not None and snap is not None
        with contextlib.ExitStack() as fds:
            root_fd = fds.enter_context(self._open_root())
            build_fd = fds.enter_context(safefs.opened_dir(ws.root.name, ids.build, dir_fd=root_fd))
            git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
            if not os.path.lexists(ws.worktree):
                raise WorkspaceError("worktree directory is gone")
            old_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
            # 0. Whatever the agent put next to its worktree is not the harness's: gone.
            safefs.clear_dir(root_fd, keep=frozenset({ws.root.name}))
            safefs.clear_dir(build_fd, keep=frozenset({GIT_DIR_NAME, ws.worktree.name, ENV_OBJECTS, PATCH_GIT}))
            # 1. The private git dir: drop everything, objects the agent wrote included, then restore.
            safefs.clear_dir(git_fd)
            for rel, (data, mode) in snap.files.items():
                safefs.write_at(git_fd, rel, data, mode)
            safefs.makedirs_at(git_fd, "refs/tags")
            safefs.makedirs_at(git_fd, "objects/pack")
            # 2. git trusts stat data at one-second ctime granularity, so an edit that keeps size and restores
            #    the mtime (cp -p, touch -r) within the same second would survive. The filesystem's own ctime,
            #    in nanoseconds, cannot be forged: every file changed since the last reset is removed, and git
            #    restores it below. Files git itself rewrote in the same clock tick only cost a rewrite.
            #    Creating, deleting, renaming, linking or chmod-ing anything changes the ctime of the entry or of
            #    its directory, so when nothing at all is newer than the mark, the tree is still the pristine
            #    checkout and git's two full walks (reset, clean) are skipped.
            changed = _changed_since(old_fd, ws.worktree, self._mark.fs_ns)
            skip_git = not changed and self._mark.trusted()
            for rel in changed.files:
                safefs.unlink_rel(old_fd, rel)
            # 3. A fresh, unpredictable worktree directory: a process that outlived its attempt and writes by
            #    path (or from the old directory) cannot reach the next attempt's files.
            new_name = _token("w")
            os.mkdir(new_name, 0o755, dir_fd=build_fd)
            new_fd = fds.enter_context(safefs.opened_dir(new_name, None, dir_fd=build_fd))
            ownership.hand_over_fd(new_fd, self.owner)
            new_id = Identity.of(os.fstat(new_fd))
            for name in os.listdir(old_fd):
                os.rename(name, name, src_dir_fd=old_fd, dst_dir_fd=new_fd)
            safefs.remove_at(build_fd, ws.worktree.name)
            worktree = ws.root / new_name
            # git restores files, not the modes of directories: a directory the agent chmod-ed (700, or 000 so that
            # git cannot write into it) gets its checkout mode back, parents first.
            for rel in sorted((d for d in changed.dirs if d != "."), key=lambda d: d.count("/")):
                safefs.chmod_dir_rel(new_fd, rel, self._dir_mode)
            admin = f"worktrees/{snap.admin}"
            safefs.write_at(new_fd, _GITFILE, f"gitdir: {ws.git_dir}/{admin}\n".encode())
            safefs.write_at(git_fd, f"{admin}/gitdir", f"{worktree}/{_GITFILE}\n".encode())
            safefs.write_at(git_fd, snap.index_rel, snap.index)
            # 4. Let git restore tracked files and remove everything else, addressing both directories by
            #    descriptor so a symlink swapped in after the checks above is never followed.
            if safefs.has_fd_paths():
                git_dir, work = f"{safefs.fd_path(git_fd)}/{admin}", str(safefs.fd_path(new_fd))
            else:
                git_dir, work = f"{ws.git_dir}/{admin}", str(worktree)
            # Untracked-file caches and fsmonitor could hide what the agent left; never trust them here.
            base = ["-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false"]
            base += [f"--git-dir={git_dir}", f"--work-tree={work}"]
            for args in (["reset", "--quiet", "--hard", self.base_commit], ["clean", "-ffdxq"]):
                if skip_git:
                    break
                result = git([*base, *args], Path(work), foreign_owner=self.owner is not None)
                if not result.ok:
                    raise WorkspaceError(f"reset failed: {result.describe_failure('git ' + args[0])}")
            if self.owner is not None:
                # What the harness restored goes back to the sandbox's uid: the git dir (small: its objects are
                # borrowed), the worktree's link, and every file git brought back, which lies in a directory the
                # agent changed (a deleted file changes its directory) or next to a file it changed.
                ownership.hand_over_fd(git_fd, self.owner, recursive=True)
                ownership.hand_over_entry(new_fd, _GITFILE, self.owner)
                if not skip_git:
                    touched = {".", *changed.dirs, *(os.path.dirname(f) or "." for f in changed.files)}
                    for rel in sorted(touched):
                        ownership.hand_over_rel(new_fd, rel, self.owner)
            self._mark = _fs_mark(build_fd)
        self._ws = replace(ws, worktree=worktree, worktree_id=new_id)
        self._ids = replace(ids, worktree=new_id)


@dataclass(frozen=True)
class _Mark:
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


_CLOCK_SLACK_NS = 1_000_000
_MARK_WAIT_SECS = 0.02


def _fs_mark(dir_fd: int) -> _Mark:
    """A filesystem time after every write made so far, so that anything stamped at or after it is later.

    Coarse timestamps (a clock tick of a few milliseconds, or a second on some filesystems) give writes made in the
    same tick the same ctime: waiting for the next tick separates the harness's last write from the agent's first.
    If the tick does not come within a few milliseconds, the mark is the current time and not ``exact``: every
    reset then runs git in full (the ctime check still removes same-second edits).
    """
    first = _fs_now_ns(dir_fd)
    deadline = time.monotonic() + _MARK_WAIT_SECS
    now = _fs_now_ns(dir_fd)
    while now <= first and time.monotonic() < deadline:
        time.sleep(0.0002)
        now = _fs_now_ns(dir_fd)
    return _Mark(now, time.time_ns(), time.monotonic_ns(), exact=now > first)


def _fs_now_ns(dir_fd: int) -> int:
    """The filesystem clock (coarser than time.time_ns), read from a file just created (and removed)."""
    name = f".worktrial-clock-{secrets.token_hex(6)}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600, dir_fd=dir_fd)
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)


@dataclass(frozen=True)
class _Changes:
    """Entries of a worktree whose ctime is at or after a mark (paths relative to it, without ``./``)."""

    files: list[str]
    dirs: list[str]

    def __bool__(self) -> bool:
        return bool(self.files or self.dirs)


def _changed_since(worktree_fd: int, worktree: Path, mark_ns: int) -> _Changes:
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
    return _Changes(files, dirs)


def _walk_changed(worktree_fd: int, mark_ns: int) -> _Changes:
    files: list[str] = []
    dirs: list[str] = []
    for top, subdirs, names, dir_fd in os.fwalk(".", dir_fd=worktree_fd, follow_symlinks=False):
        if top == ".":
            subdirs[:] = [d for d in subdirs if d != _GITFILE]
            names = [f for f in names if f != _GITFILE]
            if os.fstat(dir_fd).st_ctime_ns >= mark_ns:
                dirs.append(".")
        prefix = "" if top == "." else f"{top.removeprefix('./')}/"
        for name, into in [*((n, files) for n in names), *((d, dirs) for d in subdirs)]:
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(name, dir_fd=dir_fd).st_ctime_ns >= mark_ns:
                    into.append(prefix + name)
    return _Changes(files, dirs)
