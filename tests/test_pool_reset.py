"""The pooled reset's shortcut: an attempt that changed nothing costs one walk, not git's reset and clean.

The shortcut is only safe if every way of changing a tree is seen. Each edit below is one an agent can make with
plain file operations; after it, ``untouched()`` must say so (the attempt's patch is then computed by git), and the
next ``acquire()`` must give back exactly the pristine checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from worktrial.isolation import copying_slot, ctime, overlay, safefs, workspace
from worktrial.isolation.copying_slot import CopyingSlot
from worktrial.isolation.overlay_slot import OverlaySlot
from worktrial.isolation.workspace import open_source


def _tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``root`` but ``.git``: kind, permission bits and content (or link target)."""
    seen: dict[str, tuple[str, int, str]] = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (top == str(root) and d == ".git")]
        for name in [*dirs, *files]:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            if rel == ".git":
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            else:
                seen[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return seen


def _same_second_edit(w: Path) -> None:
    """Same size, mtime put back: invisible to git's stat check, visible to the inode's ctime."""
    readme = w / "README.md"
    st = readme.stat()
    data = readme.read_bytes()
    readme.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    os.utime(readme, ns=(st.st_atime_ns, st.st_mtime_ns))


def _hard_link(w: Path) -> None:
    os.link(w / "src" / "lib" / "util.py", w / "src" / "copy.py")


def _delete_tracked(w: Path) -> None:
    (w / "src" / "lib" / "util.py").unlink()


def _new_file_in_new_dir(w: Path) -> None:
    (w / "new" / "deep").mkdir(parents=True)
    (w / "new" / "deep" / "x.txt").touch()


def _empty_new_dir(w: Path) -> None:
    (w / "empty").mkdir()


def _rename_dir(w: Path) -> None:
    (w / "src" / "lib").rename(w / "src" / "lib2")


def _chmod_file(w: Path) -> None:
    (w / "README.md").chmod(0o600)


def _chmod_dir(w: Path) -> None:
    (w / "src").chmod(0o700)


def _file_replaced_by_symlink(w: Path) -> None:
    (w / "README.md").unlink()
    (w / "README.md").symlink_to("/etc/hostname")


def _dir_moved_into_place(w: Path) -> None:
    """``rm -r src/lib && mv docs/lib src/lib``: the files inside keep their old change times, so only the
    directory's new inode says that ``src/lib/util.py`` now holds what ``docs/lib/util.py`` held."""
    for f in (w / "src" / "lib").iterdir():
        f.unlink()
    (w / "src" / "lib").rmdir()
    os.rename(w / "docs" / "lib", w / "src" / "lib")


def _dir_moved_out(w: Path) -> None:
    os.rename(w / "src" / "lib", w / "lib")


def _ignored_file(w: Path) -> None:
    (w / "build.log").write_text("ignored by .gitignore\n")


EDITS: dict[str, Callable[[Path], None]] = {
    "same-size-edit-mtime-restored": _same_second_edit,
    "delete-tracked-file": _delete_tracked,
    "new-file-in-new-dir": _new_file_in_new_dir,
    "empty-new-dir": _empty_new_dir,
    "rename-dir": _rename_dir,
    "chmod-file": _chmod_file,
    "chmod-dir": _chmod_dir,
    "file-replaced-by-symlink": _file_replaced_by_symlink,
    "hard-link": _hard_link,
    "ignored-file": _ignored_file,
    "dir-moved-into-place": _dir_moved_into_place,
    "dir-moved-out": _dir_moved_out,
}


@pytest.fixture
def slot(repo: Path, tmp_path: Path) -> Iterator[CopyingSlot]:
    (repo / "src" / "lib").mkdir(parents=True)
    (repo / "src" / "lib" / "util.py").write_text("def f():\n    return 1\n")
    (repo / "docs" / "lib").mkdir(parents=True)
    (repo / "docs" / "lib" / "util.py").write_text("def f():\n    return 2\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tree")
    work = tmp_path / "work"
    work.mkdir()
    made = CopyingSlot(open_source(repo), git(repo, "rev-parse", "HEAD"), work / "slot-0")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The git subcommands the slot runs (``reset``, ``clean``), in order."""
    calls: list[str] = []
    real = workspace.git

    def counting(args: list[str], cwd: Path, **kwargs: Any) -> object:
        calls.extend(a for a in args if a in ("reset", "clean"))
        return real(args, cwd, **kwargs)

    monkeypatch.setattr(copying_slot, "git", counting)
    return calls


def test_an_untouched_attempt_resets_without_git(slot: CopyingSlot, git_calls: list[str]) -> None:
    ws = slot.acquire()
    pristine = _tree(ws.worktree)
    assert slot.untouched()
    (ws.worktree / "README.md").read_bytes()  # reading changes nothing that counts
    assert slot.untouched()
    ws = slot.acquire()
    assert git_calls == []
    assert _tree(ws.worktree) == pristine
    (ws.worktree / "README.md").write_text("changed\n")
    assert not slot.untouched()
    ws = slot.acquire()
    assert git_calls == []  # no whole-tree git: only the changed entries are put back, from the base's objects
    assert _tree(ws.worktree) == pristine and slot.untouched()
    assert slot.builds == 1


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_every_kind_of_change_is_seen_and_undone(slot: CopyingSlot, git_calls: list[str], edit: str) -> None:
    ws = slot.acquire()
    pristine = _tree(ws.worktree)
    EDITS[edit](ws.worktree)
    assert not slot.untouched(), f"{edit} went unseen"
    ws = slot.acquire()
    assert git_calls == []  # no whole-tree git: only the changed entries are put back, from the base's objects
    assert _tree(ws.worktree) == pristine
    assert slot.untouched()
    assert slot.builds == 1


def test_the_python_walk_sees_what_find_sees(slot: CopyingSlot, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where find(1) is missing or is not GNU find, the walk in Python gives the same answer."""
    ws = slot.acquire()
    fd = os.open(ws.worktree, os.O_RDONLY | os.O_DIRECTORY)
    mark = ctime.fs_now_ns(fd)
    (ws.worktree / "src" / "lib" / "new.txt").write_text("x\n")
    (ws.worktree / "README.md").unlink()
    try:
        by_find = ctime.changed_since(fd, ws.worktree, mark)
        monkeypatch.setenv("PATH", "/nonexistent")
        by_python = ctime.changed_since(fd, ws.worktree, mark)
    finally:
        os.close(fd)
    assert sorted(by_find.files) == sorted(by_python.files) == ["src/lib/new.txt"]
    assert sorted(by_find.dirs) == sorted(by_python.dirs) == [".", "src/lib"]


def test_the_index_is_kept_while_nothing_changed_it_and_written_again_once_something_did(
    slot: CopyingSlot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The private index (megabytes in a large repository) is not rewritten by a reset while it is, to the inode and
    its ctime, the one the harness left; an agent that staged something gets the harness's index back."""
    ws = slot.acquire()
    snap = slot.snapshot
    assert snap is not None
    index = ws.git_dir / snap.index_rel
    writes: list[str] = []
    real = safefs.write_at

    def counting(root_fd: int, rel: str, data: bytes, mode: int = 0o644) -> None:
        writes.append(rel)
        real(root_fd, rel, data, mode)

    monkeypatch.setattr(safefs, "write_at", counting)
    ws = slot.acquire()  # the first reset writes it
    assert snap.index_rel in writes
    writes.clear()
    ws = slot.acquire()
    assert snap.index_rel not in writes and index.read_bytes() == snap.index
    (ws.worktree / "README.md").write_text("staged\n")
    git(ws.worktree, "add", "README.md")
    assert index.read_bytes() != snap.index
    ws = slot.acquire()
    assert snap.index_rel in writes and index.read_bytes() == snap.index
    assert git(ws.worktree, "diff", "--cached", "--name-only") == ""


def _in_room(ws: Any, code: str) -> str:
    """Run Python ``code`` (``w`` is the worktree) with the room's overlay mounted, as every program of an attempt is
    started; its stdout."""
    assert ws.layers is not None
    root = Path(__file__).resolve().parent.parent
    program = "import json, sys\nfrom pathlib import Path\nfrom tests.test_pool_reset import EDITS, _tree\n"
    program += f"w = Path({str(ws.worktree)!r})\n"
    done = subprocess.run(
        [*ws.layers.prefix(), sys.executable, "-c", program + code],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}:{root / 'src'}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(overlay.unavailable() is not None, reason="overlays cannot be mounted here")
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_overlay_room_sees_every_change_and_its_reset_leaves_the_pristine_checkout_as_it_was(
    repo: Path, tmp_path: Path, edit: str
) -> None:
    (repo / "src" / "lib").mkdir(parents=True)
    (repo / "src" / "lib" / "util.py").write_text("def f():\n    return 1\n")
    (repo / "docs" / "lib").mkdir(parents=True)
    (repo / "docs" / "lib" / "util.py").write_text("def f():\n    return 2\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tree")
    (tmp_path / "work").mkdir()
    slot = OverlaySlot(open_source(repo), git(repo, "rev-parse", "HEAD"), tmp_path / "work" / "slot-0")
    try:
        ws = slot.acquire()
        assert slot.pristine is not None and ws.worktree != slot.pristine
        before = _tree(slot.pristine)
        merged = json.loads(_in_room(ws, "print(json.dumps(_tree(w)))"))
        assert merged == {k: list(v) for k, v in before.items()}
        assert slot.untouched()
        _in_room(ws, f"EDITS[{edit!r}](w)")
        assert not slot.untouched(), f"{edit} went unseen"
        assert _tree(slot.pristine) == before, "the agent's change reached the pristine checkout"
        ws = slot.acquire()
        assert slot.untouched() and slot.builds == 1
        assert json.loads(_in_room(ws, "print(json.dumps(_tree(w)))")) == {k: list(v) for k, v in before.items()}
    finally:
        slot.close()
