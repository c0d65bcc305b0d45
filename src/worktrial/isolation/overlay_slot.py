"""The overlay slot: each attempt works in an overlay room over the slot's pristine checkout (``overlay.py``).

No program of an attempt ever writes the pristine checkout: a room is a new upper directory (O(1)), the agent's
change is what that directory holds, and the reset removes it. The verifier's room stacks the agent's upper
directory, taken as data, over the pristine checkout, with an upper directory of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from worktrial.errors import WorktrialError
from worktrial.isolation import overlay, ownership, safefs, slot_ns
from worktrial.isolation.change import GITFILE, AgentChange, Staged, in_git_link, remove_files
from worktrial.isolation.gitdir import KeptGitDir
from worktrial.isolation.overlay import Layers, UpperChanges
from worktrial.isolation.patch import STAGE_OLD, link_or_copy
from worktrial.isolation.pool import Slot, token
from worktrial.isolation.slot_ns import NetworkMode, SlotNamespaces
from worktrial.isolation.workspace import GIT_DIR_NAME, AttemptWorkspace

log = logging.getLogger(__name__)


class OverlaySlot(Slot[UpperChanges]):
    """A slot whose attempts each get an overlay room; its checkout stays pristine. With ``network`` (the sandbox's),
    the rooms' overlays are mounted once each in the slot's own namespaces (``slot_ns.py``), which their programs
    enter; without, each program mounts its room's overlay itself (``Layers.prefix``)."""

    _current: AttemptWorkspace | None = None
    """The current attempt's room (its worktree is the mount point of ``layers``)."""

    def __init__(self, *args: Any, network: NetworkMode | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.network = network
        self._ns: SlotNamespaces | None = None
        self.kept_git = KeptGitDir()

    def _held(self, layers: Layers) -> Layers:
        """The room's overlay mounted in the slot's namespaces (made with the first room), or, where that cannot be
        done, left to be mounted by each program."""
        if self.network is None or not slot_ns.enabled():
            return layers
        try:
            if self._ns is None or not self._ns.alive:
                self._close_ns()
                self._ns = SlotNamespaces(self.network)
            self._ns.mount(layers.base, layers.options(), layers.mountpoint)
        except OSError as exc:
            log.warning("slot %s: its rooms are mounted by each program instead: %s", self.root, exc)
            self._close_ns()
            self.network = None
            return layers
        return replace(layers, held=self._ns)

    def _unmount(self) -> None:
        """No room's overlay stays mounted (before its directories go, or the next room stacks on its upper)."""
        if self._ns is not None:
            try:
                self._ns.unmount_all()
            except OSError as exc:
                log.warning("slot %s: %s; its namespaces are made again", self.root, exc)
                self._close_ns()

    def _close_ns(self) -> None:
        if self._ns is not None:
            self._ns.close()
            self._ns = None

    def close(self) -> None:
        self._unmount()
        self._close_ns()
        super().close()

    def _room(self, ws: AttemptWorkspace, build_fd: int) -> AttemptWorkspace:
        """A fresh upper directory, overlayfs work directory and mount point for the next attempt: O(1)."""
        upper, work, mount = token("up"), token("wk"), token("w")
        self._layer_dirs(build_fd, upper, work, mount)
        assert self._snap is not None
        with safefs.opened_dir(GIT_DIR_NAME, None, dir_fd=build_fd) as git_fd:
            path, data = f"worktrees/{self._snap.admin}/gitdir", f"{ws.root / mount}/{GITFILE}\n".encode()
            safefs.write_at(git_fd, path, data)
            ownership.hand_over_entry(git_fd, path, self.owner)
        if self.kept_git is not None:
            self.kept_git.wrote_file(path, data, 0o644, build_fd)
        layers = self._held(Layers(ws.root, (ws.worktree.name,), upper, work, mount))
        self._current = replace(
            ws, worktree=ws.root / mount, worktree_id=safefs.identity(ws.root / mount), layers=layers
        )
        return self._current

    def _layer_dirs(self, build_fd: int, upper: str, work: str, mount: str) -> None:
        os.mkdir(upper, self._dir_mode, dir_fd=build_fd)
        os.chmod(upper, self._dir_mode, dir_fd=build_fd)  # the merged root takes the upper root's mode and owner
        ownership.hand_over_entry(build_fd, upper, self.owner)
        os.mkdir(work, 0o700, dir_fd=build_fd)
        os.mkdir(mount, 0o755, dir_fd=build_fd)

    def verifier_room(self, change: AgentChange) -> AttemptWorkspace:
        """The verifier's room over the current attempt's. The agent's upper directory, kept as data (regular
        files, symlinks, directories and whiteouts; its ``.git`` link never), becomes a read-only layer above the
        pristine checkout, with a new upper directory for what verification writes. The change's ignored files
        are left out."""
        room, ws, ids = self._current, self._ws, self._ids
        assert room is not None and room.layers is not None and ws is not None and ids is not None
        agent = room.layers.upper
        self._unmount()  # every agent process is gone: its upper directory becomes a layer of the verifier's room
        with self._open_build(ids) as build_fd:
            with safefs.opened_dir(agent, None, dir_fd=build_fd) as upper_fd:
                changes = overlay.scan_upper(upper_fd)
                remove_files(upper_fd, [*changes.odd, *change.ignored])
                safefs.remove_at(upper_fd, GITFILE)  # the lower layer's link, written by the harness, shows
            upper, work, mount = token("vu"), token("vw"), token("v")
            self._layer_dirs(build_fd, upper, work, mount)
        layers = self._held(Layers(ws.root, (agent, ws.worktree.name), upper, work, mount))
        return replace(room, worktree=ws.root / mount, worktree_id=safefs.identity(ws.root / mount), layers=layers)

    def changes(self) -> UpperChanges | None:
        """The upper directory of the current attempt's room."""
        ids, room = self._ids, self._current
        if self._ws is None or ids is None or room is None or room.layers is None:
            return None
        try:
            with self._open_build(ids) as build_fd, safefs.opened_dir(room.layers.upper, None, dir_fd=build_fd) as fd:
                return overlay.scan_upper(fd)
        except (OSError, WorktrialError):
            return None

    def _stage(self, changes: UpperChanges, fds: contextlib.ExitStack, build_fd: int, stage: Path) -> Staged:
        ws, ids, room = self._ws, self._ids, self._current
        assert ws is not None and ids is not None and room is not None and room.layers is not None
        upper_fd = fds.enter_context(safefs.opened_dir(room.layers.upper, None, dir_fd=build_fd))
        lower_fd = fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
        moved = overlay.moved_files(lower_fd, changes)
        present = [p for p in [*changes.present, *moved] if not in_git_link(p)]
        untracked = [p for p in present if overlay.lower_kind(lower_fd, p) not in ("file", "link")]
        for rel in overlay.affected_lower(lower_fd, changes):
            link_or_copy(rel, stage / STAGE_OLD / rel, src_dir_fd=lower_fd)
        return Staged(upper_fd, present, untracked, list(changes.odd), lower_fd, set(changes.opaque), moved)

    def _unknown_change(self, max_bytes: int | None) -> AgentChange:
        """No whole-tree way: on the host the room is an empty mount point."""
        return AgentChange.unknown()

    @property
    def pristine(self) -> Path | None:
        """The slot's pristine checkout, the lower layer of every room."""
        return self._ws.worktree if self._ws is not None else None

    def _reset(self) -> None:
        """Everything of the last attempt is in entries of the build directory that are not the pristine checkout
        (its rooms' upper and work directories, mount points, scratch): they go, the git dir is restored, and the
        pristine checkout, which no attempt's program ever had in sight, stays as it is."""
        ws, ids, snap = self._ws, self._ids, self._snap
        assert ws is not None and ids is not None and snap is not None
        self._current = None
        self._unmount()
        with contextlib.ExitStack() as fds:
            root_fd = fds.enter_context(self._open_root())
            build_fd = fds.enter_context(safefs.opened_dir(ws.root.name, ids.build, dir_fd=root_fd))
            git_fd = fds.enter_context(safefs.opened_dir(GIT_DIR_NAME, ids.git_dir, dir_fd=build_fd))
            fds.enter_context(safefs.opened_dir(ws.worktree.name, ids.worktree, dir_fd=build_fd))
            self._clear_attempt(root_fd, build_fd, ws)
            kept = self.kept_git
            if kept is not None and kept.index_snapshot and kept.untouched(git_fd):
                kept.update(git_fd, snap.files, self.owner)  # nothing wrote there: what the verifier's room changed
            else:
                self._restore_git_dir(git_fd, snap, build_fd)
                ownership.hand_over_fd(git_fd, self.owner, recursive=True)
            self.index_id = safefs.file_id(git_fd, snap.index_rel)
            if kept is not None:
                kept.wrote(snap.files, build_fd, index_snapshot=True)
