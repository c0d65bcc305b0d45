"""The base commit's files at a few paths, read from the harness's own git directory in O(what is asked).

Where overlays are not available, the agent works in the slot's checkout itself; what it changed is found by one
ctime walk, and both the patch (the base side of each changed path) and the reset (putting those paths back) need
the base commit's entries and contents at just those paths. ``git cat-file --batch`` answers both from the object
store without an index and without writing an object: trees by ``<commit>:<dir>``, blobs by id. It runs on a git
directory only the harness writes (``patch.git`` next to the worktree, see ``patch.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from worktrial.errors import WorkspaceError
from worktrial.isolation import proc
from worktrial.isolation.patch import harness_git_env

_TIMEOUT = 300.0
TREE = "40000"
LINK = "120000"
GITLINK = "160000"


@dataclass(frozen=True)
class Entry:
    mode: str
    """Git's mode, as in a tree: ``100644``, ``100755``, ``120000`` (symlink), ``40000`` (tree), ``160000``."""
    oid: str

    @property
    def is_tree(self) -> bool:
        return self.mode == TREE

    @property
    def is_file(self) -> bool:
        return self.mode not in (TREE, GITLINK)


def _env() -> dict[str, str]:
    return harness_git_env(GIT_OPTIONAL_LOCKS="0")


def _batch(git_dir: Path, names: list[str], out: Path) -> list[tuple[str, str, bytes | None]]:
    """``git cat-file --batch`` for ``names``: (name, type, content) each, content None when missing. The output
    goes to a file (``out``) so that large contents never pass through a pipe buffer into memory twice."""
    if not names:
        return []
    argv = ["git", "-c", "core.hooksPath=/dev/null", f"--git-dir={git_dir}", "cat-file", "--batch"]
    data = "".join(f"{n}\n" for n in names).encode("utf-8", "surrogateescape")
    with open(out, "wb") as sink:
        result = proc.run(
            [*argv],
            cwd=git_dir,
            env=_env(),
            timeout=_TIMEOUT,
            stdin=data,
            sweep=False,
            on_stdout=_writer(sink),
            tail_bytes=4096,
        )
    if not result.ok:
        raise WorkspaceError(f"reading the base commit: {result.describe_failure('git cat-file')}")
    found: list[tuple[str, str, bytes | None]] = []
    with open(out, "rb") as fh:
        for name in names:
            header = fh.readline().rstrip(b"\n").decode("utf-8", "surrogateescape")
            if not header or header.endswith((" missing", " ambiguous")):
                found.append((name, "missing", None))
                continue
            _oid, kind, size = header.rsplit(" ", 2)
            content = fh.read(int(size))
            fh.read(1)
            found.append((name, kind, content))
    return found


def _writer(sink: BinaryIO) -> Callable[[bytes], None]:
    def write(chunk: bytes) -> None:
        sink.write(chunk)

    return write


def _parse_tree(raw: bytes) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    i = 0
    while i < len(raw):
        space = raw.index(b" ", i)
        nul = raw.index(b"\0", space)
        mode = raw[i:space].decode()
        name = raw[space + 1 : nul].decode("utf-8", "surrogateescape")
        oid = raw[nul + 1 : nul + 21].hex()
        entries[name] = Entry(mode, oid)
        i = nul + 21
    return entries


class BaseTree:
    """The base commit's entries, read on demand (trees are cached: a path's parents are read once)."""

    def __init__(self, git_dir: Path, commit: str, scratch: Path) -> None:
        self.git_dir = git_dir
        self.commit = commit
        self.scratch = scratch
        self._trees: dict[str, dict[str, Entry] | None] = {}

    def _out(self) -> Path:
        return self.scratch / "cat-file.out"

    def trees(self, dirs: Iterable[str]) -> dict[str, dict[str, Entry] | None]:
        """Each directory's direct entries in the base commit (None: no such directory there)."""
        wanted = sorted({d for d in dirs if d not in self._trees})
        names = [f"{self.commit}:{'' if d == '.' else d}" for d in wanted]
        for d, (_name, kind, content) in zip(wanted, _batch(self.git_dir, names, self._out()), strict=True):
            self._trees[d] = _parse_tree(content) if kind == "tree" and content is not None else None
        return {d: self._trees[d] for d in dirs}

    def entry(self, rel: str) -> Entry | None:
        parent, _, name = rel.rpartition("/")
        tree = self.trees([parent or "."]).get(parent or ".")
        return tree.get(name) if tree is not None else None

    def entries(self, paths: Iterable[str]) -> dict[str, Entry | None]:
        paths = list(paths)
        self.trees({(p.rpartition("/")[0] or ".") for p in paths})
        return {p: self.entry(p) for p in paths}

    def files_under(self, rel: str) -> dict[str, Entry]:
        """Every file (blob or symlink) at or below ``rel`` in the base commit."""
        found: dict[str, Entry] = {}
        todo = [rel]
        while todo:
            level = todo
            todo = []
            for d, tree in self.trees(level).items():
                for name, entry in (tree or {}).items():
                    path = name if d == "." else f"{d}/{name}"
                    if entry.is_tree:
                        todo.append(path)
                    elif entry.is_file:
                        found[path] = entry
        return found

    def write(self, files: dict[str, Entry], dest: Path) -> None:
        """The contents of ``files`` (path -> base entry) under ``dest``, with git's modes (symlinks as symlinks)."""
        items = sorted(files.items())
        blobs = _batch(self.git_dir, [e.oid for _p, e in items], self._out())
        for (rel, entry), (_name, kind, content) in zip(items, blobs, strict=True):
            if kind != "blob" or content is None:
                raise WorkspaceError(f"reading the base commit: {rel} is not in the object store")
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if entry.mode == LINK:
                os.symlink(os.fsdecode(content), path)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _mode(entry.mode))
            try:
                _write_all(fd, content)
            finally:
                os.close(fd)


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]


def _mode(git_mode: str) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if git_mode == "100755" else 0o666) & ~umask


def lstat_kind(path: Path) -> str | None:
    """``file``, ``link``, ``dir``, ``other`` or None (absent) for the entry at ``path`` (never followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"
