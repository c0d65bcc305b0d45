"""The agent's change as a patch: the attempt's files against the commit it started from.

Untracked files are included, binary files are named, not inlined. The diff is written to a file and only its first
``max_bytes`` are read, so a huge change costs bounded memory.

Everything in and next to the worktree is the agent's (DESIGN.md, "Trust boundary"): the private repository's
index (where ``git update-index --assume-unchanged`` hides an edit from ``git add``), its config (filter and diff
drivers, ``diff.submodule=diff`` with a nested repository's diff command, ``core.fsmonitor``), its hooks, its
``info/`` and its refs (``git replace``). So the patch never reads any of it: git runs on a git directory only the
harness writes (``PATCH_GIT`` next to the worktree, out of the agent's sight), whose config defines no driver, whose
objects borrow only the stores the base commit lives in, and whose index the harness made from that commit and
keeps as a stat cache between the slot's attempts (an edit changes a file's ctime, which no process can set back).
The worktree is named by a descriptor the harness checked, so a worktree replaced by a symlink is never followed.
Attributes in the tree can still select a driver by name, but none is defined, so nothing of the agent's runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from worktrial.errors import WorktrialError
from worktrial.isolation import ownership, proc, safefs
from worktrial.isolation.alternates import write_alternates
from worktrial.isolation.workspace import AttemptWorkspace

_GIT_TIMEOUT = 120.0
PATCH_GIT = "patch.git"
"""The harness's own git directory for patches, next to the slot's worktree and private repository."""
_CONFIG = b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
_HARNESS_ONLY = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.trustctime=true",
    "-c",
    "core.checkStat=default",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "diff.external=",
    "-c",
    "diff.submodule=short",
    "-c",
    "safe.directory=*",  # the worktree is the sandbox uid's when the harness is root
]


CHANGE_MAX_BYTES = 16 * 1024 * 1024
"""The largest change kept byte for byte (``PatchData.exact``) for regrading; a larger one is named, not kept."""
_GIT_BINARY = b"GIT binary patch\n"


@dataclass(frozen=True)
class PatchData:
    diff: bytes
    """The patch as people read it: binary files named, not inlined; at most the ``max_bytes`` asked for."""
    total_bytes: int
    truncated: bool
    files: list[str]
    ignored: list[str] = field(default_factory=list)
    """Paths of the patch the tree's ignore rules match: tracked only because the environment's setup committed
    its build output into the base (``__pycache__``); reports show them collapsed."""
    exact: bytes | None = None
    """The whole change as ``git apply`` takes it (binary files inlined, full object ids, modes, symlinks,
    deletions), what ``regrade`` rebuilds the agent's tree from; None when it is not kept (``exact_missing``)."""
    exact_missing: str | None = "not computed"
    """Why ``exact`` is None."""


class ChangeNotApplied(WorktrialError):
    """A stored change that does not apply to the tree it was made against (git's first line says why)."""


def apply_change(worktree: Path, change: bytes) -> None:
    """Rebuild an agent's tree: its exact change (``PatchData.exact``) applied to ``worktree`` at the commit the
    change was made against. git runs outside any repository (no git dir, no configuration, no hooks: nothing of the
    worktree's metadata is read); it writes only below ``worktree`` (a path through a symlink or out of the tree is
    refused). What git writes then belongs to the uid the worktree belongs to."""
    if not change:
        return
    # A file the change creates may be there already, put there after the commit the change was made against: a
    # container task's seeded working directory. The agent's tree has the change's version, so that one replaces it.
    fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    try:
        for rel in created_files(change):
            safefs.unlink_rel(fd, rel)
    finally:
        os.close(fd)
    with tempfile.TemporaryDirectory(prefix="worktrial-apply-") as tmp:
        env = harness_git_env(GIT_DIR=str(Path(tmp) / "no-repository"), GIT_CEILING_DIRECTORIES=str(worktree.parent))
        argv = ["git", *_HARNESS_ONLY, "apply", "--binary", "--whitespace=nowarn", "-"]
        result = proc.run(argv, cwd=worktree, env=env, timeout=_GIT_TIMEOUT, stdin=change, sweep=False)
    if not result.ok:
        lines = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        raise ChangeNotApplied(lines[0] if lines else result.describe_failure("git apply"))
    owner = os.lstat(worktree).st_uid
    if owner != os.geteuid():
        ownership.hand_over(worktree, owner)


def harness_git_env(**extra: str) -> dict[str, str]:
    """The environment of git run for the harness on state it staged or wrote itself: no prompt, no system or user
    configuration, plus ``extra``."""
    return proc.clean_env(
        extra={"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", **extra}
    )


def _git(git_dir: Path, worktree: Path, *args: str) -> proc.ProcResult:
    env = harness_git_env()
    argv = ["git", *_HARNESS_ONLY, f"--git-dir={git_dir}", f"--work-tree={worktree}", *args]
    return proc.run(argv, cwd=worktree, env=env, timeout=_GIT_TIMEOUT, sweep=False)


def _harness_git_dir(git_dir: Path, start_commit: str, borrowed: Sequence[Path], worktree: Path) -> bool:
    """The harness's git directory for this worktree's patches, made on first use with an index of
    ``start_commit``; later patches keep its index as their stat cache. False when it cannot be made."""
    if (git_dir / "HEAD").is_file() and (git_dir / "index").is_file():
        return True
    git_dir.mkdir(mode=0o700, exist_ok=True)
    for sub in ("refs/heads", "refs/tags", "objects/info"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "config").write_bytes(_CONFIG)
    (git_dir / "HEAD").write_text(f"{start_commit}\n")
    write_alternates(git_dir, [Path(b) for b in borrowed])
    return _git(git_dir, worktree, "read-tree", start_commit).ok


def agent_patch(
    ws: AttemptWorkspace, start_commit: str, max_bytes: int, borrowed: Sequence[Path], home: Path | None = None
) -> PatchData | None:
    """The worktree's change against ``start_commit`` (the commit the attempt started from), computed in the
    harness's own git directory ``home`` (default: ``PATCH_GIT`` next to the worktree) that borrows ``borrowed``
    object stores; None when git could not produce it or the agent replaced the worktree."""
    git_dir = home or ws.root / PATCH_GIT
    try:
        with safefs.opened_dir(ws.worktree, ws.worktree_id) as work_fd:
            worktree = safefs.fd_path(work_fd) if safefs.has_fd_paths() else ws.worktree
            if not _harness_git_dir(git_dir, start_commit, borrowed, worktree):
                return None
            try:
                return _patch(git_dir, worktree, start_commit, max_bytes)
            finally:
                _drop_loose_objects(git_dir)
    except (OSError, WorktrialError):
        return None


def _drop_loose_objects(git_dir: Path) -> None:
    """The blobs ``git add`` wrote are only needed by this patch's diff. The index keeps naming them, but an entry
    whose file changed is restored by the next reset (a new ctime), so it is hashed again before any diff."""
    objects = git_dir / "objects"
    with contextlib.suppress(OSError):
        for entry in os.scandir(objects):
            if entry.name not in ("info", "pack") and entry.is_dir(follow_symlinks=False):
                for item in os.scandir(entry.path):
                    with contextlib.suppress(OSError):
                        os.unlink(item.path)
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _patch(git_dir: Path, worktree: Path, start_commit: str, max_bytes: int) -> PatchData | None:
    if not _git(git_dir, worktree, "add", "-A", "--", ".").ok:
        return None
    names = _git(git_dir, worktree, "diff", "--cached", "--name-only", "-z", "--no-renames", start_commit, "--")
    files = [n for n in names.stdout_tail.decode("utf-8", "replace").split("\0") if n]
    with tempfile.TemporaryDirectory(prefix="worktrial-patch-") as tmp:
        out = Path(tmp) / "patch.diff"
        result = _git(
            git_dir,
            worktree,
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            "--binary",
            "--full-index",
            f"--output={out}",
            start_commit,
            "--",
        )
        if not result.ok or not out.is_file():
            return None
        read = read_diff(out, max_bytes)
    ignored = _ignored_files(git_dir, worktree, files)
    return read.patch(files, ignored)


def _ignored_files(git_dir: Path, worktree: Path, files: list[str]) -> list[str]:
    """Which of the patch's files the worktree's ignore rules match. New ignored files were never added, so these
    are tracked ones: build output the environment's setup committed into the base (``__pycache__``)."""
    if not files:
        return []
    argv = ["git", *_HARNESS_ONLY, f"--git-dir={git_dir}", f"--work-tree={worktree}"]
    argv += ["check-ignore", "--no-index", "-z", "--stdin"]
    data = b"".join(f.encode("utf-8", "surrogateescape") + b"\0" for f in files)
    result = proc.run(
        argv, cwd=worktree, env=harness_git_env(), timeout=_GIT_TIMEOUT, stdin=data, sweep=False, tail_bytes=len(data)
    )
    if result.returncode not in (0, 1):
        return []
    matched = set(result.stdout_tail.decode("utf-8", "replace").split("\0"))
    return [f for f in files if f in matched]


# -- the patch of a change set: two small trees, one ``git diff --no-index`` ------------------------------------------

STAGE_OLD = "a"
STAGE_NEW = "b"
_NO_INDEX = [
    "diff",
    "--no-index",
    "--no-prefix",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--binary",
    "--full-index",
]


def link_or_copy(src: Path | str, dest: Path, *, src_dir_fd: int | None = None) -> None:
    """``dest`` as a hard link of ``src`` (never followed), or a copy where a link is refused."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest, src_dir_fd=src_dir_fd, follow_symlinks=False)
        return
    except OSError:
        pass
    source = f"/proc/self/fd/{src_dir_fd}/{src}" if src_dir_fd is not None else str(src)
    if os.path.islink(source):
        os.symlink(os.readlink(source), dest)
    else:
        shutil.copyfile(source, dest, follow_symlinks=False)
        os.chmod(dest, 0o755 if os.stat(source).st_mode & 0o100 else 0o644)


def staged_patch(stage: Path, max_bytes: int) -> PatchData | None:
    """The patch from ``stage/a`` (the base's version of every changed path) to ``stage/b`` (the agent's version;
    a path missing there was deleted), as ``git diff`` of the two commits would print it. No repository is read and
    no object is written: git only hashes the files it compares. None when git fails."""
    for side in (STAGE_OLD, STAGE_NEW):
        (stage / side).mkdir(exist_ok=True)
    out = stage / "patch.diff"
    env = harness_git_env(GIT_CEILING_DIRECTORIES=str(stage.parent), GIT_DIR=str(stage / "no-repository"))
    argv = ["git", *_HARNESS_ONLY, *_NO_INDEX, f"--output={out}", STAGE_OLD, STAGE_NEW]
    result = proc.run(argv, cwd=stage, env=env, timeout=_GIT_TIMEOUT, sweep=False)
    if result.returncode not in (0, 1) or not out.is_file():
        return None
    read = read_diff(out, max_bytes, canonical=True)
    return read.patch(read.files)


@dataclass(frozen=True)
class ReadDiff:
    """A ``git diff --binary --full-index`` output read once: the patch people read, and the exact one."""

    shown: bytes
    shown_total: int
    max_bytes: int
    exact: bytes | None
    exact_total: int
    files: list[str]

    def patch(self, files: list[str], ignored: list[str] | None = None) -> PatchData:
        missing = None if self.exact is not None else _too_large(self.exact_total)
        return PatchData(
            diff=self.shown,
            total_bytes=self.shown_total,
            truncated=self.shown_total > self.max_bytes,
            files=files,
            ignored=ignored or [],
            exact=self.exact,
            exact_missing=missing,
        )


def _too_large(size: int) -> str:
    return f"the change is {size / 1048576:.1f} MiB, more than the {CHANGE_MAX_BYTES // 1048576} MiB kept"


def read_diff(path: Path, max_bytes: int, *, canonical: bool = False) -> ReadDiff:
    """Read a ``git diff --binary --full-index`` output in one pass, in bounded memory: the exact patch (up to
    ``CHANGE_MAX_BYTES``, else None) and the first ``max_bytes`` of the patch as git prints it without
    ``--binary`` and ``--full-index`` (binary files named, object ids abbreviated). ``canonical``: the headers of
    ``--no-prefix`` output of the staged trees are rewritten to git's usual ``a/`` ``b/`` form."""
    shown, exact = bytearray(), bytearray()
    shown_total = exact_total = 0
    files: list[str] = []
    header = binary = False
    names = (b"", b"")
    with open(path, "rb") as fh:
        for line in fh:
            if line.startswith(b"diff --git "):
                if canonical:
                    line, name = _canonical_header(line)
                    files.append(name)
                header, binary, names = True, False, _header_names(line)
            exact_total += len(line)
            if exact_total <= CHANGE_MAX_BYTES:
                exact += line
            if binary:
                continue
            out = line
            if header:
                if line.startswith(b"new file mode "):
                    names = (b"/dev/null", names[1])
                elif line.startswith(b"deleted file mode "):
                    names = (names[0], b"/dev/null")
                elif line.startswith(b"index "):
                    out = _abbreviated(line)
                elif line == _GIT_BINARY:
                    binary = True
                    out = b"Binary files " + names[0] + b" and " + names[1] + b" differ\n"
                elif line.startswith((b"--- ", b"@@")):
                    header = False
            shown_total += len(out)
            if len(shown) < max_bytes:
                shown += out
    kept = bytes(exact) if exact_total <= CHANGE_MAX_BYTES else None
    return ReadDiff(bytes(shown[:max_bytes]), shown_total, max_bytes, kept, exact_total, files)


def change_result(exact: bytes) -> str:
    """What an exact patch leaves, as one digest: every path it touches with its new mode and object id (or that it
    is deleted). Two patches that leave the same files digest alike, however git laid them out (a patch of a
    private repository's index, or of two staged trees), which is what says a rebuilt tree is the agent's."""
    entries: list[bytes] = []
    name = b""
    fields: dict[str, bytes] = {}

    def close() -> None:
        if name:
            if "deleted" in fields:
                entries.append(name + b"\0deleted")
            else:
                mode = fields.get("mode", b"?")
                entries.append(name + b"\0" + mode + b" " + fields.get("oid", b"unchanged"))

    header = False
    for line in exact.splitlines():
        if line.startswith(b"diff --git "):
            close()
            new = _header_names(line + b"\n")[1]
            name, fields, header = (new[:1] + new[3:] if new.startswith(b'"') else new[2:]), {}, True
        elif header:
            if line.startswith((b"new file mode ", b"new mode ")):
                fields["mode"] = line.rsplit(b" ", 1)[1]
            elif line.startswith(b"deleted file mode "):
                fields["deleted"] = b""
            elif line.startswith(b"index "):
                ids, _, mode = line[len(b"index ") :].partition(b" ")
                fields["oid"] = ids.partition(b"..")[2]
                if mode:
                    fields.setdefault("mode", mode)
            elif line.startswith((b"--- ", b"@@", b"GIT binary patch", b"Binary files ")):
                header = False
    close()
    return hashlib.sha256(b"\n".join(sorted(entries))).hexdigest()


def created_files(exact: bytes) -> list[str]:
    """The paths an exact patch creates (``new file mode``), as paths relative to the tree."""
    found: list[str] = []
    name: bytes | None = None
    for line in exact.splitlines():
        if line.startswith(b"diff --git "):
            name = _header_names(line + b"\n")[1]
        elif name is not None and line.startswith(b"new file mode "):
            found.append(_unquote(name[1:-1])[2:] if name.startswith(b'"') else os.fsdecode(name[2:]))
            name = None
        elif line.startswith((b"--- ", b"@@", b"GIT binary patch")):
            name = None
    return found


_GITLINK = re.compile(rb"^(?:new file mode|new mode|index \S+) 160000$", re.MULTILINE)


def holds_gitlink(exact: bytes) -> bool:
    """Whether an exact patch records a nested repository (a gitlink: its commit id only, none of its files)."""
    return _GITLINK.search(exact) is not None


def _header_names(line: bytes) -> tuple[bytes, bytes]:
    """The two names of a ``diff --git`` line (no renames: both are the same path, so they have the same length)."""
    rest = line[len(b"diff --git ") :].rstrip(b"\n")
    half = (len(rest) - 1) // 2
    return rest[:half], rest[half + 1 :]


def _abbreviated(line: bytes) -> bytes:
    """``index <40 hex>..<40 hex> mode`` as git prints it without ``--full-index`` (7 hex digits each)."""
    ids, space, mode = line[len(b"index ") :].rstrip(b"\n").partition(b" ")
    old, dots, new = ids.partition(b"..")
    if not dots:
        return line
    return b"index " + old[:7] + b".." + new[:7] + space + mode + b"\n"


def _canonical_header(line: bytes) -> tuple[bytes, str]:
    """``diff --git b/x b/x`` (a new file: both names from the new side) as ``diff --git a/x b/x``, and the path.

    With ``--no-prefix`` each name is the staged side's directory (``a`` or ``b``) plus the path, so both halves
    have the same length and differ only in that letter (after the opening quote of a quoted name)."""
    rest = line[len(b"diff --git ") :].rstrip(b"\n")
    half = (len(rest) - 1) // 2
    first, second = rest[:half], rest[half + 1 :]

    def side(name: bytes, letter: bytes) -> bytes:
        return name[:1] + letter + name[2:] if name.startswith(b'"') else letter + name[1:]

    first, second = side(first, b"a"), side(second, b"b")
    quoted = second.startswith(b'"')
    path = _unquote(second[1:-1] if quoted else second)[2:] if quoted else second[2:].decode("utf-8", "replace")
    return b"diff --git " + first + b" " + second + b"\n", path


def _unquote(text: bytes) -> str:
    """A name git quoted C-style (``core.quotePath``): backslash escapes and octal bytes."""
    out = bytearray()
    simple = {ord("n"): 10, ord("t"): 9, ord('"'): 34, ord("\\"): 92, ord("a"): 7, ord("b"): 8, ord("f"): 12}
    simple |= {ord("r"): 13, ord("v"): 11}
    i = 0
    while i < len(text):
        c = text[i]
        if c == 92 and i + 1 < len(text):
            nxt = text[i + 1]
            if 48 <= nxt <= 55 and i + 3 < len(text) + 1:
                out.append(int(text[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(simple.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return out.decode("utf-8", "replace")
