"""The optional cache of environment setups across runs, keyed by (base commit, setup commands, ``cache_key``).

A suite opts in with ``environment.cache_key``; changing that string (or the commands, or the commit) is a miss.
An entry holds what setup changed relative to the pinned commit: a tar of the files it added or modified, with
their modification times (a venv's byte-code stays valid, so the agent's ``git status`` stays clean after it
runs the tests), and the list of files it deleted. A hit replays that onto a fresh checkout instead of running
the commands; the result is committed as the base exactly like a fresh setup.

Restored files keep their bytes, not their directory: paths a setup wrote into files (a venv's script
shebangs, an editable install's ``.pth``) still name the slot where the entry was made. Suites that cache call
tools as ``.venv/bin/python -m tool`` and test the worktree's code through the current directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tarfile
import uuid
from pathlib import Path

from worktrial.isolation import proc
from worktrial.isolation.workspace import AttemptWorkspace, remove_tree
from worktrial.model.suite import Environment

CACHE_FORMAT = 1
_FILES = "files.tar"
_DELETED = "deleted.json"
_LIST_LIMIT = 64 * 1024 * 1024


def entry_key(pinned_commit: str, environment: Environment, hide: tuple[str, ...]) -> str | None:
    """The cache key of one setup, or None when the suite did not opt in."""
    if environment.cache_key is None:
        return None
    payload = {
        "format": CACHE_FORMAT,
        "commit": pinned_commit,
        "setup": environment.model_dump(mode="json")["setup"],
        "cache_key": environment.cache_key,
        "hide": list(hide),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _tar_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    chosen = getattr(tarfile, "tar_filter", None)
    return chosen(member, path) if chosen is not None else member


class EnvironmentCache:
    """Entries under ``root/<key>/``; an entry is complete once its directory exists (written aside, renamed)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def restore(self, key: str, ws: AttemptWorkspace) -> bool:
        entry = self.root / key
        if not (entry / _FILES).is_file() or not (entry / _DELETED).is_file():
            return False
        try:
            deleted = json.loads((entry / _DELETED).read_text())
            with tarfile.open(entry / _FILES) as tar:
                tar.extractall(ws.worktree, filter=_tar_filter)  # type: ignore[call-arg,unused-ignore]
        except (OSError, tarfile.TarError, ValueError):
            return False
        for rel in deleted if isinstance(deleted, list) else []:
            with contextlib.suppress(OSError):
                (ws.worktree / str(rel)).unlink()
        return True

    def store(self, key: str, ws: AttemptWorkspace, pinned_commit: str, commit: str) -> None:
        """Record what ``commit`` (the setup's result) changed relative to ``pinned_commit``; best effort."""
        argv = ["git", "-c", "safe.directory=*", "-C", str(ws.worktree), "diff", "--name-status", "--no-renames", "-z"]
        argv += [pinned_commit, commit]
        result = proc.run(argv, cwd=ws.worktree, env=proc.clean_env(), timeout=600, sweep=False, tail_bytes=_LIST_LIMIT)
        if not result.ok or result.stdout_bytes >= _LIST_LIMIT:
            return  # a listing that does not fit is not cached: a miss next time, never a wrong entry
        fields = result.stdout_tail.decode("utf-8", "surrogateescape").split("\0")
        changed: list[str] = []
        deleted: list[str] = []
        for status, name in zip(fields[0::2], fields[1::2], strict=False):
            (deleted if status == "D" else changed).append(name)
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / f".{key}.{uuid.uuid4().hex[:8]}.partial"
        partial.mkdir()
        try:
            with tarfile.open(partial / _FILES, "w") as tar:
                for name in changed:
                    tar.add(ws.worktree / name, arcname=name, recursive=False)
            (partial / _DELETED).write_text(json.dumps(deleted))
            os.rename(partial, self.root / key)
        except OSError:
            pass
        finally:
            remove_tree(partial)
