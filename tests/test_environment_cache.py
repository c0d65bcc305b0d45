"""The environment cache keys on what setup depends on, and a hit restores without writing the files to git again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from tests.fakes import share_with_sandbox

CLEAN = 'test -z "$(git status --porcelain --untracked-files=all)"'
VENV = 'mkdir -p .venv/lib && for i in $(seq 300); do echo "x = $i" > .venv/lib/mod$i.py; done'


def _eval(cli: Any, repo: Path, suite: Path, *extra: str) -> dict[str, Any]:
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json", *extra]
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    assert envelope["report"]["overall"]["passed_runs"] == envelope["report"]["overall"]["total_runs"], envelope
    return envelope


def _counter(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    share_with_sandbox(shared)  # setup counts its runs where the test can read them
    return shared / "setups.txt"


def _setups(counter: Path) -> int:
    return len(counter.read_text().splitlines())


def _commit(repo: Path, rel: str, text: str) -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(text)
    git(repo, "add", rel)
    git(repo, "commit", "-qm", f"edit {rel}")


@pytest.mark.slow
def test_a_commit_that_changes_nothing_setup_reads_keeps_the_cache(cli, repo: Path, tmp_path: Path) -> None:
    counter = _counter(tmp_path)
    _commit(repo, "requirements.txt", "dep==1\n")
    environment = {
        "setup": [{"sh": f"echo x >> {counter}"}, {"sh": "cp requirements.txt .installed"}],
        "cache_key": "v1",
    }
    solution = [{"sh": f"{CLEAN} && test ! -e evals && cp .installed done.txt"}]
    verify = [{"sh": 'test "$(cat done.txt)" = "$(cat requirements.txt)"'}]
    suite = {"id": "s", "environment": environment, "tasks": [task("t1", solution=solution, verify_commands=verify)]}
    path = repo / "evals" / "suite.json"
    _commit(repo, "evals/suite.json", json.dumps(suite))
    _eval(cli, repo, path)
    assert _setups(counter) == 1
    # A suite edit (in the directory hidden from the agent): the same environment.
    _commit(repo, "evals/suite.json", json.dumps({**suite, "name": "renamed"}))
    _eval(cli, repo, path)
    assert _setups(counter) == 1
    # Without cache_files every tracked file outside the suite's directory counts: a new setup.
    _commit(repo, "requirements.txt", "dep==2\n")
    _eval(cli, repo, path)
    assert _setups(counter) == 2


@pytest.mark.slow
def test_declared_cache_files_are_what_counts(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    counter = _counter(tmp_path)
    _commit(repo, "requirements.txt", "dep==1\n")
    _commit(repo, "calc.py", "def add(a, b):\n    return a + b\n")
    # Setup also plants a bug in a tracked file: an entry is only replayed where that file is what it was.
    setup = [{"sh": f"echo x >> {counter}"}, {"sh": "sed -i 's/a + b/a - b/' calc.py"}, {"sh": VENV}]
    environment = {"setup": setup, "cache_key": "v1", "cache_files": ["requirements.txt"]}
    solution = [{"sh": f"{CLEAN} && test -f .venv/lib/mod300.py && cp calc.py done.txt"}]
    verify = [{"sh": "grep -q 'a - b' done.txt && grep -q 'def add' done.txt"}]
    suite = write_suite([task("t1", solution=solution, verify_commands=verify)], environment=environment)
    _eval(cli, repo, suite)
    _commit(repo, "other.py", "x = 1\n")  # not declared: the cache holds
    _eval(cli, repo, suite)
    assert _setups(counter) == 1
    _commit(repo, "calc.py", "def add(a, b):\n    return a + b  # commented\n")  # what setup changed: setup again
    _eval(cli, repo, suite)
    assert _setups(counter) == 2
    _eval(cli, repo, suite)
    assert _setups(counter) == 2  # and the new entry replaced the stale one
    _commit(repo, "requirements.txt", "dep==2\n")
    _eval(cli, repo, suite)
    assert _setups(counter) == 3


@pytest.mark.slow
def test_a_cache_hit_writes_no_object_per_file_and_patches_stay_the_agents(cli, repo: Path, write_suite) -> None:
    """A restored venv of 300 files is committed as the base from the entry's pack: git only hashes the files, so
    the objects it writes are the few trees and the commit, not one per file. The patch is still the agent's."""
    environment = {"setup": [{"sh": VENV}], "cache_key": "v1"}
    solution = [{"sh": f"{CLEAN} && echo changed >> README.md"}]
    suite = write_suite([task("t1", solution=solution, verify_commands=["true"])], environment=environment)
    loose = []
    for _ in range(2):
        envelope = _eval(cli, repo, suite, "--keep-worktrees")
        attempt = envelope["report"]["tasks"][0]["attempts"][0]
        store = Path(attempt["worktree"]).parent / "env-objects"
        loose.append(sum(1 for d in store.iterdir() if len(d.name) == 2 for _ in d.iterdir()))
        run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
        stored = json.loads((run_dir / "attempts" / "t1" / "1" / "artifacts.json").read_text())
        assert stored["patch"]["files"] == ["README.md"]
    assert loose[0] > 300  # the first setup wrote every file's object
    assert loose[1] < 10, loose  # the hit: trees and the commit
    assert list((store / "pack").glob("pack-*.pack"))
