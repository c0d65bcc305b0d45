"""A workspace whose path has a newline, a tab, a double quote or a backslash works like any other: git's
alternates file is one path a line, so such a path is written C-quoted, the way git reads it back. Real git, the
real CLI, the bundled suite kept inside the repository (so the prepared base's own object store is borrowed too),
with the sandbox on and off."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from worktrial.isolation.alternates import quote_line, read_alternates, unquote_line, write_alternates

ROOT = Path(__file__).resolve().parents[1]
AWKWARD = ["line\nbreak", "tab\there", 'quote"d', "back\\slash", "\x1b[2Jesc", '"leading quote', "ünïcode"]


@pytest.mark.parametrize("name", AWKWARD, ids=["newline", "tab", "quote", "backslash", "escape", "lead", "utf8"])
def test_git_reads_back_every_alternates_path_it_is_given(tmp_path: Path, name: str) -> None:
    source = tmp_path / name / "source"
    source.mkdir(parents=True)
    git(source, "init", "-q")
    blob = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"], cwd=source, input=b"borrowed\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    borrower = tmp_path / "borrower"
    subprocess.run(["git", "init", "-q", "--bare", str(borrower)], check=True)
    write_alternates(borrower, [source / ".git" / "objects"])
    assert read_alternates(borrower) == [source / ".git" / "objects"]
    assert unquote_line(quote_line(source)) == source
    shown = subprocess.run(["git", f"--git-dir={borrower}", "cat-file", "-p", blob], capture_output=True)
    assert shown.returncode == 0, shown.stderr  # git itself found the object through the quoted line
    assert shown.stdout == b"borrowed\n"


def test_a_plain_path_is_written_as_is() -> None:
    assert quote_line(Path("/srv/repo/.git/objects")) == b"/srv/repo/.git/objects"


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_workspace_path_with_a_newline_runs_every_attempt(cli: Any, tmp_path: Path, sandbox: str) -> None:
    if sandbox == "on" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make sandbox)")
    repo = tmp_path / 'my\nrepo "x" \\ y'
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "suites").mkdir()
    shutil.copy(ROOT / "suites/smoke-workspace-basics.json", repo / "suites")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "suite")
    args = ["eval", "--suite", "suites/smoke-workspace-basics.json", "--agent", "oracle", "--trust", "--attempts", "2"]
    result = cli([*args, "--format", "json", "-q", "--sandbox", sandbox], cwd=repo)
    assert result.exit_code == 0, result.output
    tasks = json.loads(result.stdout)["report"]["tasks"]
    outcomes = {t["task_id"]: [a["outcome"] for a in t["attempts"]] for t in tasks}
    assert len(outcomes) == 5 and all(o == ["pass", "pass"] for o in outcomes.values()), outcomes
