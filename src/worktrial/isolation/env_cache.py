"""The optional cache of environment setups across runs, keyed by what setup depends on.

A suite opts in with ``environment.cache_key``. The key is the setup commands, ``cache_key``, the hidden paths and
the pinned commit's content of the files setup depends on: ``environment.cache_files`` (lock files, manifests) when
declared, otherwise every tracked file outside the hidden suite directory. Not the commit itself: a commit that
changes nothing setup reads (a suite edit, a README) keeps the cache. Changing any of those is a miss.

An entry holds what setup changed relative to the pinned commit: a tar of the files it added or modified, with
their modification times (a venv's byte-code stays valid, so the agent's ``git status`` stays clean after it
runs the tests), the list of files it deleted, the pinned blob ids of the tracked files it changed or deleted
(an entry is only replayed onto a commit where those are unchanged: otherwise it would put back an old version),
and a pack of the git objects the setup's commit wrote. A hit replays the files onto a fresh checkout and puts
the pack in the slot's object store first, so committing the result as the base only hashes the files: git
finds every object already there and writes none (writing thousands of loose objects is what a commit costs).

Restored files keep their bytes, not their directory: paths a setup wrote into files (a venv's script
shebangs, an editable install's ``.pth``) still name the slot where the entry was made. Suites that cache call
tools as ``.venv/bin/python -m tool`` and test the worktree's code through the current directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from worktrial.isolation import ownership, proc
from worktrial.isolation.workspace import AttemptWorkspace, git, remove_tree
from worktrial.model.suite import Environment

CACHE_FORMAT = 2
_FILES = "files.tar"
_DELETED = "deleted.json"
_TRACKED = "tracked.json"
_PACK = "objects"
_LIST_LIMIT = 64 * 1024 * 1024
_MAX_TRACKED = 500
"""More tracked files changed than this, and the entry asks for the same pinned tree instead of listing them."""
_LOCK = ".lock"
"""Shared while an entry is read or written, exclusive while ``worktrial gc`` removes entries."""
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _tree(ws: AttemptWorkspace, treeish: str, *paths: str, recursive: bool = False) -> list[str] | None:
    """``git ls-tree -z`` lines (``mode type oid\\tpath``) of the private repository as the harness made it."""
    args = ["-C", str(ws.worktree), "ls-tree", "-z", "--full-tree", *(["-r"] if recursive else []), treeish]
    result = proc.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*", *args, "--", *paths],
        cwd=ws.worktree,
        env=proc.clean_env(),
        timeout=600,
        sweep=False,
        tail_bytes=_LIST_LIMIT,
    )
    if not result.ok or result.stdout_bytes >= _LIST_LIMIT:
        return None
    return [line for line in result.stdout_tail.decode("utf-8", "surrogateescape").split("\0") if line]


def _dependencies(ws: AttemptWorkspace, environment: Environment, hide: tuple[str, ...]) -> list[str] | None:
    """The pinned tree's entries setup depends on: the declared ``cache_files``, or everything outside ``hide``
    (listed level by level along the hidden paths only, so a large tree costs a few small listings)."""
    if environment.cache_files is not None:
        return _tree(ws, "HEAD", *environment.cache_files, recursive=True) if environment.cache_files else []
    hidden = {h.strip("/") for h in hide}
    out: list[str] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        level = _tree(ws, f"HEAD:{prefix}")
        if level is None:
            return None
        for line in level:
            meta, _, name = line.partition("\t")
            path = prefix + name
            if path in hidden:
                continue
            if meta.split()[1] == "tree" and any(h.startswith(path + "/") for h in hidden):
                pending.append(path + "/")
            else:
                out.append(f"{meta}\t{path}")
    return sorted(out)


def entry_key(ws: AttemptWorkspace, environment: Environment, hide: tuple[str, ...]) -> str | None:
    """The cache key of one setup on ``ws``'s fresh checkout, or None when the suite did not opt in (or the pinned
    tree could not be listed: a miss, never a wrong entry)."""
    if environment.cache_key is None:
        return None
    depends = _dependencies(ws, environment, hide)
    if depends is None:
        return None
    payload = {
        "format": CACHE_FORMAT,
        "setup": environment.model_dump(mode="json")["setup"],
        "cache_key": environment.cache_key,
        "cache_files": environment.cache_files,
        "depends": hashlib.sha256("\0".join(depends).encode("utf-8", "surrogateescape")).hexdigest(),
        "hide": list(hide),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _tar_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    chosen = getattr(tarfile, "tar_filter", None)
    return chosen(member, path) if chosen is not None else member


def _hidden(path: str, hide: tuple[str, ...]) -> bool:
    return any(path == h.strip("/") or path.startswith(h.strip("/") + "/") for h in hide)


class EnvironmentCache:
    """Entries under ``root/<key>/``; an entry is complete once its directory exists (written aside, renamed)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """Held while an entry is read or written: ``gc`` removes nothing meanwhile (and this waits for it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / _LOCK, _LOCK_FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """``gc``'s hold on the cache: True while nobody reads or writes an entry, False (at once) when someone does."""
        try:
            fd = os.open(self.root / _LOCK, _LOCK_FLAGS, 0o600)
        except OSError:
            yield False
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def names(self) -> list[str]:
        """What the cache holds: entries, and partial or stale ones being written or removed."""
        try:
            return sorted(name for name in os.listdir(self.root) if name != _LOCK)
        except OSError:
            return []

    def clear(self) -> None:
        """Every entry removed (complete, partial, stale); the caller holds ``exclusive``. Links are removed, never
        followed."""
        for name in self.names():
            remove_tree(self.root / name)

    def restore(self, key: str, ws: AttemptWorkspace) -> bool:
        """Replay the entry onto ``ws``'s fresh checkout and put its objects in the private object store; False
        (nothing changed) when there is no usable entry. An entry made on a pinned tree whose files it changed
        differ here is removed, so this run's setup replaces it."""
        if not (self.root / key).is_dir():
            return False
        with self._shared():
            return self._restore(key, ws)

    def _restore(self, key: str, ws: AttemptWorkspace) -> bool:
        entry = self.root / key
        if not all((entry / name).is_file() for name in (_FILES, _DELETED, _TRACKED)):
            return False
        try:
            deleted = json.loads((entry / _DELETED).read_text())
            tracked = json.loads((entry / _TRACKED).read_text())
            if not self._still_valid(tracked, ws):
                self._discard(entry)
                return False
            with tarfile.open(entry / _FILES) as tar:
                tar.extractall(ws.worktree, filter=_tar_filter)  # type: ignore[call-arg,unused-ignore]
            self._borrow_pack(entry / _PACK, ws)
        except (OSError, tarfile.TarError, ValueError, TypeError, AttributeError):
            return False
        for rel in deleted if isinstance(deleted, list) else []:
            with contextlib.suppress(OSError):
                (ws.worktree / str(rel)).unlink()
        return True

    @staticmethod
    def _still_valid(tracked: dict[str, object], ws: AttemptWorkspace) -> bool:
        if "tree" in tracked:
            here = git(["-C", str(ws.worktree), "rev-parse", "HEAD^{tree}"], ws.worktree, foreign_owner=True)
            return here.ok and here.stdout_tail.decode().strip() == tracked["tree"]
        files = tracked.get("files", {})
        if not isinstance(files, dict):
            return False
        if not files:
            return True
        now = _tree(ws, "HEAD", *files)
        if now is None:
            return False
        found = {line.partition("\t")[2]: line.split()[2] for line in now}
        return all(found.get(path) == oid for path, oid in files.items())

    def _discard(self, entry: Path) -> None:
        aside = self.root / f".{entry.name}.{uuid.uuid4().hex[:8]}.stale"
        with contextlib.suppress(OSError):
            os.rename(entry, aside)
            remove_tree(aside)

    @staticmethod
    def _borrow_pack(pack_dir: Path, ws: AttemptWorkspace) -> None:
        """Copy the entry's pack into the private repository's own object store (writable where setup's git runs,
        so git can mark the objects fresh instead of writing them again); it moves to ``env-objects`` with the
        commit's other objects."""
        target = ws.git_dir / "objects" / "pack"
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(pack_dir.glob("pack-*")):
            shutil.copyfile(item, target / item.name)
        owner = os.stat(ws.git_dir).st_uid if os.geteuid() == 0 else None
        ownership.hand_over(target, owner)  # the setup's git runs as the sandbox's uid, which must be able to touch it

    def store(
        self, key: str, ws: AttemptWorkspace, pinned_commit: str, commit: str, hide: tuple[str, ...], objects: Path
    ) -> None:
        """Record what ``commit`` (the setup's result) changed relative to ``pinned_commit``, with the objects its
        commit wrote (loose in ``objects``); best effort."""
        argv = ["git", "-c", "safe.directory=*", "-C", str(ws.worktree), "diff", "--raw", "--no-abbrev"]
        argv += ["--no-renames", "-z", pinned_commit, commit]
        result = proc.run(argv, cwd=ws.worktree, env=proc.clean_env(), timeout=600, sweep=False, tail_bytes=_LIST_LIMIT)
        if not result.ok or result.stdout_bytes >= _LIST_LIMIT:
            return  # a listing that does not fit is not cached: a miss next time, never a wrong entry
        fields = result.stdout_tail.decode("utf-8", "surrogateescape").split("\0")
        changed: list[str] = []
        deleted: list[str] = []
        tracked: dict[str, str] = {}
        for meta, name in zip(fields[0::2], fields[1::2], strict=False):
            parts = meta.split()
            if len(parts) < 5 or _hidden(name, hide):
                continue  # the hidden suite directory is removed before every restore, whatever it holds
            if parts[4] != "A":
                tracked[name] = parts[2]
            (deleted if parts[4] == "D" else changed).append(name)
        checks: dict[str, object] = {"files": tracked}
        if len(tracked) > _MAX_TRACKED:
            tree = git(
                ["-C", str(ws.worktree), "rev-parse", f"{pinned_commit}^{{tree}}"], ws.worktree, foreign_owner=True
            )
            if not tree.ok:
                return
            checks = {"tree": tree.stdout_tail.decode().strip()}
        with self._shared():
            self._write(key, ws, changed, deleted, checks, objects)

    def _write(
        self,
        key: str,
        ws: AttemptWorkspace,
        changed: list[str],
        deleted: list[str],
        checks: dict[str, object],
        objects: Path,
    ) -> None:
        partial = self.root / f".{key}.{uuid.uuid4().hex[:8]}.partial"
        partial.mkdir()
        try:
            with tarfile.open(partial / _FILES, "w") as tar:
                for name in changed:
                    tar.add(ws.worktree / name, arcname=name, recursive=False)
            (partial / _DELETED).write_text(json.dumps(deleted))
            (partial / _TRACKED).write_text(json.dumps(checks))
            if _pack(ws, objects, partial / _PACK):
                os.rename(partial, self.root / key)
        except OSError:
            pass
        finally:
            remove_tree(partial)


def _pack(ws: AttemptWorkspace, store: Path, into: Path) -> bool:
    """One pack of every loose object in ``store`` (what the setup's commit wrote)."""
    ids: list[str] = []
    for sub in sorted(store.iterdir()):
        if len(sub.name) == 2 and sub.is_dir():
            ids += [sub.name + item.name for item in sub.iterdir() if len(item.name) >= 38]
    into.mkdir()
    argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*", f"--git-dir={ws.git_dir}"]
    argv += ["pack-objects", "-q", str(into / "pack")]
    result = proc.run(
        argv, cwd=ws.root, env=proc.clean_env(), timeout=600, sweep=False, stdin="\n".join(ids).encode() + b"\n"
    )
    return result.ok
