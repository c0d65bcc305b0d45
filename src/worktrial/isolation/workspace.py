"""Workspaces: the user's repository (read only), the pinned base commit, and per-attempt worktrees.

Each attempt gets a fresh private bare repository whose object store borrows the source repository's
objects through ``objects/info/alternates``, and one worktree of it checked out at the base commit. The
agent's commits, branches, tags, stash, config and hooks all land in that private repository and are
deleted with it; the user's repository is only ever read. Creating one costs a ``git init`` and a
checkout, nothing proportional to the history.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.errors import HarnessError, WorkspaceError
from worktrial.isolation import proc, safefs
from worktrial.isolation.alternates import write_alternates
from worktrial.isolation.overlay import Layers
from worktrial.safe_read import input_sha256

log = logging.getLogger(__name__)
ATTEMPT_BRANCH = "worktrial/attempt"
GIT_DIR_NAME = "repo.git"
AGENT_NAME = "worktrial agent"
AGENT_EMAIL = "agent@worktrial.invalid"
_GIT_TIMEOUT = 600.0
MAX_REPO_BUNDLE_BYTES = 16 * 1024 * 1024 * 1024
"""A git bundle a suite ships as its repository (hashed in chunks, never held in memory)."""


def git(
    args: list[str],
    cwd: Path,
    *,
    timeout: float = _GIT_TIMEOUT,
    foreign_owner: bool = False,
    scope: proc.ProcessScope | None = None,
    tail_bytes: int = proc.DEFAULT_TAIL_BYTES,
) -> proc.ProcResult:
    """Run git for the harness: never with hooks, never prompting for credentials.

    ``foreign_owner``: the repository is an attempt's, which belongs to the sandbox's uid when the harness is root;
    git would refuse it as of "dubious ownership" (a protection for repositories the harness did not make).
    ``scope``: run it there (inside that scope's sandbox), for git on a tree the repository's own code has written.
    """
    env = proc.clean_env(extra={"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})
    owned = ["-c", "safe.directory=*"] if foreign_owner else []
    argv = ["git", "-c", "core.hooksPath=/dev/null", *owned, *args]
    return proc.run(
        argv, cwd=cwd, env=env, timeout=timeout, sweep=scope is not None, scope=scope, tail_bytes=tail_bytes
    )


def _git_out(args: list[str], cwd: Path, what: str) -> str:
    result = git(args, cwd)
    if result.not_found:
        raise HarnessError("git is not installed or not on PATH; install git and try again")
    if not result.ok:
        detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        raise WorkspaceError(f"{what}: {detail[-1] if detail else result.describe_failure('git')}")
    return result.stdout_tail.decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class SourceRepo:
    """A repository whose objects the attempts borrow."""

    path: Path
    objects_dir: Path
    shallow_file: Path | None


def find_workspace(start: Path | None) -> Path:
    """The top level of the git repository containing ``start`` (default: the current directory)."""
    where = (start or Path.cwd()).resolve()
    if not where.exists():
        raise WorkspaceError(f"workspace {where} does not exist; pass --workspace with a git repository")
    if not where.is_dir():
        raise WorkspaceError(f"workspace {where} is not a directory; pass --workspace with a git repository")
    result = git(["rev-parse", "--show-toplevel"], where)
    if result.not_found:
        raise HarnessError("git is not installed or not on PATH; install git and try again")
    if not result.ok:
        raise WorkspaceError(f"{where} is not inside a git repository; run from a repository or pass --workspace DIR")
    return Path(result.stdout_tail.decode().strip())


def open_source(path: Path) -> SourceRepo:
    common = Path(_git_out(["rev-parse", "--path-format=absolute", "--git-common-dir"], path, str(path)))
    shallow = common / "shallow"
    return SourceRepo(path=path, objects_dir=common / "objects", shallow_file=shallow if shallow.exists() else None)


def materialize_source(kind: str, location: str, cache: Path) -> SourceRepo:
    """A repository attempts can borrow objects from: a local path as it is, a git bundle cloned once into ``cache``.

    A bundle is what a remote worker receives instead of a path on the driver's disk.
    """
    if kind == "path":
        return open_source(Path(location))
    if kind != "bundle":
        raise HarnessError(f"internal error: unknown repository source kind {kind!r}")
    target = cache / hashlib.sha256(location.encode()).hexdigest()[:16]
    if not (target / "HEAD").exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        remove_tree(partial)
        _git_out(["clone", "--bare", "--quiet", location, str(partial)], cache, f"cannot clone bundle {location}")
        partial.rename(target)
    return open_source(target)


def resolve_commit(repo: Path, ref: str = "HEAD") -> str:
    result = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo)
    if not result.ok:
        if ref == "HEAD":
            raise WorkspaceError(f"{repo} has no commits yet; commit something first (the base of every attempt)")
        raise WorkspaceError(f"{repo}: {ref!r} is not a commit in this repository; check the suite's workspace.ref")
    return result.stdout_tail.decode().strip()


def tracked_in(repo: Path, commit: str, rel: str) -> bool:
    """Whether ``commit`` holds anything at ``rel`` (a file or a directory)."""
    result = git(["ls-tree", "--name-only", commit, "--", rel], repo)
    return result.ok and bool(result.stdout_tail.strip())


def tree_digest(repo: Path, commit: str, hide: Sequence[str] = ()) -> str:
    """What identifies the files a task's attempts start from: the commit's tree id, or, with ``hide`` (the suite's
    committed directory), a digest of the tree with those paths left out, so that a commit touching only them
    leaves it as it was. Only the directories on the way to a hidden path are listed."""
    tree = _git_out(["rev-parse", "--verify", f"{commit}^{{tree}}"], repo, f"{repo}: reading {commit[:12]}")
    if not hide:
        return tree
    digest = hashlib.sha256()
    _hash_tree(repo, tree, "", set(hide), digest)
    return "without-hidden:" + digest.hexdigest()


_TREE_LISTING_BYTES = 64 * 1024 * 1024


def _hash_tree(repo: Path, tree: str, prefix: str, hide: set[str], digest: Any) -> None:
    result = git(["ls-tree", "-z", "--full-tree", tree], repo, tail_bytes=_TREE_LISTING_BYTES)
    if not result.ok or result.stdout_bytes > len(result.stdout_tail):
        raise WorkspaceError(f"{repo}: cannot list tree {tree[:12]}: {result.describe_failure('git ls-tree')}")
    for entry in result.stdout_tail.split(b"\0"):
        if not entry:
            continue
        info, _, name = entry.partition(b"\t")
        mode, kind, oid = info.decode("ascii").split(" ")
        path = prefix + os.fsdecode(name)
        if path in hide:
            continue
        if kind == "tree" and any(h.startswith(path + "/") for h in hide):
            _hash_tree(repo, oid, path + "/", hide, digest)
            continue
        digest.update(f"{mode} {kind} {oid} ".encode() + os.fsencode(path) + b"\0")


def is_dirty(repo: Path) -> bool:
    """Uncommitted changes (tracked or untracked, not ignored) in the user's working tree."""
    return bool(uncommitted(repo))


def uncommitted(repo: Path) -> list[str]:
    """The paths of the user's working tree with uncommitted changes (tracked or untracked, not ignored), relative
    to its top, as ``git status`` names them: a directory nothing of which is tracked is one entry ending in ``/``."""
    result = git(["status", "--porcelain=v1", "-z", "--untracked-files=normal"], repo, tail_bytes=_TREE_LISTING_BYTES)
    if not result.ok:
        raise WorkspaceError(f"{repo}: git status: {result.describe_failure('git status')}")
    entries = result.stdout_tail.split(b"\0")
    paths: list[str] = []
    skip = False
    for entry in entries:
        if skip or not entry:
            skip = False
            continue
        paths.append(os.fsdecode(entry[3:]))
        skip = entry[:1] in (b"R", b"C")  # a rename's or copy's old path follows
    return paths


def fetch_pinned(repo_spec: str, ref: str | None, suite_dir: Path, cache_dir: Path) -> Path:
    """A local repository for a suite's ``workspace.repo``: a path as is, a URL as a cached bare clone."""
    local = (suite_dir / repo_spec).expanduser()
    identity = repo_spec
    if "://" not in repo_spec and not repo_spec.startswith("git@") and local.exists():
        if local.is_dir():
            return find_workspace(local)
        # A git bundle shipped with the suite: cloned once per content, so an updated bundle is a new clone.
        repo_spec = str(local.resolve())
        identity = "bundle:" + input_sha256(local, MAX_REPO_BUNDLE_BYTES)  # never a FIFO or a device
    dest = cache_dir / "repos" / (hashlib.sha256(identity.encode()).hexdigest()[:20] + ".git")
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        remove_tree(tmp)
        result = git(["clone", "--bare", "--quiet", repo_spec, str(tmp)], dest.parent)
        if not result.ok:
            remove_tree(tmp)
            detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
            raise WorkspaceError(
                f"cannot clone suite workspace repo {repo_spec}: {detail[-1] if detail else 'git clone failed'}"
            )
        tmp.rename(dest)
    if ref and not git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], dest).ok:
        result = git(["fetch", "--quiet", "origin", ref], dest)
        if result.ok:
            return dest
        git(["fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*", "--tags"], dest)
    return dest


@dataclass(frozen=True)
class AttemptWorkspace:
    """A private repository plus its single worktree, all under ``root``."""

    root: Path
    git_dir: Path
    worktree: Path
    git_dir_id: safefs.Identity | None = None
    """(device, inode) of ``git_dir`` and ``worktree`` when the harness made them: after the agent ran, the
    harness only enters them through descriptors that match (see ``safefs``)."""
    worktree_id: safefs.Identity | None = None
    admin: str = ""
    """The worktree's directory under ``<git_dir>/worktrees/`` (its first name; a pooled worktree moves)."""
    layers: Layers | None = None
    """When the worktree is an overlay room (``overlay.py``): its layers, mounted only inside the sandbox; on the
    host ``worktree`` is then an empty mount point."""


def create_attempt_workspace(
    source: SourceRepo, base_commit: str, root: Path, *, worktree_name: str = "work"
) -> AttemptWorkspace:
    """A new private repository borrowing ``source``'s objects, with a worktree at ``base_commit``."""
    root.mkdir(parents=True, exist_ok=False)
    git_dir = root / GIT_DIR_NAME
    worktree = root / worktree_name
    try:
        _git_out(["init", "--bare", "--quiet", "--template=", str(git_dir)], root, "git init")
        write_alternates(git_dir, [source.objects_dir])
        if source.shallow_file is not None:
            shutil.copyfile(source.shallow_file, git_dir / "shallow")
        gd = f"--git-dir={git_dir}"
        _git_out([gd, "update-ref", "refs/worktrial/base", base_commit], root, "pin base commit")
        # An identity of the private repository's own, always: the sandbox's fresh HOME hides ~/.gitconfig, and an
        # agent's commit must work (and be attributed) the same inside the sandbox and out, without handing the
        # user's name and e-mail address to the agent.
        _git_out([gd, "config", "user.name", AGENT_NAME], root, "git config")
        _git_out([gd, "config", "user.email", AGENT_EMAIL], root, "git config")
        _git_out(
            [gd, "worktree", "add", "--quiet", "-b", ATTEMPT_BRANCH, str(worktree), base_commit],
            root,
            "create worktree",
        )
    except BaseException:
        remove_tree(root)
        raise
    return AttemptWorkspace(
        root=root,
        git_dir=git_dir,
        worktree=worktree,
        git_dir_id=safefs.identity(git_dir),
        worktree_id=safefs.identity(worktree),
        admin=worktree_name,
    )


def remove_tree(path: Path) -> bool:
    """Delete a file or directory tree, even one an agent made read-only, unreadable or absurdly deep.

    A symlink is removed itself, never followed. Returns False if something could not be removed (a process
    still writing into it); the caller decides whether that matters.
    """
    for _ in range(3):
        try:
            safefs.remove_at(None, str(path))
        except OSError:
            continue
        if not os.path.lexists(path):
            return True
    if os.path.lexists(path):
        log.warning("could not remove %s completely; delete it by hand to free the space", path)
        return False
    return True


def ensure_state_dir(workspace: Path) -> Path:
    """``<workspace>/.worktrial``, ignored by git so the user's status stays clean, and proven writable."""
    state = workspace / ".worktrial"
    try:
        state.mkdir(exist_ok=True)
        ignore = state / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# worktrial run data (traces, run store); not part of the repository\n*\n")
    except OSError as exc:
        raise WorkspaceError(unwritable(state, "run data", exc)) from None
    check_writable(state, "run data")
    return state


WRITE_PROBE_BYTES = 256 * 1024
"""Written and removed before a run starts: room for the run record and the first attempts, or no run at all."""


def check_writable(directory: Path, what: str) -> None:
    """Refuse to start when ``directory`` cannot take a write (read-only, not ours, disk or quota full).

    Finding that out before the first attempt costs one small file; finding it after the agents ran loses their
    results (and would be a traceback from deep inside the run store).
    """
    probe = directory / f".write-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            left = memoryview(bytes(WRITE_PROBE_BYTES))
            while left:  # a nearly full disk takes part of a write, and refuses the rest with ENOSPC
                left = left[os.write(fd, left) :]
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise WorkspaceError(unwritable(directory, what, exc)) from None


def unwritable(directory: Path, what: str, exc: OSError) -> str:
    """One line saying why worktrial cannot write its ``what`` into ``directory``, and what to do about it."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "the disk (or your quota) is full; free some space"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "it is not writable by this user; make it writable or run from a checkout you can write to"
    else:
        fix = exc.strerror or str(exc)
    return f"{directory}: cannot write worktrial's {what} there ({exc.strerror or exc}): {fix}"
