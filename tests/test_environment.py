"""Environment setup once per slot, committed as the base; per-task pins to their own commits; $WORKTRIAL_SUITE_DIR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from tests.fakes import share_with_sandbox

CLEAN = 'test -z "$(git status --porcelain --untracked-files=all)"'


def _eval(cli: Any, repo: Path, suite: Path, *extra: str) -> Any:
    return cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", *extra], cwd=repo)


@pytest.mark.slow
def test_setup_runs_once_per_slot_and_is_invisible_to_the_agent(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    share_with_sandbox(shared)  # setup counts its runs where the test can read them
    counter = shared / "setups.txt"
    environment = {
        "setup": [
            {"sh": f"echo x >> {counter}"},
            {"sh": "mkdir -p .venv/bin && echo tool > .venv/bin/tool && echo built > build.log && echo b > built.txt"},
        ],
        "timeout_secs": 60,
    }
    # The oracle's solution only succeeds when the agent sees a clean tree that already holds the setup's files.
    solution = [{"sh": f"{CLEAN} && test -f .venv/bin/tool && test -f build.log && echo done > done.txt"}]
    tasks = [task(f"t{i}", solution=solution) for i in range(3)]
    suite = write_suite(tasks, attempts=2, environment=environment)
    result = _eval(cli, repo, suite, "--jobs", "2")
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["report"]["overall"]["passed_runs"] == 6, envelope["report"]["tasks"]
    setups = len(counter.read_text().splitlines())
    assert 1 <= setups <= 2, f"environment setup ran {setups} times for 6 attempts on 2 jobs"
    # Kept with the run's records, one log per setup, with the commands and their output.
    logs = sorted((repo / ".worktrial" / "runs" / envelope["run"]["id"] / "environment").glob("*.log"))
    assert len(logs) == setups and "$ sh -c" in logs[0].read_text()
    assert git(repo, "status", "--porcelain") == ""  # nothing leaked into the user's repository


def test_without_slots_every_attempt_gets_the_setup_committed(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    environment = {"setup": [{"sh": "echo b > built.txt && echo l > x.log"}]}
    solution = [{"sh": f"{CLEAN} && test -f x.log && echo done > done.txt"}]
    suite = write_suite([task("t1", solution=solution)], attempts=2, environment=environment)
    result = _eval(cli, repo, suite, "--keep-worktrees")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 2


def test_setup_failure_stops_the_run_with_its_output(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    environment = {"setup": [{"sh": "echo preparing; echo pip-exploded-here >&2; exit 3"}], "timeout_secs": 30}
    suite = write_suite([task("t1"), task("t2")], attempts=3, environment=environment)
    result = _eval(cli, repo, suite, "--jobs", "1")
    assert result.exit_code == 2, result.output
    assert "environment setup failed at step 1" in result.stderr
    assert "pip-exploded-here" in result.stderr
    assert "Traceback" not in result.output


def test_setup_timeout_is_its_own(cli, repo: Path, write_suite) -> None:
    environment = {"setup": [{"sh": "sleep 30"}], "timeout_secs": 1}
    suite = write_suite([task("t1", verify_timeout_secs=300)], environment=environment)
    result = _eval(cli, repo, suite)
    assert result.exit_code == 2
    assert "timed out after 1s" in result.stderr


@pytest.mark.slow
def test_task_environment_overrides_the_suite_one(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    suite_env = {"setup": [{"sh": "echo suite > which.txt"}]}
    task_env = {"setup": [{"sh": "echo task > which.txt"}]}
    tasks = [
        task("plain", verify_commands=[{"sh": "grep -qx suite which.txt"}]),
        task("own", environment=task_env, verify_commands=[{"sh": "grep -qx task which.txt"}]),
    ]
    suite = write_suite(tasks, attempts=2, environment=suite_env)
    result = _eval(cli, repo, suite, "--jobs", "2")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 4


@pytest.mark.slow
def test_tasks_pinned_to_their_own_commits_in_one_run(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    (repo / "version.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "version.txt").write_text("two\n")
    git(repo, "commit", "-qam", "v2")
    second = git(repo, "rev-parse", "HEAD")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "lib.txt").write_text("other repo\n")
    git(other, "add", ".")
    git(other, "commit", "-q", "-m", "other")
    third = git(other, "rev-parse", "HEAD")
    tasks = [
        task("at-v1", workspace={"ref": "v1"}, verify_commands=[{"sh": "grep -qx one version.txt"}]),
        task("at-head", verify_commands=[{"sh": "grep -qx two version.txt"}]),
        task("other-repo", workspace={"repo": str(other)}, verify_commands=[{"sh": "test -f lib.txt"}]),
    ]
    suite = write_suite(tasks, attempts=2)
    result = _eval(cli, repo, suite, "--jobs", "2")
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["report"]["overall"]["passed_runs"] == 6, envelope["report"]["tasks"]
    assert envelope["run"]["task_base_commits"] == {"at-v1": first, "at-head": second, "other-repo": third}


def test_a_bad_task_ref_is_one_clear_error(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t1", workspace={"ref": "no-such-tag"})])
    result = _eval(cli, repo, suite)
    assert result.exit_code == 2
    assert "task t1:" in result.stderr and "no-such-tag" in result.stderr


def test_suite_dir_reaches_setup_and_verify_but_not_the_agent(cli, repo: Path, tmp_path: Path) -> None:
    suite_dir = tmp_path / "bundle"
    (suite_dir / "hidden").mkdir(parents=True)
    (suite_dir / "hidden" / "check.sh").write_text('test "$(cat answer.txt)" = 42\n')
    (suite_dir / "undeclared.txt").write_text("not part of the suite\n")
    data = {
        "id": "s",
        "files": ["hidden/*"],
        "environment": {"setup": [{"sh": 'cp "$WORKTRIAL_SUITE_DIR/hidden/check.sh" check.sh'}]},
        "tasks": [
            task(
                "t1",
                # The oracle may apply shipped files; the verifier reads the declared file, not the undeclared one.
                solution=[{"sh": 'test -d "$WORKTRIAL_SUITE_DIR/hidden" && echo 42 > answer.txt'}],
                verify_commands=[
                    {"sh": 'sh "$WORKTRIAL_SUITE_DIR/hidden/check.sh"'},
                    {"sh": 'test ! -e "$WORKTRIAL_SUITE_DIR/undeclared.txt"'},
                    {"sh": 'test "$(stat -c %a "$WORKTRIAL_SUITE_DIR/hidden/check.sh")" = 444'},
                    "test -f check.sh",
                ],
            )
        ],
    }
    suite = suite_dir / "suite.json"
    suite.write_text(json.dumps(data))
    result = _eval(cli, repo, suite)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 1, result.stdout


def test_an_agent_under_test_is_not_told_the_suite_dir(cli, repo: Path, tmp_path: Path) -> None:
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "answer.txt").write_text("42\n")
    data = {"id": "s", "files": ["hidden/*"], "tasks": [task("t1", verify_commands=["test -f answer.txt"])]}
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(data))
    peek = 'test -z "$WORKTRIAL_SUITE_DIR" && touch answer.txt'
    result = cli(["eval", "--suite", str(suite), "--agent-cmd", peek, "--trust", "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 1


def test_a_suite_committed_in_the_repository_is_removed_from_the_agents_base(cli, repo: Path) -> None:
    evals = repo / "evals"
    (evals / "hidden").mkdir(parents=True)
    (evals / "hidden" / "answer.txt").write_text("42\n")
    solution = [{"sh": f'test ! -e evals && {CLEAN} && cp "$WORKTRIAL_SUITE_DIR/hidden/answer.txt" .'}]
    data = {
        "id": "s",
        "files": ["hidden/*"],
        "tasks": [task("t1", solution=solution, verify_commands=[{"sh": "grep -qx 42 answer.txt"}])],
    }
    (evals / "suite.json").write_text(json.dumps(data))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "suite")
    result = _eval(cli, repo, evals / "suite.json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 1, result.stdout


@pytest.mark.slow
def test_cache_key_reuses_a_setup_across_runs(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    share_with_sandbox(shared)  # setup counts its runs where the test can read them
    counter = shared / "setups.txt"
    setup = [
        {"sh": f"echo x >> {counter}"},
        {"sh": "mkdir -p .venv/lib && echo dep > .venv/lib/dep.txt && touch -d 2001-01-01 .venv/lib/dep.txt"},
        {"sh": "rm README.md"},
    ]
    # The agent sees the restored files, with their modification times, and the deletion, in a clean tree.
    check = 'test "$(stat -c %Y .venv/lib/dep.txt)" = "$(date -d 2001-01-01 +%s)" && test ! -e README.md'
    solution = [{"sh": f"{CLEAN} && {check} && echo done > done.txt"}]
    environment = {"setup": setup, "cache_key": "v1"}
    suite = write_suite([task("t1", solution=solution)], attempts=2, environment=environment)
    for _ in range(2):
        result = _eval(cli, repo, suite, "--jobs", "1")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 2, result.stdout
    assert len(counter.read_text().splitlines()) == 1  # the second run restored the first one's result
    changed = write_suite([task("t1", solution=solution)], attempts=1, environment={**environment, "cache_key": "v2"})
    assert _eval(cli, repo, changed).exit_code == 0
    assert len(counter.read_text().splitlines()) == 2  # a new cache_key is a miss
