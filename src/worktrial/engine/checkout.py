"""Attempt checkouts: where an attempt's files are, and the rooms its phases run in.

Every attempt goes through one ``Checkout``: ``prepare`` gives the agent's room (a checkout at the task's base with
nothing of any earlier attempt in it, and the sandbox around it), ``change`` says what the agent changed once its
command returned, ``verifier_room`` says where verification runs, and ``release`` gives everything back. The
attempt (``engine/attempt.py``) tells its story over these four calls and never asks which kind it has:

- ``FreshCheckout``: a private repository and worktree made for this attempt and removed after it (or kept, with
  ``--keep-worktrees``);
- ``SlotCheckout`` over a ``CopyingSlot`` (the attempt works in the slot's checkout, restored in O(the change)
  afterwards) or an ``OverlaySlot`` (the attempt works in an overlay room over the slot's pristine checkout).

- ``ContainerCheckout`` (``engine/container_checkout.py``): a container task's attempt, one of the above for its
  files and one container for its phases, the verifier in it or in a new one (docs/environments.md).

A new kind is a new class and a line in ``open_checkout``: the checkout decides where every phase runs and returns
the room.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from worktrial.agents.base import Agent
from worktrial.engine.executor import AttemptJob, AttemptSpec, TaskBase
from worktrial.isolation import childenv, overlay, ownership, proc, safefs, verifier
from worktrial.isolation.alternates import read_alternates
from worktrial.isolation.change import AgentChange
from worktrial.isolation.copying_slot import CopyingSlot
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.isolation.environment import ENV_OBJECTS, run_setup
from worktrial.isolation.gitdir import KeptGitDir
from worktrial.isolation.overlay import Layers
from worktrial.isolation.overlay_slot import OverlaySlot
from worktrial.isolation.patch import agent_patch
from worktrial.isolation.pool import AdminSnapshot, Slot, admin_snapshot
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.sandbox import AttemptView, Sandbox, decide, open_sandbox
from worktrial.isolation.workspace import AttemptWorkspace, SourceRepo, create_attempt_workspace, remove_tree
from worktrial.model.suite import SUITE_DIR_ENV
from worktrial.model.trace import trace_filename

SANDBOX_ETC = "sandbox-etc"
"""Next to the worktree, where only the harness writes: the files the sandbox sees in place of the host's /etc ones."""


@dataclass(frozen=True)
class Room:
    """What the processes of one phase see: their worktree, the sandbox around it and the scope they start in."""

    worktree: Path
    scratch: Path
    """The attempt's scratch directory (the agent's prompt file, the fresh homes of setup and verify)."""
    sandbox: Sandbox
    scope: ProcessScope
    """The run's scope confined to the room, the suite's files shown read-only: where setup and verify commands
    start. The agent's processes start in ``agent_scope``, which does not show the suite."""
    reward_dir: Path | None = None
    """Where verification leaves a reward file that decides instead of exit codes (Harbor's verifiers)."""

    def agent_scope(self, shown: Sequence[Path] = ()) -> proc.ProcessScope:
        """The run's scope confined to the agent's sandbox, seeing ``shown`` read-only besides."""
        return self.scope.confined(self.sandbox.widened(shown) if shown else self.sandbox)


class Checkout(Protocol):
    """One attempt's files and rooms, whatever kind of checkout holds them (see the module docstring)."""

    def prepare(self) -> Room:
        """The agent's room, ready. Raises ``EnvironmentSetupError`` when the task's environment cannot be set up,
        ``WorktrialError`` or ``OSError`` when the checkout cannot be made."""
        ...

    def change(self, max_bytes: int | None) -> AgentChange:
        """What the agent changed (a patch of at most ``max_bytes``, None: no patch), once its command returned;
        whatever of it still runs is ended first."""
        ...

    def verifier_room(self, change: AgentChange) -> Room:
        """Where verification runs. Raises ``WorktrialError`` when what the agent left cannot be verified (its
        fault: the attempt fails) and ``OSError`` when the harness cannot build the room (an error)."""
        ...

    def release(self) -> None:
        """Give back everything ``prepare`` took, however far it got; safe to call once after any of the above."""
        ...

    @property
    def kept(self) -> Path | None:
        """The worktree left for the user to inspect (``--keep-worktrees``), if any."""
        ...


@dataclass(frozen=True)
class VerifierFiles:
    """The files verification runs on: a worktree (an overlay room's ``layers`` where it is one) and the host
    paths its programs must see besides (the suite's files, the agent's git objects)."""

    worktree: Path
    layers: Layers | None
    shown: tuple[Path, ...]
    rebuilt: bool
    """Put back to files only by the harness (False: the worktree as the agent left it)."""


@dataclass(frozen=True)
class Start:
    """Where an attempt's worktree started: the commit (after environment setup) and the store its objects are in
    (with the checkout's own ``env-objects``), as the harness knows them, never as the agent's repository says."""

    commit: str
    objects: Path | None
    snapshot: AdminSnapshot | None = None
    """The private repository's administrative state as the harness left it, for the verifier's room."""


def open_checkout(
    job: AttemptJob, source: SourceRepo, work_root: Path, slot: Slot[Any] | None, scope: proc.ProcessScope
) -> Checkout:
    """The attempt's checkout: its job's slot, or a fresh one of its own under ``work_root``; for a container task,
    that holds its files and one container its phases."""
    files: FreshCheckout | SlotCheckout
    if slot is not None:
        files = SlotCheckout(job, source, scope, slot)
    else:
        root = work_root / f"{trace_filename(job.task.id, job.attempt)[:-5]}-{uuid.uuid4().hex[:8]}"
        files = FreshCheckout(job, source, scope, root)
    plan = job.spec.containers
    if plan is not None and job.task.id in plan.tasks:
        from worktrial.engine.container_checkout import ContainerCheckout  # it builds on this module's checkouts

        return ContainerCheckout(files, job, scope, work_root)
    return files


def new_slot(
    base: TaskBase, spec: AttemptSpec, agent: Agent, source: SourceRepo, root: Path, scope: proc.ProcessScope | None
) -> Slot[Any]:
    """A slot for the attempts of one task base: overlay rooms where they work (``uses_overlay``), else copying."""
    prepare, owner = slot_preparer(base, spec, scope), sandbox_owner(spec)
    if uses_overlay(spec, agent, base):
        decision = spec.sandbox_decision or decide(spec.sandbox)
        return OverlaySlot(source, base.commit, root, prepare, owner, network=decision.network)
    return CopyingSlot(source, base.commit, root, prepare, owner)


def uses_overlay(spec: AttemptSpec, agent: Agent, base: TaskBase | None = None) -> bool:
    """Whether a slot gives each attempt an overlay room (``isolation/overlay.py``): the sandbox is bubblewrap, the
    kernel mounts overlays in it, and every file the agent reads or writes goes through a sandboxed program (an
    agent that works on files from the harness's own process, like the builtin agent's tools, sees the host, where
    the room is never mounted). Never for a container task (its containers mount the worktree from the host), nor
    in a run that rebuilds stored changes from the host (``AttemptSpec.replays``)."""
    if (base is not None and base.container) or spec.replays:
        return False
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.kind == "bubblewrap" and bool(getattr(agent, "sandboxed_files", False)) and overlay.usable()


def sandbox_owner(spec: AttemptSpec) -> int | None:
    """The uid the attempt's trees must belong to: the one its sandboxed programs run as when the harness is root."""
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.uid if decision.kind == "bubblewrap" else None


def suite_env(spec: AttemptSpec, scratch: Path) -> dict[str, str]:
    """The environment of environment setup, setup and verify commands: a minimal one (never the caller's keys)
    plus ``$WORKTRIAL_SUITE_DIR`` (never the agent's).

    ``HOME`` is a new, empty directory in the attempt's ``scratch`` directory, made for this phase: verification
    never runs with a home the agent could have prepared (a ``usercustomize.py``, a ``.gitconfig`` alias), since it
    did not exist while the agent ran.
    """
    extra = {**spec.env, SUITE_DIR_ENV: spec.suite_dir} if spec.suite_dir else dict(spec.env)
    return childenv.command_env(os.environ, scratch / f"home-{uuid.uuid4().hex[:12]}", extra)


def attempt_sandbox(spec: AttemptSpec, ws: AttemptWorkspace, source: SourceRepo | None) -> Sandbox:
    """The sandbox of one attempt (or one slot's environment setup): its worktree, private git dir and scratch
    writable, the borrowed objects read-only, HOME fresh inside scratch. Not yet prepared."""
    scratch = ws.root / "scratch"
    scratch.mkdir(exist_ok=True)
    # The objects of a prepared environment's base commit (a suite inside the repository is hidden by one) live
    # next to the private git dir: without them git cannot read HEAD, so nothing that commits works.
    # Made before environment setup commits into it, so that its git (in this sandbox) reads what it moved there.
    (ws.root / ENV_OBJECTS).mkdir(exist_ok=True)
    borrowed = [source.objects_dir] if source is not None else []
    borrowed.append(ws.root / ENV_OBJECTS)
    view = AttemptView(
        writable=(ws.worktree, ws.git_dir, scratch),
        readonly=tuple(borrowed),
        home=scratch / "home",
        scratch=scratch,
        private=ws.root / SANDBOX_ETC,
        overlay=ws.layers,
    )
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return open_sandbox(spec.sandbox, decision, view)


def harness_scope(scope: proc.ProcessScope | None, sandbox: Sandbox, spec: AttemptSpec) -> proc.ProcessScope:
    """Setup and verify run in the attempt's sandbox and also see the suite's declared files read-only."""
    shown = sandbox.widened([Path(spec.suite_dir)]) if spec.suite_dir else sandbox
    return (scope or proc.ProcessScope()).confined(shown)


def slot_preparer(
    base: TaskBase, spec: AttemptSpec, scope: proc.ProcessScope | None
) -> Callable[[AttemptWorkspace], str] | None:
    """What a slot runs once on its fresh checkout: the task base's environment setup, committed as the base."""
    if not base.prepared:
        return None

    def prepare(ws: AttemptWorkspace) -> str:
        sandbox = attempt_sandbox(spec, ws, _borrowed(base, ws))
        try:
            sandbox.prepare()
            return environment_setup(spec, base, ws, sandbox, scope)
        finally:
            sandbox.cleanup()

    return prepare


def environment_setup(
    spec: AttemptSpec, base: TaskBase, ws: AttemptWorkspace, sandbox: Sandbox, scope: proc.ProcessScope | None
) -> str:
    """The task base's environment setup on a fresh checkout, in the attempt's sandbox with a home of its own
    (removed afterwards); the commit it made the base."""
    env = suite_env(spec, ws.root / "scratch")
    try:
        return run_setup(
            ws,
            base.environment,
            env,
            scope=harness_scope(scope, sandbox, spec),
            log=Path(spec.artifacts_dir) / "environment" / f"setup-{uuid.uuid4().hex[:10]}.log"
            if spec.artifacts_dir and base.environment
            else None,
            hide=base.hide,
            cache=EnvironmentCache(Path(spec.environment_cache)) if spec.environment_cache else None,
        )
    finally:
        remove_tree(Path(env["HOME"]))


def _borrowed(base: TaskBase, ws: AttemptWorkspace) -> SourceRepo | None:
    """The repository whose objects the checkout borrows (read from its alternates file)."""
    try:
        objects = read_alternates(ws.git_dir)
    except OSError:
        return None
    return (
        SourceRepo(path=Path(base.source.location), objects_dir=Path(objects[0]), shallow_file=None)
        if objects
        else None
    )


class _HostCheckout:
    """A checkout in this host's filesystem whose phases run in the attempt's sandbox around it (bubblewrap, none,
    or a container per command that mounts it). Its kinds differ in how the checkout is made and given back, how
    the change is found, and what the verifier's room is made of."""

    def __init__(self, job: AttemptJob, source: SourceRepo, scope: proc.ProcessScope) -> None:
        self.job, self.spec, self.source, self.run_scope = job, job.spec, source, scope
        self._ws: AttemptWorkspace | None = None
        self._sandbox: Sandbox | None = None
        self._start: Start | None = None

    @property
    def workspace(self) -> AttemptWorkspace:
        """The attempt's checkout, once ``prepare`` made it."""
        assert self._ws is not None
        return self._ws

    def _open_sandbox(self, ws: AttemptWorkspace) -> Sandbox:
        self._sandbox = attempt_sandbox(self.spec, ws, self.source)
        self._sandbox.prepare()
        return self._sandbox

    def _room(self, ws: AttemptWorkspace, sandbox: Sandbox) -> Room:
        return Room(ws.worktree, ws.root / "scratch", sandbox, harness_scope(self.run_scope, sandbox, self.spec))

    def change(self, max_bytes: int | None) -> AgentChange:
        assert self._sandbox is not None
        self._sandbox.end_processes()  # the verifier starts only once every agent process is gone
        return self._find_change(max_bytes)

    def _find_change(self, max_bytes: int | None) -> AgentChange:
        raise NotImplementedError

    def verifier_room(self, change: AgentChange) -> Room:
        """The agent's worktree put back to files only (``verifier_files``), in the attempt's sandbox."""
        ws, sandbox = self._ws, self._sandbox
        assert ws is not None and sandbox is not None
        files = self.verifier_files(change)
        if files.worktree == ws.worktree and files.layers is None and not files.rebuilt:
            return self._room(ws, sandbox)
        in_room = sandbox.in_room(ws.worktree, files.worktree, files.layers).widened(files.shown)
        return Room(files.worktree, ws.root / "scratch", in_room, self.run_scope.confined(in_room))

    def verifier_files(self, change: AgentChange) -> VerifierFiles:
        """The agent's worktree put back to files only (``verifier.enter``: its repository as the harness left it,
        the agent's commits and files kept as data), unless the task verifies in the worktree as the agent left it
        (``verify_in``)."""
        ws, start = self._ws, self._start
        assert ws is not None and start is not None
        shown = tuple(Path(p) for p in (self.spec.suite_dir,) if p)
        if self.job.task.verify_in == "worktree" or start.snapshot is None:
            self._ran_in_place()
            return VerifierFiles(ws.worktree, None, shown, rebuilt=False)
        head = verifier.agent_head(ws, start.snapshot.admin)
        room = self._verifier_checkout(change)
        owner = sandbox_owner(self.spec)
        kept = self._kept_index()
        index = verifier.enter(
            room,
            start.snapshot,
            head,
            start.commit,
            change.untouched,
            owner,
            clean=not change.exact,
            index_id=kept,
            kept_git=self._kept_git(),
        )
        self._left_index(index)
        self._ran_in_place()
        return VerifierFiles(room.worktree, room.layers, (*shown, ws.root / verifier.AGENT_OBJECTS), rebuilt=True)

    def _verifier_checkout(self, change: AgentChange) -> AttemptWorkspace:
        raise NotImplementedError

    def _kept_index(self) -> safefs.FileId | None:
        """The private index as the harness last left it, which the verifier's room may keep."""
        return None

    def _kept_git(self) -> KeptGitDir | None:
        """What the harness last wrote in the private git dir, when the checkout keeps track (``gitdir.py``)."""
        return None

    def _left_index(self, index: safefs.FileId | None) -> None:
        """The index the verifier's room left (None: not the snapshot's, never to be kept)."""

    def _ran_in_place(self) -> None:
        """Verification is about to run programs in the checkout."""


class FreshCheckout(_HostCheckout):
    """A private repository and worktree made for one attempt under ``root`` and removed after it (kept with
    ``--keep-worktrees``, handed back to the harness's uid)."""

    def __init__(self, job: AttemptJob, source: SourceRepo, scope: proc.ProcessScope, root: Path) -> None:
        super().__init__(job, source, scope)
        self.root = root

    def prepare(self) -> Room:
        base, owner = self.job.resolved_base(), sandbox_owner(self.spec)
        ws = self._ws = create_attempt_workspace(self.source, base.commit, self.root)
        ownership.hand_over(ws.root, owner)
        sandbox = self._open_sandbox(ws)
        commit = base.commit
        if base.prepared:
            commit = environment_setup(self.spec, base, ws, sandbox, self.run_scope)
            ownership.hand_over(ws.root, owner)
        self._start = Start(commit, self.source.objects_dir, admin_snapshot(ws))
        return self._room(ws, sandbox)

    def _find_change(self, max_bytes: int | None) -> AgentChange:
        """The whole-tree way: git diffs the worktree in the harness's own git dir next to it."""
        ws, start = self._ws, self._start
        assert ws is not None and start is not None
        if max_bytes is None:
            return AgentChange.unknown()
        borrowed = [p for p in (start.objects, ws.root / ENV_OBJECTS) if p is not None and p.is_dir()]
        return AgentChange.unknown(agent_patch(ws, start.commit, max_bytes, borrowed))

    def _verifier_checkout(self, change: AgentChange) -> AttemptWorkspace:
        assert self._ws is not None
        return self._ws

    def release(self) -> None:
        if self._sandbox is not None:
            self._sandbox.cleanup()
        if not self.spec.keep_worktrees:
            remove_tree(self.root)
        elif sandbox_owner(self.spec) is not None:
            # A kept worktree is the user's to inspect: back to the harness's uid (the kernel clears any set-uid
            # bit the agent left on a file whose owner changes), so git there needs no safe.directory.
            ownership.hand_over(self.root, os.geteuid())

    @property
    def kept(self) -> Path | None:
        return self._ws.worktree if self.spec.keep_worktrees and self._ws is not None else None


class SlotCheckout(_HostCheckout):
    """An attempt in its job's slot (``isolation/pool.py``): reset before, kept for the next attempt after."""

    def __init__(self, job: AttemptJob, source: SourceRepo, scope: proc.ProcessScope, slot: Slot[Any]) -> None:
        super().__init__(job, source, scope)
        self.slot = slot

    def prepare(self) -> Room:
        ws = self._ws = self.slot.acquire()
        self._start = Start(self.slot.base_commit, self.slot.source.objects_dir, self.slot.snapshot)
        return self._room(ws, self._open_sandbox(ws))

    def _find_change(self, max_bytes: int | None) -> AgentChange:
        return self.slot.agent_change(max_bytes)

    def _verifier_checkout(self, change: AgentChange) -> AttemptWorkspace:
        return self.slot.verifier_room(change)

    def _kept_index(self) -> safefs.FileId | None:
        return self.slot.index_id

    def _kept_git(self) -> KeptGitDir | None:
        return self.slot.kept_git

    def _left_index(self, index: safefs.FileId | None) -> None:
        self.slot.index_id = index

    def _ran_in_place(self) -> None:
        self.slot.ran_in_place()

    def release(self) -> None:
        if self._sandbox is not None:
            self._sandbox.cleanup()

    @property
    def kept(self) -> Path | None:
        return None
