"""Reusable attempt checkouts: one slot per job, reset exactly between attempts, never following the agent.

Creating a worktree costs a checkout of every file; resetting one costs what the agent changed. A slot is a
private repository plus its worktree (see ``workspace.create_attempt_workspace``) in a randomly named build
directory. Right after creation its whole administrative state (everything in the private git dir but the
object store) and the pristine index are kept in memory; a reset throws away everything the agent could have
touched in git — refs, stash, reflogs, config, hooks, info/, per-worktree state and every object it wrote —
restores the saved state and puts the files back. Two kinds share this class's bookkeeping and differ in where an
attempt works: ``CopyingSlot`` (``copying_slot.py``) lets it work in the checkout itself and restores what changed;
``OverlaySlot`` (``overlay_slot.py``) gives it an overlay room over the untouched checkout and drops the room.

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
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import ownership, safefs
from worktrial.isolation.change import AgentChange, Staged, finish
from worktrial.isolation.environment import ENV_OBJECTS
from worktrial.isolation.gitdir import KeptGitDir
from worktrial.isolation.patch import PATCH_GIT
from worktrial.isolation.safefs import Identity
from worktrial.isolation.workspace import (
    GIT_DIR_NAME,
    AttemptWorkspace,
    SourceRepo,
    create_attempt_workspace,
    remove_tree,
)

SCRATCH = "scratch"
_INDEX_KEPT = "index-kept"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdminSnapshot:
    files: dict[str, tuple[bytes, int]]
    """Administrative files of the private git dir: relative path -> (content, mode)."""
    index_rel: str
    index: bytes
    admin: str
    """Name of the worktree's directory under ``worktrees/`` in the private git dir."""


@dataclass(frozen=True)
class Ids:
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


def token(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


class Found(Protocol):
    """What a slot kind finds the agent changed: falsy when nothing."""

    def __bool__(self) -> bool: ...


FoundT = TypeVar("FoundT", bound=Found)


KEPT_IN_BUILD = frozenset({GIT_DIR_NAME, ENV_OBJECTS, PATCH_GIT})
"""Entries of the build directory a reset keeps besides the checkout itself; anything else is an attempt's."""


class Slot(ABC, Generic[FoundT]):
    """One reusable attempt checkout; not thread-safe (each job owns one).

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
        self._ids: Ids | None = None
        self._snap: AdminSnapshot | None = None
        self._dirty = False
        self._dir_mode = 0o755
        """The mode git gave the checkout's directories (0777 less the umask), restored where an agent changed it."""
        self.index_id: safefs.FileId | None = None
        """The private index as the harness last wrote it (reset or verifier's room), kept while nothing changed it."""
        self.kept_git: KeptGitDir | None = None
        """What the harness last wrote in the private git dir, for the kinds that rebuild it only when something
        wrote there since (``gitdir.py``)."""

    # What the two kinds do differently.

    @abstractmethod
    def _reset(self) -> None:
        """Everything of the last attempt gone, the checkout as the build left it (raises when it cannot be)."""

    @abstractmethod
    def _room(self, ws: AttemptWorkspace, build_fd: int) -> AttemptWorkspace:
        """Where the next attempt works, once its scratch directory is new."""

    @abstractmethod
    def changes(self) -> FoundT | None:
        """What the attempt's agent changed, found in O(the change); falsy when nothing, None when that cannot be
        established (the caller then assumes everything may have changed)."""

    @abstractmethod
    def _stage(self, changes: FoundT, fds: contextlib.ExitStack, build_fd: int, stage: Path) -> Staged:
        """The change's base side staged under ``stage``, and what the rest of the change is made of."""

    @abstractmethod
    def _unknown_change(self, max_bytes: int | None) -> AgentChange:
        """The change when it could not be found in O(the change)."""

    @abstractmethod
    def verifier_room(self, change: AgentChange) -> AttemptWorkspace:
        """The checkout the verifier's room is made of (``verifier.enter`` then restores its repository), with the
        change's ignored files left out."""

    def ran_in_place(self) -> None:
        """A program ran in the checkout after ``changes`` was taken (verification)."""

    def _after_build(self, ws: AttemptWorkspace, ids: Ids, build_fd: int) -> None:
        """Bookkeeping of a new build, once nothing else will write to it before the first attempt."""

    # Shared.

    def acquire(self) -> AttemptWorkspace:
        """A checkout at the base commit with nothing of any earlier attempt in it."""
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
            room = self._room(ws, build_fd)
            if self.kept_git is not None:
                self.kept_git.settle(build_fd)  # before the room's first program
            return room

    def agent_change(self, max_bytes: int | None) -> AgentChange:
        """What the agent changed, in O(the change) on both kinds: the patch (when ``max_bytes`` is given) and the
        new untracked files the tree ignores (a forged ``__pycache__``, build output), which neither the patch nor
        the verifier's room keeps, as ``git add -A`` and a fresh checkout would not. When the change cannot be
        established that way, what ``_unknown_change`` finds."""
        changes = self.changes()
        if changes is not None and not changes:
            return AgentChange.nothing(max_bytes)
        found = self._staged_change(changes, max_bytes) if changes is not None else None
        return found if found is not None else self._unknown_change(max_bytes)

    def _staged_change(self, changes: FoundT, max_bytes: int | None) -> AgentChange | None:
        ids = self._ids
        if self._ws is None or ids is None:
            return None
        try:
            with contextlib.ExitStack() as fds:
                build_fd = fds.enter_context(self._open_build(ids))
                stage = token("stage")
                os.mkdir(stage, 0o700, dir_fd=build_fd)
                fds.callback(safefs.remove_at, build_fd, stage)
                stage_path = safefs.fd_path(fds.enter_context(safefs.opened_dir(stage, None, dir_fd=build_fd)))
                staged = self._stage(changes, fds, build_fd, stage_path)
                return finish(staged, stage_path, max_bytes, prepared=self._prepare is not None)
        except (OSError, WorktrialError) as exc:
            log.info("slot %s: the agent's change could not be staged: %s", self.root, exc)
            return None

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
    def _open_build(self, ids: Ids) -> Iterator[int]:
        assert self._ws is not None
        with self._open_root() as root_fd, safefs.opened_dir(self._ws.root.name, ids.build, dir_fd=root_fd) as fd:
            yield fd

    def _build(self) -> None:
        if self._root_id is None:
            self._make_root()
        self.base_commit = self.pinned_commit
        ws = create_attempt_workspace(self.source, self.base_commit, self.root / token("b"), worktree_name=token("w"))
        self.builds += 1
        log.info("slot %s: built at %s (build %d)", self.root, self.base_commit, self.builds)
        try:
            ids = Ids(safefs.identity(ws.root), safefs.identity(ws.git_dir), safefs.identity(ws.worktree))
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
            self._after_build(ws, ids, build_fd)

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
        name = token(self._base.name)
        with safefs.opened_dir(self._base.parent, self._parent_id) as parent_fd:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            self._root_id = Identity.of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
        self.root = self._base.parent / name

    def _clear_attempt(self, root_fd: int, build_fd: int, ws: AttemptWorkspace) -> None:
        """Whatever the last attempt put next to its worktree (or in its rooms) is not the harness's: gone."""
        safefs.clear_dir(root_fd, keep=frozenset({ws.root.name}))
        safefs.clear_dir(build_fd, keep=KEPT_IN_BUILD | {ws.worktree.name})

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
