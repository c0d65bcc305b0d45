"""The copying slot: each attempt works in the slot's checkout itself, and the reset restores what it changed.

What changed is found by the filesystem's change times (``ctime.py``), once, after the agent: the same walk gives
the agent's change (its patch and ignored files) and the reset's work. The reset writes back exactly the changed
entries from the base commit's objects (``basetree``), with no walk of the whole tree and no git in it; only when
the clock could not separate the harness's writes from the agent's does git restore everything (``reset --hard`` +
``clean -ffdx``, which also removes ignored files and nested repositories). The worktree moves to a fresh,
unpredictable path at every reset: a program that kept the old path in mind finds nothing there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import ownership, safefs
from worktrial.isolation.basetree import BaseTree, Entry, lstat_kind
from worktrial.isolation.change import AgentChange, Staged, in_git_link, remove_files
from worktrial.isolation.ctime import (
    GITFILE,
    UNMARKED,
    Changes,
    changed_since,
    dir_inodes,
    fs_mark,
    update_dir_inodes,
    with_replaced,
)
from worktrial.isolation.environment import ENV_OBJECTS
from worktrial.isolation.patch import STAGE_OLD, agent_patch
from worktrial.isolation.pool import AdminSnapshot, Ids, Slot, token
from worktrial.isolation.workspace import GIT_DIR_NAME, AttemptWorkspace, SourceRepo, git


class CopyingSlot(Slot[Changes]):
    """A slot whose attempts work in its checkout, restored in O(what changed) between them."""

    def __init__(
        self,
        source: SourceRepo,
        base_commit: str,
        root: Path,
        prepare: Callable[[AttemptWorkspace], str] | None = None,
        owner: int | None = None,
    ) -> None:
        super().__init__(source, base_commit, root, prepare, owner)
        self._mark = UNMARKED
        self._dir_inos: dict[str, int] = {}
        """The inode of every directory of the checkout as the harness left it. A directory whose inode changed
        was replaced (``mv`` of another directory into its place keeps the old change times of the files inside,
        which the ctime walk alone would miss): all of it counts as changed."""
        self._walked: Changes | None = None
        """The changes since the mark, walked after the agent, while no program has run since."""

    def _room(self, ws: AttemptWorkspace, build_fd: int) -> AttemptWorkspace:
        return ws

    def _after_build(self, ws: AttemptWorkspace, ids: Ids, build_fd: int) -> None:
        with safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd) as work_fd:
            self._dir_inos = dir_inodes(work_fd)
        self._mark = fs_mark(build_fd)

    def changes(self) -> Changes | None:
        """The entries newer than the last reset, walked once and kept for the reset while nothing else ran."""
        ws, ids = self._ws, self._ids
        if ws is None or ids is None:
            return None
        try:
            with self._open_build(ids) as build_fd:
                if self._walked is None:
                    if not self._mark.trusted():
                        return None
                    with safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd) as fd:
                        self._walked = with_replaced(
                            changed_since(fd, ws.worktree, self._mark.fs_ns), fd, self._dir_inos
                        )
                return self._walked
        except (OSError, WorktrialError):
            return None

    def _stage(self, changes: Changes, fds: contextlib.ExitStack, build_fd: int, stage: Path) -> Staged:
        ws, ids = self._ws, self._ids
        assert ws is not None and ids is not None
        work_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
        git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
        work = safefs.fd_path(work_fd)
        base = BaseTree(safefs.fd_path(git_fd), self.base_commit, stage)
        kinds = {p: lstat_kind(work / p) for p in changes.files}
        present = [p for p, kind in kinds.items() if kind in ("file", "link") and not in_git_link(p)]
        odd = [p for p, kind in kinds.items() if kind == "other" and not in_git_link(p)]
        known = base.entries(present)
        untracked = [p for p in present if (entry := known[p]) is None or not entry.is_file]
        plan = restore_plan(base, changes, work, unlink=lambda _rel: None)
        base.write(plan.files, stage / STAGE_OLD)
        return Staged(work_fd, present, untracked, odd)

    def _unknown_change(self, max_bytes: int | None) -> AgentChange:
        """The whole-tree way: git diffs the checkout in the harness's own git dir."""
        ws = self._ws
        if max_bytes is None or ws is None:
            return AgentChange.unknown()
        borrowed = [p for p in (self.source.objects_dir, ws.root / ENV_OBJECTS) if p.is_dir()]
        return AgentChange.unknown(agent_patch(ws, self.base_commit, max_bytes, borrowed))

    def verifier_room(self, change: AgentChange) -> AttemptWorkspace:
        """The checkout itself, without the new untracked files the tree ignores (as ``git clean -X`` would remove
        them, without its walk of the whole tree)."""
        ws = self._ws
        assert ws is not None
        if change.ignored:
            with safefs.opened_dir(ws.worktree, ws.worktree_id) as work_fd:
                remove_files(work_fd, change.ignored)
        return ws

    def ran_in_place(self) -> None:
        """Verification ran in the worktree after ``changes`` was taken, so the reset must walk again."""
        self._walked = None

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
            self._clear_attempt(root_fd, build_fd, ws)
            self._restore_git_dir(git_fd, snap, build_fd)
            # The entries newer than the mark are all that changed (the walk taken after the agent when no program
            # ran since); an untrusted clock makes git restore everything instead.
            trusted = self._mark.trusted()
            if walked is None or not trusted:
                walked = with_replaced(changed_since(work_fd, ws.worktree, self._mark.fs_ns), work_fd, self._dir_inos)
            # A fresh, unpredictable worktree path (one rename; every process of the attempt has ended).
            worktree = ws.root / token("w")
            os.rename(ws.worktree.name, worktree.name, src_dir_fd=build_fd, dst_dir_fd=build_fd)
            plan = self._put_back(walked, trusted, work_fd, build_fd, git_fd)
            self._relink(ws, snap, worktree, work_fd, git_fd)
            if not trusted:
                self._git_reset(ws, snap, worktree, work_fd, git_fd)
            self._hand_back(walked, trusted, work_fd, git_fd)
            self.index_id = safefs.file_id(git_fd, snap.index_rel)
            if plan is not None:
                update_dir_inodes(self._dir_inos, work_fd, walked, plan.remove, plan.files)
            elif trusted:
                update_dir_inodes(self._dir_inos, work_fd, walked, (), ())
            else:
                self._dir_inos = dir_inodes(work_fd)
            self._mark = fs_mark(build_fd)
        self._ws = replace(ws, worktree=worktree)

    def _put_back(
        self, changed: Changes, trusted: bool, work_fd: int, build_fd: int, git_fd: int
    ) -> RestorePlan | None:
        """Exactly what changed back from the base commit's objects (no walk, no index, no git in the tree), or,
        when the clock is not ``trusted``, the changed files removed for git to restore; then the checkout's mode
        on every directory the agent changed (git restores files, not the modes of directories: one chmod-ed to
        000 would stop git writing into it), parents first."""
        plan = None
        if trusted:
            plan = self._restore(changed, work_fd, build_fd, git_fd)
        else:
            for rel in changed.files:
                safefs.unlink_rel(work_fd, rel)
        for rel in sorted((d for d in changed.dirs if d != "."), key=lambda d: d.count("/")):
            safefs.chmod_dir_rel(work_fd, rel, self._dir_mode)
        if "." in changed.dirs:
            os.fchmod(work_fd, self._dir_mode)
        return plan

    def _relink(self, ws: AttemptWorkspace, snap: AdminSnapshot, worktree: Path, work_fd: int, git_fd: int) -> None:
        """The worktree's ``.git`` link and the git dir's note of the worktree's (new) path."""
        admin = f"worktrees/{snap.admin}"
        safefs.write_at(work_fd, GITFILE, f"gitdir: {ws.git_dir}/{admin}\n".encode())
        safefs.write_at(git_fd, f"{admin}/gitdir", f"{worktree}/{GITFILE}\n".encode())

    def _git_reset(self, ws: AttemptWorkspace, snap: AdminSnapshot, worktree: Path, work_fd: int, git_fd: int) -> None:
        """git restores everything, in the git dir just restored from the harness's snapshot."""
        admin = f"worktrees/{snap.admin}"
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

    def _hand_back(self, changed: Changes, trusted: bool, work_fd: int, git_fd: int) -> None:
        """What the harness restored goes back to the sandbox's uid: the git dir (small: its objects are borrowed),
        the worktree's link, and every file brought back, which lies in a directory the agent changed (a deleted
        file changes its directory) or next to a file it changed."""
        if self.owner is None:
            return
        ownership.hand_over_fd(git_fd, self.owner, recursive=True)
        ownership.hand_over_entry(work_fd, GITFILE, self.owner)
        if changed or not trusted:
            touched = {".", *changed.dirs, *(os.path.dirname(f) or "." for f in changed.files)}
            for rel in sorted(touched):
                ownership.hand_over_rel(work_fd, rel, self.owner)

    def _restore(self, changed: Changes, work_fd: int, build_fd: int, git_fd: int) -> RestorePlan | None:
        """The worktree back to the base commit at the changed entries only; what it did."""
        if not changed:
            return None
        stage = token("stage")
        os.mkdir(stage, 0o700, dir_fd=build_fd)
        try:
            with safefs.opened_dir(stage, None, dir_fd=build_fd) as stage_fd:
                base = BaseTree(safefs.fd_path(git_fd), self.base_commit, safefs.fd_path(stage_fd))
                work = safefs.fd_path(work_fd)
                wanted = restore_plan(base, changed, work, unlink=lambda rel: safefs.unlink_rel(work_fd, rel))
                for rel in wanted.remove:
                    _remove_rel(work_fd, rel)
                base.write(wanted.files, work)
                return wanted
        finally:
            safefs.remove_at(build_fd, stage)


def _remove_rel(work_fd: int, rel: str) -> None:
    parent, _, name = rel.rpartition("/")
    if not parent:
        safefs.remove_at(work_fd, name)
        return
    with contextlib.suppress(OSError, WorktrialError), safefs.opened_dir(parent, None, dir_fd=work_fd) as parent_fd:
        safefs.remove_at(parent_fd, name)


@dataclass(frozen=True)
class RestorePlan:
    files: dict[str, Entry]
    """Base files to write back (path -> base entry): changed, deleted, or below a replaced directory."""
    remove: list[str]
    """Directories (or other entries) the base does not have there, removed with all below them."""


def restore_plan(base: BaseTree, changed: Changes, work: Path, unlink: Callable[[str], None]) -> RestorePlan:
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
