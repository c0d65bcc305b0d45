"""The exact change an attempt keeps for regrading, and the task digests reuse compares (unit level)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.conftest import task
from worktrial.isolation.patch import PatchData, apply_change, change_result, holds_gitlink, staged_patch
from worktrial.model.bundle import BundleFile
from worktrial.model.suite import parse_suite
from worktrial.model.task_digest import classify, files_reach_agent, task_parts


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "a", tmp_path / "b"
    old.mkdir()
    (old / "text.txt").write_text("one\ntwo\n")
    (old / "gone.txt").write_text("bye\n")
    (old / "run.sh").write_text("#!/bin/sh\n")
    shutil.copytree(old, new, symlinks=True)
    (new / "text.txt").write_text("one\n2\n")
    (new / "gone.txt").unlink()
    os.chmod(new / "run.sh", 0o755)
    (new / "blob.bin").write_bytes(bytes(range(256)) * 4)
    os.symlink("text.txt", new / "link")
    return old, new


def _patch(tmp_path: Path, max_bytes: int = 1 << 20) -> PatchData:
    """The patch of the two staged trees ``a`` and ``b`` as a slot's change finds it."""
    found = staged_patch(tmp_path, max_bytes)
    assert found is not None
    return found


def test_the_exact_change_rebuilds_the_tree_and_the_shown_one_reads_as_git_prints_it(tmp_path: Path) -> None:
    old, new = _trees(tmp_path)
    patch = _patch(tmp_path)
    assert patch.exact is not None and b"GIT binary patch" in patch.exact
    shown = patch.diff.decode()
    assert "GIT binary patch" not in shown and "Binary files /dev/null and b/blob.bin differ" in shown
    assert all(len(line.split()[1]) == 16 for line in shown.splitlines() if line.startswith("index "))
    assert patch.total_bytes == len(patch.diff) and sorted(patch.files) == [
        "blob.bin",
        "gone.txt",
        "link",
        "run.sh",
        "text.txt",
    ]

    apply_change(old, patch.exact)  # the base tree becomes the agent's, byte for byte, mode and link included
    assert (old / "blob.bin").read_bytes() == (new / "blob.bin").read_bytes()
    assert os.readlink(old / "link") == "text.txt" and not (old / "gone.txt").exists()
    assert os.access(old / "run.sh", os.X_OK) and (old / "text.txt").read_text() == "one\n2\n"


def test_what_a_change_leaves_digests_alike_however_git_laid_it_out(tmp_path: Path) -> None:
    _trees(tmp_path)
    exact = _patch(tmp_path).exact
    assert exact is not None
    sections = exact.split(b"diff --git ")[1:]
    reordered = b"".join(b"diff --git " + s for s in reversed(sections))
    assert change_result(reordered) == change_result(exact)
    (tmp_path / "b" / "text.txt").write_text("one\n3\n")
    assert change_result(_patch(tmp_path).exact or b"") != change_result(exact)
    assert not holds_gitlink(exact)
    assert holds_gitlink(b"diff --git a/sub b/sub\nnew file mode 160000\nindex 0000..abcd\n")


def test_a_change_larger_than_kept_is_named_not_kept(tmp_path: Path, monkeypatch) -> None:
    _trees(tmp_path)
    monkeypatch.setattr("worktrial.isolation.patch.CHANGE_MAX_BYTES", 100)
    patch = _patch(tmp_path)
    assert patch.exact is None and "more than" in (patch.exact_missing or "")
    assert patch.diff  # people still read it


def test_which_half_of_a_task_changed_decides_reuse_regrade_or_run() -> None:
    def parts(**fields: object) -> dict[str, str]:
        suite = parse_suite({"id": "s", "tasks": [task("t", **fields)]})
        files = [BundleFile("hidden/test_x.py", "0" * 64, 1)]
        return task_parts(suite, suite.tasks[0], files, "tree", None)

    base = parts()
    assert classify(base, parts(), agent="command", files_to_agent=False) == "same"
    assert classify(base, parts(prompt="Do t, differently"), agent="command", files_to_agent=False) == "agent"
    assert classify(base, parts(setup_commands=["true"]), agent="command", files_to_agent=False) == "agent"
    assert classify(base, parts(verify_commands=["true"]), agent="command", files_to_agent=False) == "verifier"
    assert classify(base, parts(verify_timeout_secs=9), agent="command", files_to_agent=False) == "verifier"
    changed_solution = parts(solution=["echo other > done.txt"])
    assert classify(base, changed_solution, agent="command", files_to_agent=False) == "same"  # only the oracle's
    assert classify(base, changed_solution, agent="oracle", files_to_agent=True) == "agent"
    moved = {**base, "files": "other"}
    assert classify(base, moved, agent="command", files_to_agent=False) == "verifier"  # hidden tests changed
    assert classify(base, moved, agent="command", files_to_agent=True) == "agent"  # setup reads them
    assert classify(base, {**base, "base": "other"}, agent="command", files_to_agent=False) == "agent"
    suite = parse_suite({"id": "s", "tasks": [task("t"), task("u", setup_commands=["true"])]})
    assert [files_reach_agent(suite, t, "command") for t in suite.tasks] == [False, True]
