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
from worktrial.isolation import overlay, ownership, proc, safefs
from worktrial.isolation.basetree import BaseTree, Entry, lstat_kind
from worktrial.isolation.environment import ENV_OBJECTS
from worktrial.isolation.overlay import Layers
from worktrial.isolation.patch import (
    PATCH_GIT,
    STAGE_NEW,
    STAGE_OLD,
    PatchData,
    harness_git_env,
    link_or_copy,
    staged_patch,
)
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
_INDEX_KEPT = "index-kept"
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
        overlay: bool = False,
    ) -> None:
        self.source = source
        self.overlay = overlay
        """Whether each attempt gets an overlay room over the pristine checkout (``overlay.py``) instead of the
        checkout itself; the caller decides (a sandbox that mounts it, agents whose file access is all sandboxed)."""
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
        self._dir_inos: dict[str, int] = {}
        """Copying path: the inode of every directory of the checkout as the harness left it. A directory whose inode
        changed was replaced (``mv`` of another directory into its place keeps the old change times of the files
        inside, which the ctime walk alone would miss): all of it counts as changed."""
        self._walked: _Changes | None = None
        """Copying path: the changes since the mark, walked after the agent, while no program has run since."""
        self.index_id: safefs.FileId | None = None
        """The private index as the harness last wrote it (reset or verifier's room), kept while nothing changed it."""
        self._room: AttemptWorkspace | None = None
        """Overlay path: the current attempt's room (its worktree is the mount point of ``layers``)."""

    def acquire(self) -> AttemptWorkspace:
        """A workspace at the base commit with nothing of any earlier attempt in it."""
        if self._ws is not None and self._dirty:
            try:
                self._reset_overlay() if self.overlay else self._reset()
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
            if self.overlay:
                self._room = self._new_room(ws, build_fd)
                return self._room
        return ws

    def _new_room(self, ws: AttemptWorkspace, build_fd: int) -> AttemptWorkspace:
        """A fresh upper directory, overlayfs work directory and mount point for the next attempt: O(1)."""
        upper, work, mount = _token("up"), _token("wk"), _token("w")
        os.mkdir(upper, self._dir_mode, dir_fd=build_fd)
        os.chmod(upper, self._dir_mode, dir_fd=build_fd)  # the merged root takes the upper root's mode and owner
        ownership.hand_over_entry(build_fd, upper, self.owner)
        os.mkdir(work, 0o700, dir_fd=build_fd)
        os.mkdir(mount, 0o755, dir_fd=build_fd)
        assert self._snap is not None
        with safefs.opened_dir(GIT_DIR_NAME, None, dir_fd=build_fd) as git_fd:
            path = f"worktrees/{self._snap.admin}/gitdir"
            safefs.write_at(git_fd, path, f"{ws.root / mount}/{_GITFILE}\n".encode())
            ownership.hand_over_entry(git_fd, path, self.owner)
        layers = Layers(ws.root, (ws.worktree.name,), upper, work, mount)
        return replace(ws, worktree=ws.root / mount, worktree_id=safefs.identity(ws.root / mount), layers=layers)

    def verifier_room(self, ignored: list[str]) -> AttemptWorkspace:
        """Overlay path: the verifier's room over the current attempt's. The agent's upper directory, kept as data
        (regular files, symlinks, directories and whiteouts; its ``.git`` link never), becomes a read-only layer
        above the pristine checkout, with a new upper directory for what verification writes. ``ignored``: new
        untracked files the tree ignores, left out (see ``agent_change``)."""
        room, ws, ids = self._room, self._ws, self._ids
        assert room is not None and room.layers is not None and ws is not None and ids is not None
        agent = room.layers.upper
        with self._open_build(ids) as build_fd:
            with safefs.opened_dir(agent, None, dir_fd=build_fd) as upper_fd:
                changes = overlay.scan_upper(upper_fd)
                remove_files(upper_fd, [*changes.odd, *ignored])
                safefs.remove_at(upper_fd, _GITFILE)  # the lower layer's link, written by the harness, shows
            upper, work, mount = _token("vu"), _token("vw"), _token("v")
            os.mkdir(upper, self._dir_mode, dir_fd=build_fd)
            os.chmod(upper, self._dir_mode, dir_fd=build_fd)
            ownership.hand_over_entry(build_fd, upper, self.owner)
            os.mkdir(work, 0o700, dir_fd=build_fd)
            os.mkdir(mount, 0o755, dir_fd=build_fd)
        layers = Layers(ws.root, (agent, ws.worktree.name), upper, work, mount)
        return replace(room, worktree=ws.root / mount, worktree_id=safefs.identity(ws.root / mount), layers=layers)

    def changes(self) -> overlay.UpperChanges | _Changes | None:
        """What the attempt's agent changed, found in O(the change): the upper directory of its room, or (copying
        path) the entries newer than the last reset, walked once and kept for the reset while nothing else ran.
        None when that cannot be established (the caller then assumes everything may have changed)."""
        ws, ids = self._ws, self._ids
        if ws is None or ids is None:
            return None
        try:
            with self._open_build(ids) as build_fd:
                if self.overlay:
                    assert self._room is not None and self._room.layers is not None
                    with safefs.opened_dir(self._room.layers.upper, None, dir_fd=build_fd) as upper_fd:
                        return overlay.scan_upper(upper_fd)
                if self._walked is None:
                    if not self._mark.trusted():
                        return None
                    with safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd) as fd:
                        self._walked = _with_replaced(
                            _changed_since(fd, ws.worktree, self._mark.fs_ns), fd, self._dir_inos
                        )
                return self._walked
        except (OSError, WorktrialError):
            return None

    def agent_change(self, max_bytes: int | None) -> AgentChange | None:
        """What the agent changed, in O(the change) on both paths: the patch (when ``max_bytes`` is given) and the
        new untracked files the tree ignores (a forged ``__pycache__``, build output), which neither the patch nor
        the verifier's room keeps, as ``git add -A`` and a fresh checkout would not. None when the change cannot be
        established (the caller falls back to the whole-tree way)."""
        ws, ids = self._ws, self._ids
        changes = self.changes()
        if ws is None or ids is None or changes is None:
            return None
        if not changes:
            empty = PatchData(diff=b"", total_bytes=0, truncated=False, files=[]) if max_bytes is not None else None
            return AgentChange(empty, [], untouched=True)
        try:
            with contextlib.ExitStack() as fds:
                build_fd = fds.enter_context(self._open_build(ids))
                stage = _token("stage")
                os.mkdir(stage, 0o700, dir_fd=build_fd)
                fds.callback(safefs.remove_at, build_fd, stage)
                stage_fd = fds.enter_context(safefs.opened_dir(stage, None, dir_fd=build_fd))
                stage_path = safefs.fd_path(stage_fd)
                if isinstance(changes, overlay.UpperChanges):
                    assert self._room is not None and self._room.layers is not None
                    upper_fd = fds.enter_context(safefs.opened_dir(self._room.layers.upper, None, dir_fd=build_fd))
                    lower_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
                    new_fd, lower = upper_fd, safefs.fd_path(lower_fd)
                    hidden = set(changes.opaque)
                    odd = list(changes.odd)
                    moved = overlay.moved_files(lower, changes)
                    present = [p for p in [*changes.present, *moved] if not _in_git_link(p)]
                    untracked = [p for p in present if lstat_kind(lower / p) not in ("file", "link")]
                    old = overlay.affected_lower(lower, changes)
                    for rel in old:
                        link_or_copy(rel, stage_path / STAGE_OLD / rel, src_dir_fd=lower_fd)
                else:
                    lower_fd, hidden, moved = -1, set(), {}
                    work_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
                    git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
                    new_fd, work = work_fd, safefs.fd_path(work_fd)
                    base = BaseTree(safefs.fd_path(git_fd), self.base_commit, stage_path)
                    kinds = {p: lstat_kind(work / p) for p in changes.files}
                    present = [p for p, kind in kinds.items() if kind in ("file", "link")]
                    odd = [p for p, kind in kinds.items() if kind == "other" and not _in_git_link(p)]
                    present = [p for p in present if not _in_git_link(p)]
                    known = base.entries(present)
                    untracked = [p for p in present if known[p] is None or not known[p].is_file]  # type: ignore[union-attr]
                    plan = restore_plan(base, changes, work, unlink=lambda _rel: None)
                    base.write(plan.files, stage_path / STAGE_OLD)
                nested = _nested_repositories(present)
                inside = tuple(f"{root}/" for root in nested)
                present = [p for p in present if not p.startswith(inside)]
                untracked = [p for p in untracked if not p.startswith(inside)]
                # With a patch to make on a base an environment setup committed (ignored files too: ``__pycache__``),
                # the tracked files as well: a changed one the rules ignore is that build output, shown collapsed.
                # Elsewhere a tracked file is ignored only if the user force-added it, and the check would cost an
                # attempt that changed no untracked file a git process (~5 ms CPU).
                asked = present if max_bytes is not None and self._prepare is not None else untracked
                matched = _ignored(stage_path, new_fd, asked, lower_fd if self.overlay else None, hidden)
                new = set(untracked)
                ignored = [p for p in matched if p in new]
                ignored_tracked = [p for p in matched if p not in new]
                ignored += odd  # FIFOs, sockets: not file contents, in neither the patch nor the verifier's room
                if max_bytes is None:
                    return AgentChange(None, ignored, untouched=False)
                skip = set(ignored)
                for rel in present:
                    if rel in moved:  # a renamed directory's file: the lower layer holds it, at its old path
                        link_or_copy(moved[rel], stage_path / STAGE_NEW / rel, src_dir_fd=lower_fd)
                    elif rel not in skip:
                        link_or_copy(rel, stage_path / STAGE_NEW / rel, src_dir_fd=new_fd)
                patch = staged_patch(stage_path, max_bytes)
                if patch is not None and nested:
                    patch = _with_gitlinks(patch, {root: _nested_head(new_fd, root) for root in nested}, max_bytes)
                if patch is not None and ignored_tracked:
                    patch = replace(patch, ignored=sorted(ignored_tracked))
                return AgentChange(patch, ignored, untouched=False)
        except (OSError, WorktrialError) as exc:
            log.info("slot %s: the agent's change could not be staged: %s", self.root, exc)
            return None

    def ran_in_place(self) -> None:
        """Copying path: a program ran in the worktree after ``changes`` was taken (verification), so the reset
        must walk again."""
        self._walked = None

    @property
    def pristine(self) -> Path | None:
        """Overlay path: the slot's pristine checkout, the lower layer of every room."""
        return self._ws.worktree if self._ws is not None and self.overlay else None

    @property
    def snapshot(self) -> AdminSnapshot | None:
        """The private repository's administrative state as the harness left it before any agent ran."""
        return self._snap

    def untouched(self) -> bool:
        """Whether nothing in the worktree changed since its last reset (no git; see ``changes``), so an attempt
        whose agent changed nothing has an empty patch without asking git. False whenever that cannot be
        established."""
        changes = self.changes()
        return changes is not None and not changes

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
            if not self.overlay:
                with safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd) as work_fd:
                    self._dir_inos = _dir_inodes(work_fd)
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

    def _restore_git_dir(self, git_fd: int, snap: AdminSnapshot, build_fd: int) -> None:
        """The private git dir: drop everything, objects the agent wrote included, then restore the snapshot. The
        index (megabytes in a large repository) is kept instead of written again when it is still, to the inode,
        the one the harness left (see ``safefs.stash_if_same``)."""
        kept = safefs.stash_if_same(git_fd, snap.index_rel, self.index_id, build_fd, _INDEX_KEPT)
        safefs.clear_dir(git_fd)
        for rel, (data, mode) in snap.files.items():
            safefs.write_at(git_fd, rel, data, mode)
        safefs.makedirs_at(git_fd, "refs/tags")
        safefs.makedirs_at(git_fd, "objects/pack")
        if kept:
            os.rename(_INDEX_KEPT, snap.index_rel, src_dir_fd=build_fd, dst_dir_fd=git_fd)
        else:
            safefs.write_at(git_fd, snap.index_rel, snap.index)

    def _reset_overlay(self) -> None:
        """Overlay path: everything of the last attempt is in entries of the build directory that are not the
        pristine checkout (its rooms' upper and work directories, mount points, scratch): they go, the git dir
        is restored, and the pristine checkout, which no attempt's program ever had in sight, stays as it is."""
        ws, ids, snap = self._ws, self._ids, self._snap
        assert ws is not None and ids is not None and snap is not None
        self._room = None
        with contextlib.ExitStack() as fds:
            root_fd = fds.enter_context(self._open_root())
            build_fd = fds.enter_context(safefs.opened_dir(ws.root.name, ids.build, dir_fd=root_fd))
            git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
            fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
            safefs.clear_dir(root_fd, keep=frozenset({ws.root.name}))
            safefs.clear_dir(build_fd, keep=frozenset({GIT_DIR_NAME, ws.worktree.name, ENV_OBJECTS, PATCH_GIT}))
            self._restore_git_dir(git_fd, snap, build_fd)
            ownership.hand_over_fd(git_fd, self.owner, recursive=True)
            self.index_id = safefs.file_id(git_fd, snap.index_rel)

    def _reset(self) -> None:
        ws, ids, snap = self._ws, self._ids, self._snap
        assert ws is not None and ids is not None and snap is not None
        walked, self._walked = self._walked, None
        with contextlib.ExitStack() as fds:
            root_fd = fds.enter_context(self._open_root())
            build_fd = fds.enter_context(safefs.opened_dir(ws.root.name, ids.build, dir_fd=root_fd))
            git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
            if not os.path.lexists(ws.worktree):
                raise WorkspaceError("worktree directory is gone")
            work_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
            # 0. Whatever the agent put next to its worktree is not the harness's: gone.
            safefs.clear_dir(root_fd, keep=frozenset({ws.root.name}))
            safefs.clear_dir(build_fd, keep=frozenset({GIT_DIR_NAME, ws.worktree.name, ENV_OBJECTS, PATCH_GIT}))
            # 1. The private git dir: drop everything, objects the agent wrote included, then restore.
            self._restore_git_dir(git_fd, snap, build_fd)
            # 2. git trusts stat data at one-second ctime granularity, so an edit that keeps size and restores
            #    the mtime (cp -p, touch -r) within the same second would survive. The filesystem's own ctime,
            #    in nanoseconds, cannot be forged: creating, deleting, renaming, linking or chmod-ing anything
            #    changes the ctime of the entry or of its directory, so the entries newer than the mark are all
            #    that changed (one walk; the one taken after the agent when no program ran since).
            trusted = self._mark.trusted()
            if walked is None or not trusted:
                walked = _with_replaced(_changed_since(work_fd, ws.worktree, self._mark.fs_ns), work_fd, self._dir_inos)
            changed = walked
            # 3. A fresh, unpredictable worktree path (one rename): a program that kept the old path in mind finds
            #    nothing there. (Every process of the attempt has ended before a reset.)
            new_name = _token("w")
            os.rename(ws.worktree.name, new_name, src_dir_fd=build_fd, dst_dir_fd=build_fd)
            worktree = ws.root / new_name
            plan = None
            if trusted:
                # 4. Put back exactly what changed, from the base commit's objects (no walk, no index, no git in the
                #    tree), and remove what the base does not have.
                plan = self._restore(changed, work_fd, build_fd, git_fd)
            else:
                # 4'. The clock could not separate the harness's writes from the agent's: git restores everything.
                for rel in changed.files:
                    safefs.unlink_rel(work_fd, rel)
            # git restores files, not the modes of directories: a directory the agent chmod-ed (700, or 000 so that
            # git cannot write into it) gets its checkout mode back, parents first.
            for rel in sorted((d for d in changed.dirs if d != "."), key=lambda d: d.count("/")):
                safefs.chmod_dir_rel(work_fd, rel, self._dir_mode)
            if "." in changed.dirs:
                os.fchmod(work_fd, self._dir_mode)
            admin = f"worktrees/{snap.admin}"
            safefs.write_at(work_fd, _GITFILE, f"gitdir: {ws.git_dir}/{admin}\n".encode())
            safefs.write_at(git_fd, f"{admin}/gitdir", f"{worktree}/{_GITFILE}\n".encode())
            if not trusted:
                if safefs.has_fd_paths():
                    git_dir, work = f"{safefs.fd_path(git_fd)}/{admin}", str(safefs.fd_path(work_fd))
                else:
                    git_dir, work = f"{ws.git_dir}/{admin}", str(worktree)
                # Untracked-file caches and fsmonitor could hide what the agent left; never trust them here.
                base = ["-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false"]
                base += [f"--git-dir={git_dir}", f"--work-tree={work}"]
                for args in (["reset", "--quiet", "--hard", self.base_commit], ["clean", "-ffdxq"]):
                    result = git([*base, *args], Path(work), foreign_owner=self.owner is not None)
                    if not result.ok:
                        raise WorkspaceError(f"reset failed: {result.describe_failure('git ' + args[0])}")
            if self.owner is not None:
                # What the harness restored goes back to the sandbox's uid: the git dir (small: its objects are
                # borrowed), the worktree's link, and every file brought back, which lies in a directory the
                # agent changed (a deleted file changes its directory) or next to a file it changed.
                ownership.hand_over_fd(git_fd, self.owner, recursive=True)
                ownership.hand_over_entry(work_fd, _GITFILE, self.owner)
                if changed or not trusted:
                    touched = {".", *changed.dirs, *(os.path.dirname(f) or "." for f in changed.files)}
                    for rel in sorted(touched):
                        ownership.hand_over_rel(work_fd, rel, self.owner)
            self.index_id = safefs.file_id(git_fd, snap.index_rel)
            if trusted:
                _update_dir_inodes(self._dir_inos, work_fd, changed, plan)
            else:
                self._dir_inos = _dir_inodes(work_fd)
            self._mark = _fs_mark(build_fd)
        self._ws = replace(ws, worktree=worktree)

    def _restore(self, changed: _Changes, work_fd: int, build_fd: int, git_fd: int) -> RestorePlan | None:
        """Copying path: the worktree back to the base commit at the changed entries only; what it did."""
        if not changed:
            return None
        stage = _token("stage")
        os.mkdir(stage, 0o700, dir_fd=build_fd)
        try:
            with safefs.opened_dir(stage, None, dir_fd=build_fd) as stage_fd:
                base = BaseTree(safefs.fd_path(git_fd), self.base_commit, safefs.fd_path(stage_fd))
                work = safefs.fd_path(work_fd)
                wanted = restore_plan(base, changed, work, unlink=lambda rel: safefs.unlink_rel(work_fd, rel))
                for rel in wanted.remove:
                    parent, _, name = rel.rpartition("/")
                    if parent:
                        with (
                            contextlib.suppress(OSError, WorktrialError),
                            safefs.opened_dir(parent, None, dir_fd=work_fd) as parent_fd,
                        ):
                            safefs.remove_at(parent_fd, name)
                    else:
                        safefs.remove_at(work_fd, name)
                base.write(wanted.files, work)
                return wanted
        finally:
            safefs.remove_at(build_fd, stage)


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


@dataclass(frozen=True)
class RestorePlan:
    files: dict[str, Entry]
    """Base files to write back (path -> base entry): changed, deleted, or below a replaced directory."""
    remove: list[str]
    """Directories (or other entries) the base does not have there, removed with all below them."""


def restore_plan(base: BaseTree, changed: _Changes, work: Path, unlink: Callable[[str], None]) -> RestorePlan:
    """What puts the changed entries of ``work`` back to ``base``; changed files are unlinked on the way (a file
    the base has at that path is then written anew, so its content and mode are the base's whatever the agent
    did)."""
    files: dict[str, Entry] = {}
    for rel, entry in base.entries(changed.files).items():
        unlink(rel)
        if entry is not None and entry.is_tree:
            files.update(base.files_under(rel))
        elif entry is not None and entry.is_file:
            files[rel] = entry
    remove: list[str] = []
    trees = base.trees(changed.dirs)
    for d in sorted(changed.dirs, key=lambda d: d.count("/")):
        tree = trees[d]
        if tree is None:
            if d != "." and not any(d.startswith(r + "/") for r in remove):
                remove.append(d)
            continue
        for name, entry in tree.items():
            rel = name if d == "." else f"{d}/{name}"
            now = lstat_kind(work / rel)
            if entry.is_tree and now != "dir":
                if now is not None:
                    remove.append(rel)
                files.update(base.files_under(rel))
            elif entry.is_file and now not in ("file", "link"):
                if now is not None:
                    remove.append(rel)
                files[rel] = entry
    return RestorePlan(files, remove)


@dataclass(frozen=True)
class AgentChange:
    patch: PatchData | None
    ignored: list[str]
    """What the verifier's room leaves out (paths relative to the worktree): new untracked files the tree's ignore
    rules match, and entries that are not file contents (a FIFO, a socket)."""
    untouched: bool


def _in_git_link(rel: str) -> bool:
    """The worktree's ``.git`` link (or anything the agent put in its place) is the harness's, never the change."""
    return rel == _GITFILE or rel.startswith(_GITFILE + "/")


def _ignored(
    stage: Path, tree_fd: int, paths: list[str], lower_fd: int | None = None, opaque: set[str] | None = None
) -> list[str]:
    """Which of ``paths`` (new untracked files) the tree's ``.gitignore`` files ignore.

    ``lower_fd``: ``tree_fd`` is an overlay's upper directory and this its lower layer: a ``.gitignore`` the upper
    directory does not have (and does not hide: a whiteout, or an ``opaque`` directory above it) is the lower's.

    The ``.gitignore`` files that apply (in the directories leading to each path, as the agent left them) are
    copied into a directory of their own, and ``git check-ignore`` reads only that, with no repository: no
    file of the agent's but those few is read, and no configuration of its (excludes, attributes) is used."""
    if not paths:
        return []
    rules = stage / "rules"
    rules.mkdir()
    dirs = {""}
    for rel in paths:
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for d in sorted(dirs):
        name = f"{d}/.gitignore" if d else ".gitignore"
        source = tree_fd
        if lower_fd is not None and lstat_kind(safefs.fd_path(tree_fd) / name) is None:
            parts = d.split("/") if d else []
            shadowed = any("/".join(parts[: i + 1]) in (opaque or set()) for i in range(len(parts)))
            source = -1 if shadowed else lower_fd
        with contextlib.suppress(OSError):
            if source >= 0 and stat.S_ISREG(os.stat(name, dir_fd=source, follow_symlinks=False).st_mode):
                link_or_copy(name, rules / name, src_dir_fd=source)
    if not any(rules.rglob(".gitignore")):
        return []
    env = harness_git_env(GIT_CEILING_DIRECTORIES=str(stage))
    empty = stage / "empty.git"  # the least git accepts as a repository, written here (no ``git init``)
    for sub in ("objects", "refs"):
        (empty / sub).mkdir(parents=True)
    (empty / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (empty / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    argv = ["git", "-c", "core.excludesFile=/dev/null", f"--git-dir={empty}", f"--work-tree={rules}"]
    argv += ["check-ignore", "--no-index", "-z", "--stdin"]
    data = b"".join(os.fsencode(p) + b"\0" for p in paths)
    result = proc.run(argv, cwd=rules, env=env, timeout=120, stdin=data, sweep=False, tail_bytes=64 * 1024 * 1024)
    if result.returncode not in (0, 1):
        raise WorkspaceError(f"reading ignore rules: {result.describe_failure('git check-ignore')}")
    return [os.fsdecode(p) for p in result.stdout_tail.split(b"\0") if p]


def _nested_repositories(present: list[str]) -> list[str]:
    """Directories of the change that hold a repository of their own (a ``.git`` inside): as ``git add -A`` does,
    the change names each as one entry (a gitlink), never the files inside it."""
    roots: set[str] = set()
    for rel in present:
        parts = rel.split("/")
        for i, part in enumerate(parts[1:], start=1):
            if part == _GITFILE:
                roots.add("/".join(parts[:i]))
                break
    return sorted(r for r in roots if not any(r.startswith(o + "/") for o in roots))


_ZERO = "0" * 40


def _nested_head(tree_fd: int, root: str) -> str:
    """The commit a nested repository's HEAD names, read as data (a few small files, never a link); zeros if none."""
    base = safefs.fd_path(tree_fd) / root / _GITFILE
    try:
        text = safefs.read_regular(base / "HEAD", 4096).decode("ascii", "replace").strip()
        for _ in range(5):
            if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
                return text
            if not text.startswith("ref: refs/") or ".." in text:
                return _ZERO
            text = safefs.read_regular(base / text[5:], 4096).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return _ZERO
    return _ZERO


def _with_gitlinks(patch: PatchData, heads: dict[str, str], max_bytes: int) -> PatchData:
    """The patch with one new gitlink per nested repository, as git prints a submodule it was not told about."""
    extra = b"".join(
        f"diff --git a/{root} b/{root}\nnew file mode 160000\nindex 0000000..{head[:7]}\n--- /dev/null\n"
        f"+++ b/{root}\n@@ -0,0 +1 @@\n+Subproject commit {head}\n".encode("utf-8", "surrogateescape")
        for root, head in sorted(heads.items())
    )
    diff = (patch.diff + extra)[:max_bytes] if not patch.truncated else patch.diff
    total = patch.total_bytes + len(extra)
    files = sorted([*patch.files, *heads])
    return PatchData(diff=diff, total_bytes=total, truncated=total > max_bytes, files=files)


def remove_files(tree_fd: int, rels: list[str]) -> None:
    """Unlink these files below ``tree_fd`` (a symlinked component stops one), then the directories that held them
    and are empty now, as ``git clean`` leaves no empty directory of untracked files behind."""
    parents: set[str] = set()
    for rel in rels:
        safefs.unlink_rel(tree_fd, rel)
        parts = rel.split("/")[:-1]
        parents.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for rel in sorted(parents, key=lambda p: -p.count("/")):
        parent, _, name = rel.rpartition("/")
        with contextlib.suppress(OSError, WorktrialError):
            if not parent:
                os.rmdir(name, dir_fd=tree_fd)
                continue
            with safefs.opened_dir(parent, None, dir_fd=tree_fd) as parent_fd:
                os.rmdir(name, dir_fd=parent_fd)


def _dir_inodes(work_fd: int) -> dict[str, int]:
    """Every directory of the worktree (but ``.git``) -> its inode (one walk, at a slot's build)."""
    found = {".": os.fstat(work_fd).st_ino}
    for top, subdirs, _names, dir_fd in os.fwalk(".", dir_fd=work_fd, follow_symlinks=False):
        if top == ".":
            subdirs[:] = [d for d in subdirs if d != _GITFILE]
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


def _with_replaced(changes: _Changes, work_fd: int, inodes: dict[str, int]) -> _Changes:
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
    return _Changes(sorted(files), sorted(dirs))


def _update_dir_inodes(inodes: dict[str, int], work_fd: int, changed: _Changes, plan: RestorePlan | None) -> None:
    """After a reset, in proportion to it: what it removed loses its entries, the directories it kept or made (those
    of the changed entries, and the parents of every file it wrote back) get their inode."""
    if plan is not None:
        for rel in plan.remove:
            for key in [k for k in inodes if k == rel or k.startswith(rel + "/")]:
                del inodes[key]
    touched = {".", *changed.dirs}
    for path in plan.files if plan is not None else ():
        parts = path.split("/")[:-1]
        touched.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for rel in touched:
        ino = _inode_of(work_fd, rel)
        if ino is None:
            inodes.pop(rel, None)
        else:
            inodes[rel] = ino
