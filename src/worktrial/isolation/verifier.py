"""The verifier's room: after the agent's last process is gone, verify on its files, never on its git metadata.

The agent can shape everything git keeps next to its worktree: the index (``git update-index --assume-unchanged``
hides an edit from ``git diff``), refs (``git replace`` rewrites what history says), config, hooks, ``info/``
(grafts, attributes, excludes), the alternates list, and loose objects that shadow the base commit's (git reads its
own object directory before any alternate and does not check a loose object against its name). So before the
verify commands run, the private repository is put back to what the harness wrote, with three things of the
agent's kept as data:

- its files: the worktree's tracked and untracked files, what the stored patch shows; untracked files the tree
  ignores (a forged ``__pycache__``, build outputs) are removed, as a fresh checkout would not have them;
- its commits: the branch points at the commit the agent's HEAD named (read from its ref files as data, and
  kept only if it is a commit), so a task that checks ``git log`` still sees them;
- its objects, moved out of the private object directory into ``AGENT_OBJECTS``, listed after every store the
  base commit lives in: they can add objects (its commits) but never shadow one.

The index is made anew from that commit by the harness. Suites whose verification needs what this removes (build
outputs the patch does not carry) say ``"verify_in": "worktree"``, which verifies the agent's tree as it left it.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import ownership, safefs
from worktrial.isolation.alternates import quote_line
from worktrial.isolation.gitdir import Files, KeptGitDir
from worktrial.isolation.pool import AdminSnapshot
from worktrial.isolation.workspace import ATTEMPT_BRANCH, AttemptWorkspace, git

_INDEX_KEPT = "index-kept"
AGENT_OBJECTS = "agent-objects"
"""Next to the worktree: the objects the agent wrote, moved out of its private repository for verification."""
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def agent_head(ws: AttemptWorkspace, admin: str) -> str | None:
    """The commit id the agent's HEAD names, read as data from its files (no program runs on them): the worktree's
    HEAD, the symbolic refs it leads through (at most a few) and loose or packed refs. None when there is none."""
    try:
        with safefs.opened_dir(ws.git_dir, ws.git_dir_id) as git_fd:
            base = safefs.fd_path(git_fd) if safefs.has_fd_paths() else ws.git_dir
            text = _small(base / "worktrees" / admin / "HEAD")
            for _ in range(5):
                if _SHA.match(text):
                    return text
                if not text.startswith("ref: refs/"):
                    return None
                ref = text[5:]
                if ".." in ref.split("/") or "\0" in ref:
                    return None
                try:
                    text = _small(base / ref)
                except OSError:
                    packed = {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in _packed(base)}
                    text = packed.get(ref, "")
    except (OSError, ValueError, WorktrialError):
        return None
    return None


def _small(path: Path) -> str:
    return safefs.read_regular(path, 4096).decode("ascii", "replace").strip()


def _packed(base: Path) -> list[str]:
    try:
        text = safefs.read_regular(base / "packed-refs", 16 * 1024 * 1024).decode("utf-8", "replace")
    except (OSError, ValueError):
        return []
    return [line for line in text.splitlines() if line and line[0] not in "#^" and " " in line]


def enter(
    ws: AttemptWorkspace,
    snapshot: AdminSnapshot,
    head: str | None,
    start_commit: str,
    untouched: bool,
    owner: int | None,
    *,
    clean: bool = True,
    index_id: safefs.FileId | None = None,
    kept_git: KeptGitDir | None = None,
) -> safefs.FileId | None:
    """Put the private repository back to the harness's ``snapshot`` (made before any agent ran) with the branch at
    ``head`` (the start commit when ``head`` is None or not a commit), an index the harness made for it, and the
    worktree without ignored untracked files. ``untouched``: the worktree is still the pristine checkout (nothing in
    it is newer than the last reset), so with no new commit the snapshot's own index is that index and there is no
    file to remove. ``clean=False``: the caller already removed the ignored untracked files it found in O(the change)
    (``Slot.agent_change``), so git does not walk the tree for them; with no new commit the snapshot's index (the
    start commit's, its stat data a cache that any changed file misses) is then the index. ``ws.layers``: the room is
    an overlay whose lower layer already holds the harness's ``.git`` link. Raises WorkspaceError (or OSError) when
    the room cannot be built. ``index_id``: the index as the harness last left it, kept (not written again) when it
    is still that file and is the index the room needs. Returns the identity of the index the room has when it is
    the snapshot's (None when the room needed another: a new commit's). ``kept_git``: what the harness last wrote in
    the git dir (``gitdir.py``): when nothing wrote there since and the room needs the start commit and the
    snapshot's index, only the few files that differ are written; it is settled before returning."""
    with contextlib.ExitStack() as fds:
        build_fd = fds.enter_context(safefs.opened_dir(ws.root, None))
        git_fd = fds.enter_context(safefs.opened_dir(ws.git_dir, ws.git_dir_id))
        work_fd = fds.enter_context(safefs.opened_dir(ws.worktree, ws.worktree_id))
        if (
            kept_git is not None
            and head in (None, start_commit)
            and (untouched or not clean)
            and kept_git.index_snapshot
            and kept_git.untouched(git_fd)
        ):
            return _enter_untouched(ws, snapshot, start_commit, owner, kept_git, build_fd, git_fd, work_fd)
        _set_objects_aside(build_fd, git_fd)
        reuse = head is None or head == start_commit
        kept = reuse and safefs.stash_if_same(git_fd, snapshot.index_rel, index_id, build_fd, _INDEX_KEPT)
        _restore_git_dir(git_fd, snapshot, ws)
        linked = _link_worktree(work_fd, ws, snapshot.admin)
        base = _git_base(ws, snapshot.admin, git_fd, work_fd)
        commit = _agent_commit(base, head, start_commit)
        safefs.write_at(git_fd, f"refs/heads/{ATTEMPT_BRANCH}", f"{commit}\n".encode())
        snapshot_index = commit == start_commit and (untouched or not clean)
        if kept and snapshot_index:
            os.rename(_INDEX_KEPT, snapshot.index_rel, src_dir_fd=build_fd, dst_dir_fd=git_fd)
        elif snapshot_index:
            safefs.write_at(git_fd, snapshot.index_rel, snapshot.index)
        else:
            _read_tree(base, commit, clean)
        if kept:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_INDEX_KEPT, dir_fd=build_fd)  # kept but not used (a new commit: read-tree made one)
        ownership.hand_over_fd(git_fd, owner, recursive=True)
        if linked:
            ownership.hand_over_entry(work_fd, ".git", owner)
        if kept_git is not None:
            kept_git.wrote(verifier_files(snapshot, ws, commit), build_fd, index_snapshot=snapshot_index)
            kept_git.settle(build_fd)
        # Only the snapshot's own index may be kept by the next reset; one read-tree made (a new commit) may not.
        return safefs.file_id(git_fd, snapshot.index_rel) if snapshot_index else None


def _enter_untouched(
    ws: AttemptWorkspace,
    snapshot: AdminSnapshot,
    start_commit: str,
    owner: int | None,
    kept_git: KeptGitDir,
    build_fd: int,
    git_fd: int,
    work_fd: int,
) -> safefs.FileId | None:
    """The room when nothing wrote in the git dir since the harness did: no object of the agent's to set aside, the
    branch at the start commit, the snapshot's index in place; only the alternates and the worktree's path change."""
    safefs.remove_at(build_fd, AGENT_OBJECTS)
    os.mkdir(AGENT_OBJECTS, 0o755, dir_fd=build_fd)  # listed in the alternates, as when the agent wrote objects
    wanted = verifier_files(snapshot, ws, start_commit)
    kept_git.update(git_fd, wanted, owner)
    if _link_worktree(work_fd, ws, snapshot.admin):
        ownership.hand_over_entry(work_fd, ".git", owner)
    kept_git.wrote(wanted, build_fd, index_snapshot=True)
    kept_git.settle(build_fd)
    return safefs.file_id(git_fd, snapshot.index_rel)


def verifier_files(snapshot: AdminSnapshot, ws: AttemptWorkspace, commit: str) -> Files:
    """Every file the verifier's room has in its git dir but the index: the snapshot's, the agent's objects listed
    after every base store, the room's worktree path and the branch at ``commit`` (``_restore_git_dir``)."""
    files = {rel: (data, mode) for rel, (data, mode) in snapshot.files.items() if rel != "objects/info/alternates"}
    alternates = snapshot.files.get("objects/info/alternates", (b"", 0o644))[0]
    files["objects/info/alternates"] = (alternates + quote_line(ws.root / AGENT_OBJECTS) + b"\n", 0o644)
    files[f"worktrees/{snapshot.admin}/gitdir"] = (f"{ws.worktree}/.git\n".encode(), 0o644)
    files[f"refs/heads/{ATTEMPT_BRANCH}"] = (f"{commit}\n".encode(), 0o644)
    return files


def _restore_git_dir(git_fd: int, snapshot: AdminSnapshot, ws: AttemptWorkspace) -> None:
    """The private git dir as the harness's snapshot has it, the agent's objects listed after every base store."""
    safefs.clear_dir(git_fd)
    for rel, (data, mode) in snapshot.files.items():
        if rel != "objects/info/alternates":
            safefs.write_at(git_fd, rel, data, mode)
    alternates = snapshot.files.get("objects/info/alternates", (b"", 0o644))[0]
    safefs.write_at(git_fd, "objects/info/alternates", alternates + quote_line(ws.root / AGENT_OBJECTS) + b"\n")
    for rel in ("refs/tags", "objects/pack"):
        safefs.makedirs_at(git_fd, rel)
    safefs.write_at(git_fd, f"worktrees/{snapshot.admin}/gitdir", f"{ws.worktree}/.git\n".encode())


def _link_worktree(work_fd: int, ws: AttemptWorkspace, admin: str) -> bool:
    """The worktree's ``.git`` link, written when it is not already right; whether it was written. An overlay room's
    lower layer already holds the harness's link."""
    link = f"gitdir: {ws.git_dir}/worktrees/{admin}\n".encode() if ws.layers is None else b""
    with contextlib.suppress(OSError, ValueError):
        if safefs.read_regular(Path(safefs.fd_path(work_fd)) / ".git", 4096) == link:
            link = b""  # already right: rewriting it would change the worktree's ctime for nothing
    if link:
        safefs.write_at(work_fd, ".git", link)
    return bool(link)


def _git_base(ws: AttemptWorkspace, admin: str, git_fd: int, work_fd: int) -> list[str]:
    """git's options for the room: the restored git dir and the worktree by checked descriptor, no caches."""
    if safefs.has_fd_paths():
        git_dir, work = f"{safefs.fd_path(git_fd)}/worktrees/{admin}", str(safefs.fd_path(work_fd))
    else:
        git_dir, work = f"{ws.git_dir}/worktrees/{admin}", str(ws.worktree)
    base = ["-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false", f"--git-dir={git_dir}"]
    return [*base, f"--work-tree={work}"]


def _agent_commit(base: list[str], head: str | None, start_commit: str) -> str:
    """The agent's HEAD when it is a commit, else the start commit."""
    if head is not None and head != start_commit:
        kind = git([*base, "cat-file", "-t", head], _work(base), foreign_owner=True)
        if kind.ok and kind.stdout_tail.strip() == b"commit":
            return head
    return start_commit


def _read_tree(base: list[str], commit: str, clean: bool) -> None:
    """An index the harness makes for ``commit`` (and, with ``clean``, the ignored untracked files gone)."""
    for args in (["read-tree", commit], ["clean", "-fdXq"]) if clean else (["read-tree", commit],):
        result = git([*base, *args], _work(base), foreign_owner=True)
        if not result.ok:
            raise WorkspaceError(f"verifier's room: {result.describe_failure('git ' + args[0])}")


def _work(base: list[str]) -> Path:
    return Path(base[-1].removeprefix("--work-tree="))


def _set_objects_aside(build_fd: int, git_fd: int) -> None:
    """Move the private object directory's contents (but ``info``, where a forged commit-graph would lie about
    history, and which goes) into ``AGENT_OBJECTS`` next to the worktree."""
    safefs.remove_at(build_fd, AGENT_OBJECTS)
    os.mkdir(AGENT_OBJECTS, 0o755, dir_fd=build_fd)
    try:
        objects_fd = safefs.open_dir("objects", None, dir_fd=git_fd)
    except (OSError, WorktrialError):
        return  # not a directory (a link the agent put there): nothing of its objects to keep
    try:
        with safefs.opened_dir(AGENT_OBJECTS, None, dir_fd=build_fd) as aside_fd:
            for name in os.listdir(objects_fd):
                if name != "info":
                    os.rename(name, name, src_dir_fd=objects_fd, dst_dir_fd=aside_fd)
    finally:
        os.close(objects_fd)
