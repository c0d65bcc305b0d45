"""A git bundle of exactly the commits a run needs, made without touching the user's repository.

``git bundle create`` only bundles refs, and the base commit of a run is usually not a ref of its own. Rather
than write a ref into the user's repository, a throwaway bare repository borrows the source's objects (git's
``alternates``), gets one ref per commit, and bundles those refs: the bundle is self-contained (the history of
each commit, nothing else) and the source repository is never written to.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from worktrial.errors import HarnessError
from worktrial.isolation.alternates import write_alternates
from worktrial.isolation.workspace import git, open_source, remove_tree

_BUNDLE_TIMEOUT = 600.0
_CHUNK = 1024 * 1024


def create_bundle(repo: Path, commits: list[str], dest: Path) -> str:
    """Write a bundle of ``commits`` (and their history) from ``repo`` to ``dest``; returns the bundle's SHA-256."""
    source = open_source(repo)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bundle-", dir=dest.parent))
    try:
        init = git(["init", "--bare", "--quiet", str(scratch)], dest.parent)
        if not init.ok:
            raise HarnessError(f"cannot make a git bundle of {repo}: {init.stderr_tail.decode(errors='replace')}")
        write_alternates(scratch, [source.objects_dir])
        if source.shallow_file is not None:
            (scratch / "shallow").write_bytes(source.shallow_file.read_bytes())
        for commit in commits:
            ref = git(["update-ref", f"refs/heads/worktrial/{commit}", commit], scratch)
            if not ref.ok:
                raise HarnessError(f"cannot bundle commit {commit[:12]} of {repo}: it is not in that repository")
        made = git(["bundle", "create", "--quiet", str(dest), "--all"], scratch, timeout=_BUNDLE_TIMEOUT)
        if not made.ok:
            raise HarnessError(f"cannot make a git bundle of {repo}: {made.stderr_tail.decode(errors='replace')}")
    finally:
        remove_tree(scratch)
    return file_sha256(dest)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
