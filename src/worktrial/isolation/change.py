"""The agent's change as data, found in O(the change): the patch, and the files neither it nor the verifier keeps.

A slot knows which entries the agent touched (its overlay room's upper directory, or the copying slot's ctime walk)
and stages their old and new contents side by side (``Staged``); ``finish`` turns that into an ``AgentChange``: the
new untracked files the tree's ignore rules match (read from copies of the ``.gitignore`` files that apply, never
with the agent's repository or config), nested repositories as one gitlink each, and the patch ``git diff
--no-index`` prints for the staged trees.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from worktrial.errors import WorkspaceError, WorktrialError
from worktrial.isolation import overlay, proc, safefs
from worktrial.isolation.basetree import lstat_kind
from worktrial.isolation.patch import STAGE_NEW, PatchData, harness_git_env, link_or_copy, staged_patch

GITFILE = ".git"
_ZERO = "0" * 40


@dataclass(frozen=True)
class AgentChange:
    """What the agent changed, as the harness found it once every agent process had ended."""

    patch: PatchData | None
    """None when no patch was asked for (``--no-artifacts``) or git could not produce one."""
    ignored: list[str]
    """What the verifier's room leaves out (paths relative to the worktree): new untracked files the tree's ignore
    rules match, and entries that are not file contents (a FIFO, a socket)."""
    untouched: bool
    """Nothing in the worktree changed (no git was needed to know it)."""
    exact: bool = True
    """``ignored`` is complete; when False (the change could not be found in O(the change)) the verifier's room
    finds the ignored files itself (``git clean -X``)."""

    @classmethod
    def nothing(cls, max_bytes: int | None) -> AgentChange:
        empty = PatchData(b"", 0, False, [], exact=b"", exact_missing=None) if max_bytes is not None else None
        return cls(empty, [], untouched=True)

    @classmethod
    def unknown(cls, patch: PatchData | None = None) -> AgentChange:
        """A change found the whole-tree way (or not at all): the verifier's room cleans ignored files with git."""
        return cls(patch, [], untouched=False, exact=False)


@dataclass(frozen=True)
class Staged:
    """A slot's view of the change, its base side already staged under ``STAGE_OLD``."""

    new_fd: int
    """The directory holding the new contents: the worktree, or the overlay room's upper directory."""
    present: list[str]
    """Files and links of the change that exist now (the harness's ``.git`` link never)."""
    untracked: list[str]
    """Of those, the ones the base does not have as files (candidates for the ignore rules)."""
    odd: list[str]
    """Entries that are not file contents (FIFOs, sockets)."""
    lower_fd: int = -1
    """Overlay: the pristine checkout (a ``.gitignore`` the upper directory lacks is the lower's)."""
    hidden: set[str] = field(default_factory=set)
    """Overlay: opaque directories (nothing of the lower layer shows through them)."""
    moved: dict[str, str] = field(default_factory=dict)
    """Overlay: files of a renamed directory -> their old path in the lower layer."""


def finish(staged: Staged, stage: Path, max_bytes: int | None, *, prepared: bool = False) -> AgentChange:
    """The change from what a slot staged: ignored files found, new contents staged, the patch computed.

    ``prepared``: the base is one an environment setup committed (ignored files too: ``__pycache__``), so a changed
    tracked file the rules ignore is that build output, listed in the patch's ``ignored`` (shown collapsed).
    Elsewhere a tracked file is ignored only if the user force-added it, and asking would cost an attempt that
    changed no untracked file a git process (~5 ms CPU)."""
    nested = _nested_repositories(staged.present)
    inside = tuple(f"{root}/" for root in nested)
    present = [p for p in staged.present if not p.startswith(inside)]
    untracked = [p for p in staged.untracked if not p.startswith(inside)]
    lower = staged.lower_fd if staged.lower_fd >= 0 else None
    asked = present if max_bytes is not None and prepared else untracked
    matched = _ignored(stage, staged.new_fd, asked, lower, staged.hidden)
    new = set(untracked)
    ignored = [p for p in matched if p in new]
    ignored_tracked = [p for p in matched if p not in new]
    ignored += staged.odd  # FIFOs, sockets: not file contents, in neither the patch nor the verifier's room
    if max_bytes is None:
        return AgentChange(None, ignored, untouched=False)
    skip = set(ignored)
    for rel in present:
        if rel in staged.moved:  # a renamed directory's file: the lower layer holds it, at its old path
            link_or_copy(staged.moved[rel], stage / STAGE_NEW / rel, src_dir_fd=staged.lower_fd)
        elif rel not in skip:
            link_or_copy(rel, stage / STAGE_NEW / rel, src_dir_fd=staged.new_fd)
    patch = staged_patch(stage, max_bytes)
    if patch is not None and nested:
        patch = _with_gitlinks(patch, {root: _nested_head(staged.new_fd, root) for root in nested}, max_bytes)
    if patch is not None and ignored_tracked:
        patch = replace(patch, ignored=sorted(ignored_tracked))
    return AgentChange(patch, ignored, untouched=False)


def in_git_link(rel: str) -> bool:
    """The worktree's ``.git`` link (or anything the agent put in its place) is the harness's, never the change."""
    return rel == GITFILE or rel.startswith(GITFILE + "/")


def _ignored(
    stage: Path, tree_fd: int, paths: list[str], lower_fd: int | None = None, opaque: set[str] | None = None
) -> list[str]:
    """Which of ``paths`` (new untracked files) the tree's ``.gitignore`` files ignore.

    ``lower_fd``: ``tree_fd`` is an overlay's upper directory and this its lower layer: a ``.gitignore`` the upper
    directory does not have (and does not hide: a whiteout, or an ``opaque`` directory above it) is the lower's.

    The ``.gitignore`` files that apply (in the directories leading to each path, as the agent left them) are
    copied into a directory of their own, and ``git check-ignore`` reads only that, with no repository: no
    file of the agent's but those few is read, and no configuration of its (excludes, attributes) is used."""
    if not paths:
        return []
    rules = stage / "rules"
    rules.mkdir()
    dirs = {""}
    for rel in paths:
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for d in sorted(dirs):
        _copy_rules(rules, d, tree_fd, lower_fd, opaque or set())
    if not any(rules.rglob(".gitignore")):
        return []
    env = harness_git_env(GIT_CEILING_DIRECTORIES=str(stage))
    empty = stage / "empty.git"  # the least git accepts as a repository, written here (no ``git init``)
    for sub in ("objects", "refs"):
        (empty / sub).mkdir(parents=True)
    (empty / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (empty / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    argv = ["git", "-c", "core.excludesFile=/dev/null", f"--git-dir={empty}", f"--work-tree={rules}"]
    argv += ["check-ignore", "--no-index", "-z", "--stdin"]
    data = b"".join(os.fsencode(p) + b"\0" for p in paths)
    result = proc.run(argv, cwd=rules, env=env, timeout=120, stdin=data, sweep=False, tail_bytes=64 * 1024 * 1024)
    if result.returncode not in (0, 1):
        raise WorkspaceError(f"reading ignore rules: {result.describe_failure('git check-ignore')}")
    return [os.fsdecode(p) for p in result.stdout_tail.split(b"\0") if p]


def _copy_rules(rules: Path, d: str, tree_fd: int, lower_fd: int | None, opaque: set[str]) -> None:
    """The ``.gitignore`` of directory ``d`` as the agent left it, copied under ``rules`` (if it is a file)."""
    name = f"{d}/.gitignore" if d else ".gitignore"
    source = tree_fd
    if lower_fd is not None and lstat_kind(safefs.fd_path(tree_fd) / name) is None:
        parts = d.split("/") if d else []
        shadowed = any("/".join(parts[: i + 1]) in opaque for i in range(len(parts)))
        source = -1 if shadowed else lower_fd
    with contextlib.suppress(OSError):
        if source >= 0 and overlay.lower_kind(source, name) == "file":  # never through a link on the way
            link_or_copy(name, rules / name, src_dir_fd=source)


def _nested_repositories(present: list[str]) -> list[str]:
    """Directories of the change that hold a repository of their own (a ``.git`` inside): as ``git add -A`` does,
    the change names each as one entry (a gitlink), never the files inside it."""
    roots: set[str] = set()
    for rel in present:
        parts = rel.split("/")
        for i, part in enumerate(parts[1:], start=1):
            if part == GITFILE:
                roots.add("/".join(parts[:i]))
                break
    return sorted(r for r in roots if not any(r.startswith(o + "/") for o in roots))


def _nested_head(tree_fd: int, root: str) -> str:
    """The commit a nested repository's HEAD names, read as data (a few small files, never a link); zeros if none."""
    base = safefs.fd_path(tree_fd) / root / GITFILE
    try:
        text = safefs.read_regular(base / "HEAD", 4096).decode("ascii", "replace").strip()
        for _ in range(5):
            if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
                return text
            if not text.startswith("ref: refs/") or ".." in text:
                return _ZERO
            text = safefs.read_regular(base / text[5:], 4096).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return _ZERO
    return _ZERO


def _with_gitlinks(patch: PatchData, heads: dict[str, str], max_bytes: int) -> PatchData:
    """The patch with one new gitlink per nested repository, as git prints a submodule it was not told about."""
    extra = b"".join(
        f"diff --git a/{root} b/{root}\nnew file mode 160000\nindex 0000000..{head[:7]}\n--- /dev/null\n"
        f"+++ b/{root}\n@@ -0,0 +1 @@\n+Subproject commit {head}\n".encode("utf-8", "surrogateescape")
        for root, head in sorted(heads.items())
    )
    diff = (patch.diff + extra)[:max_bytes] if not patch.truncated else patch.diff
    total = patch.total_bytes + len(extra)
    files = sorted([*patch.files, *heads])
    # A nested repository is one gitlink here; the verifier saw its files, which no patch holds.
    why = "it holds a nested repository, which a patch records only as a commit id"
    return PatchData(diff=diff, total_bytes=total, truncated=total > max_bytes, files=files, exact_missing=why)


def remove_files(tree_fd: int, rels: list[str]) -> None:
    """Unlink these files below ``tree_fd`` (a symlinked component stops one), then the directories that held them
    and are empty now, as ``git clean`` leaves no empty directory of untracked files behind."""
    parents: set[str] = set()
    for rel in rels:
        safefs.unlink_rel(tree_fd, rel)
        parts = rel.split("/")[:-1]
        parents.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for rel in sorted(parents, key=lambda p: -p.count("/")):
        parent, _, name = rel.rpartition("/")
        with contextlib.suppress(OSError, WorktrialError):
            if not parent:
                os.rmdir(name, dir_fd=tree_fd)
                continue
            with safefs.opened_dir(parent, None, dir_fd=tree_fd) as parent_fd:
                os.rmdir(name, dir_fd=parent_fd)
