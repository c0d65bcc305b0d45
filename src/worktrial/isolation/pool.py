"""Reusable attempt workspaces: one slot per job, reset exactly between attempts.

Creating a worktree costs a checkout of every file; resetting one costs what the agent changed. A slot is
a private repository plus its worktree (see ``workspace.create_attempt_workspace``). Right after creation
its whole administrative state (everything in the private git dir but the object store) and the pristine
index are saved; a reset throws away everything the agent could have touched in git — refs, stash,
reflogs, config, hooks, info/, per-worktree state and every object it wrote — restores the saved state,
and then lets git bring the files back (``reset --hard`` + ``clean -ffdx``, which also removes ignored
files and nested repositories). Anything unexpected makes the slot be rebuilt from scratch instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import proc
from worktrial.isolation.workspace import (
    AttemptWorkspace,
    SourceRepo,
    create_attempt_workspace,
    git,
    remove_tree,
)

log = logging.getLogger(__name__)
_PRISTINE_INDEX = "pristine-index"
_FIND_OUTPUT_LIMIT = 4 * 1024 * 1024


@dataclass
class _Snapshot:
    files: dict[str, bytes]
    index_rel: str


def _snapshot(ws: AttemptWorkspace, store: Path) -> _Snapshot:
    files: dict[str, bytes] = {}
    index_rel = ""
    for path in ws.git_dir.rglob("*"):
        rel = path.relative_to(ws.git_dir).as_posix()
        if not path.is_file() or (rel.startswith("objects/") and rel != "objects/info/alternates"):
            continue
        if path.name == "index" and rel.startswith("worktrees/"):
            index_rel = rel
            shutil.copyfile(path, store / _PRISTINE_INDEX)
            continue
        files[rel] = path.read_bytes()
    files[".worktree-gitfile"] = (ws.worktree / ".git").read_bytes()
    if not index_rel:
        raise WorkspaceError("new worktree has no index")
    return _Snapshot(files=files, index_rel=index_rel)


class Slot:
    """One reusable workspace; not thread-safe (each job owns one)."""

    def __init__(
        self,
        source: SourceRepo,
        base_commit: str,
        root: Path,
        prepare: Callable[[AttemptWorkspace], str] | None = None,
    ) -> None:
        self.source = source
        self.pinned_commit = base_commit
        self.base_commit = base_commit
        self._prepare = prepare
        """Runs once per build on the fresh checkout (environment setup) and returns the commit to reset to."""
        self.builds = 0
        self.root = root
        self._ws: AttemptWorkspace | None = None
        self._snap: _Snapshot | None = None
        self._dirty = False
        self._mark_ns = 0

    @property
    def _meta(self) -> Path:
        return self.root / "meta"

    def acquire(self) -> AttemptWorkspace:
        """A workspace at the base commit with nothing of any earlier attempt in it."""
        if self._ws is not None and self._dirty:
            try:
                self._reset(self._ws)
            except (WorktrialError, OSError) as exc:
                # Safe (the slot is rebuilt from scratch) but slow, and a sign something fights the reset.
                log.warning("slot %s: reset failed, rebuilding it: %s", self.root, exc)
                self._discard()
        if self._ws is None:
            self._build()
        assert self._ws is not None
        self._dirty = True
        scratch = self._ws.root / "scratch"
        remove_tree(scratch)
        scratch.mkdir()
        return self._ws

    def close(self) -> None:
        self._discard()

    def _build(self) -> None:
        self._meta.mkdir(parents=True, exist_ok=True)
        self.base_commit = self.pinned_commit
        ws = create_attempt_workspace(self.source, self.base_commit, self.root / "ws")
        self.builds += 1
        log.info("slot %s: built at %s (build %d)", self.root, self.base_commit, self.builds)
        try:
            if self._prepare is not None:
                self.base_commit = self._prepare(ws)
            self._snap = _snapshot(ws, self._meta)
        except BaseException:
            remove_tree(ws.root)
            raise
        self._ws = ws
        self._dirty = False
        self._mark_ns = self._fs_now_ns()

    def _discard(self) -> None:
        self._ws = None
        self._snap = None
        remove_tree(self.root)

    def _reset(self, ws: AttemptWorkspace) -> None:
        snap = self._snap
        assert snap is not None
        # 1. The private git dir: drop everything, objects the agent wrote included, then restore.
        for entry in list(ws.git_dir.iterdir()):
            remove_tree(entry)
        for rel, data in snap.files.items():
            if rel == ".worktree-gitfile":
                continue
            target = ws.git_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (ws.git_dir / "refs" / "tags").mkdir(parents=True, exist_ok=True)
        (ws.git_dir / "objects" / "pack").mkdir(parents=True, exist_ok=True)
        # 2. The worktree's link to it, in case the agent replaced or removed it.
        gitfile = ws.worktree / ".git"
        if gitfile.is_dir() or gitfile.is_symlink():
            remove_tree(gitfile)
        if not ws.worktree.is_dir():
            raise WorkspaceError("worktree directory is gone")
        gitfile.write_bytes(snap.files[".worktree-gitfile"])
        # 3. git trusts stat data at one-second ctime granularity, so an edit that keeps size and restores the
        #    mtime (cp -p, touch -r) within the same second would survive. The filesystem's own ctime, in
        #    nanoseconds, cannot be forged: every file changed since the last reset is removed, and git
        #    restores it below. Files git itself rewrote in the same clock tick only cost a rewrite.
        _remove_changed_since(ws.worktree, self._meta / "mark", self._mark_ns)
        # 4. The pristine index, then let git restore tracked files and remove everything else.
        shutil.copyfile(self._meta / _PRISTINE_INDEX, ws.git_dir / snap.index_rel)
        # Untracked-file caches and fsmonitor could hide what the agent left; never trust them here.
        quiet = ["-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false", "-C", str(ws.worktree)]
        for args in (["reset", "--quiet", "--hard", self.base_commit], ["clean", "-ffdxq"]):
            result = git([*quiet, *args], ws.worktree)
            if not result.ok:
                raise WorkspaceError(f"reset failed: {result.describe_failure('git ' + args[0])}")
        self._mark_ns = self._fs_now_ns()

    def _fs_now_ns(self) -> int:
        """The filesystem clock (coarser than time.time_ns), read from a file just touched."""
        marker = self._meta / "mark"
        marker.write_bytes(b"")
        return marker.stat().st_ctime_ns


def _remove_changed_since(root: Path, mark_file: Path, mark_ns: int) -> None:
    """Unlink every non-directory under ``root`` (but its ``.git`` link) whose ctime is at or after ``mark_ns``.

    find(1) walks the tree in C; the marker's mtime is set one nanosecond before the mark so that its strict
    "newer than" comparison means "at or after". If find is missing or lists more than fits the buffer, the
    walk is done in Python instead.
    """
    os.utime(mark_file, ns=(mark_ns - 1, mark_ns - 1))
    argv = ["find", ".", "-path", "./.git", "-prune", "-o", "!", "-type", "d", "-newercm", str(mark_file), "-print0"]
    result = proc.run(argv, cwd=root, timeout=600, sweep=False, tail_bytes=_FIND_OUTPUT_LIMIT)
    if result.ok and result.stdout_bytes < _FIND_OUTPUT_LIMIT:
        paths = [root / p.decode("utf-8", "surrogateescape") for p in result.stdout_tail.split(b"\0") if p]
    else:
        paths = list(_walk_changed(root, mark_ns))
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _walk_changed(root: Path, mark_ns: int) -> Iterator[Path]:
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if directory == root and entry.name == ".git":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.stat(follow_symlinks=False).st_ctime_ns >= mark_ns:
                    yield Path(entry.path)
