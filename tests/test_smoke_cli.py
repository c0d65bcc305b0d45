from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import task

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_oracle_passes_bundled_suite(cli, repo: Path) -> None:
    result = cli(
        [
            "eval",
            "--suite",
            str(ROOT / "suites/smoke-workspace-basics.json"),
            "--agent",
            "oracle",
            "--trust",
            "--attempts",
            "1",
            "--format",
            "json",
            "-q",
        ],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["report"]["overall"]["passed_runs"] == 5
    assert envelope["report"]["overall"]["pass_at_k"] == 1.0


def test_nop_fails_every_bundled_task(cli, repo: Path) -> None:
    result = cli(
        [
            "eval",
            "--suite",
            str(ROOT / "suites/smoke-workspace-basics.json"),
            "--agent",
            "nop",
            "--trust",
            "--attempts",
            "1",
            "--format",
            "json",
            "-q",
        ],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    outcomes = {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}
    assert set(outcomes.values()) == {"fail"}, outcomes


def test_minimal_suite_runs(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("a")], attempts=2)
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert "| a | capability | 2/2 |" in result.stdout


@pytest.mark.sandbox
def test_oracle_passes_bundled_suite_in_the_sandbox_with_no_identity_but_the_users_own(
    cli, repo: Path, tmp_path: Path, monkeypatch
) -> None:
    """The user's git identity lives in ~/.gitconfig, which the sandbox's fresh HOME hides: the agent's commit still
    works (the bundled git-commit task), and carries the private repository's identity, never the user's."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Real User\n\temail = real.user@example.com\n")
    monkeypatch.setenv("HOME", str(home))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    args = ["eval", "--suite", str(ROOT / "suites/smoke-workspace-basics.json"), "--agent", "oracle", "--trust"]
    args += ["--attempts", "1", "--format", "json", "-q", "--sandbox", "on", "--keep-worktrees"]
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    outcomes = {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}
    assert set(outcomes.values()) == {"pass"}, outcomes
    kept = next(t for t in envelope["report"]["tasks"] if t["task_id"] == "git-commit")["attempts"][0]["worktree"]
    author = subprocess.run(["git", "log", "-1", "--format=%an <%ae>"], cwd=kept, capture_output=True, text=True)
    assert author.stdout.strip() == "worktrial agent <agent@worktrial.invalid>"


@pytest.mark.sandbox
@pytest.mark.slow
def test_oracle_passes_bundled_suite_kept_inside_the_repository_in_the_sandbox(cli, repo: Path) -> None:
    """``make demo``: the suite lives in the repository it evaluates, so the slot hides it in a prepared base commit
    whose objects sit next to the private git dir. The sandbox must show them, or HEAD cannot be read and the
    git-commit task's ``git commit`` fails."""
    (repo / "suites").mkdir()
    shutil.copy(ROOT / "suites/smoke-workspace-basics.json", repo / "suites")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "suite"], cwd=repo, check=True)
    args = ["eval", "--suite", "suites/smoke-workspace-basics.json", "--agent", "oracle", "--trust", "--attempts", "2"]
    result = cli([*args, "--format", "json", "-q", "--sandbox", "on"], cwd=repo)
    assert result.exit_code == 0, result.output
    tasks = json.loads(result.stdout)["report"]["tasks"]
    outcomes = {t["task_id"]: [a["outcome"] for a in t["attempts"]] for t in tasks}
    assert all(o == ["pass", "pass"] for o in outcomes.values()), outcomes
