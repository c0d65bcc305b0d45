"""Parallel runs, the run store, resume, retries of infrastructure errors, runs/report commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents_for_tests import FlakyInfraAgent
from tests.conftest import SuiteWriter, git, task

# Deterministic outcomes per task, completion order shuffled by random sleeps.
MIXED_AGENT = (
    "python3 -c 'import random, time; time.sleep(random.random() * 0.05)'; "
    'case "$WORKTRIAL_TASK_ID" in bad*) exit 1 ;; odd*) [ $((WORKTRIAL_ATTEMPT % 2)) = 1 ] && touch done.txt ;; '
    "*) touch done.txt ;; esac"
)


def mixed_suite(write_suite: SuiteWriter, attempts: int = 3) -> Path:
    tasks = [task("good-a"), task("bad-b"), task("odd-c"), task("good-d", category="regression"), task("odd-e")]
    return write_suite(tasks, attempts=attempts)


def comparable(envelope: dict[str, Any]) -> dict[str, Any]:
    """The report without what legitimately differs between runs: timings and run-specific paths."""
    report: dict[str, Any] = json.loads(json.dumps(envelope["report"]))
    for key in ("setup_secs", "mean_setup_secs_per_attempt"):
        report.pop(key, None)
    for t in report["tasks"]:
        for a in t["attempts"]:
            for key in ("duration_secs", "setup_secs", "agent_secs", "verify_secs", "trace"):
                a.pop(key)
    return report


def eval_json(cli, repo: Path, suite: Path, *extra: str, exit_code: int = 0) -> dict[str, Any]:
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *extra], cwd=repo)
    assert result.exit_code == exit_code, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


@pytest.mark.slow
def test_report_is_identical_whatever_the_jobs(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite)
    one = eval_json(cli, repo, suite, "--agent-cmd", MIXED_AGENT, "--jobs", "1")
    four = eval_json(cli, repo, suite, "--agent-cmd", MIXED_AGENT, "--jobs", "4")
    assert one["run"]["jobs"] == 1 and four["run"]["jobs"] == 4
    assert comparable(one) == comparable(four)
    assert [t["passed_runs"] for t in one["report"]["tasks"]] == [3, 0, 2, 3, 2]


@pytest.mark.slow
def test_run_store_holds_every_attempt(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite, attempts=2)
    envelope = eval_json(cli, repo, suite, "--agent-cmd", MIXED_AGENT)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 10
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["suite_sha256"] == envelope["suite_sha256"] and meta["config"]["agent"] == "command"
    assert meta["base_commit"] == git(repo, "rev-parse", "HEAD")
    assert json.loads((run_dir / "envelope.json").read_text()) == envelope


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_uninterrupted_result(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    suite = mixed_suite(write_suite, attempts=3)
    slow_agent = "sleep 0.3; " + MIXED_AGENT
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "TMPDIR": str(tmp_path)}
    harness = subprocess.Popen(
        [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd", slow_agent, "--jobs", "2",
         "-q"],
        cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    runs = repo / ".worktrial" / "runs"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(_lines(p) >= 4 for p in runs.glob("*/attempts.jsonl")):
            time.sleep(0.02)
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    (run_dir,) = list(runs.iterdir())
    done_before = _lines(run_dir / "attempts.jsonl")
    assert 4 <= done_before < 15
    meta = json.loads((run_dir / "run.json").read_text())
    assert Path(meta["work_root"]).exists()  # the crash left its worktrees behind ...

    result = cli(["resume", run_dir.name, "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert f"({done_before} already done)" in result.stderr
    resumed = json.loads(result.stdout)
    assert not Path(meta["work_root"]).exists()  # ... and resume removed them
    assert resumed["run"]["complete"] is True and resumed["run"]["id"] == run_dir.name
    keys = [(a["task_id"], a["attempt"]) for t in resumed["report"]["tasks"] for a in t["attempts"]]
    assert len(keys) == 15 and len(set(keys)) == 15
    assert _lines(run_dir / "attempts.jsonl") == 15
    uninterrupted = eval_json(cli, repo, suite, "--agent-cmd", slow_agent)
    assert comparable(resumed) == comparable(uninterrupted)


@pytest.mark.slow
def test_resume_refuses_changes(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite, attempts=1)
    run_id = eval_json(cli, repo, suite, "--agent", "oracle")["run"]["id"]
    different = cli(
        ["eval", "--suite", str(suite), "--resume", run_id, "--agent", "nop", "--model", "x/y", "--attempts", "2"],
        cwd=repo,
    )
    assert different.exit_code == 2
    assert f"cannot resume run {run_id}; it differs from the stored run:" in different.stderr
    for needle in (
        "--agent: stored oracle, given nop",
        "--model: stored none, given x/y",
        "--attempts: stored 1, given 2",
    ):
        assert needle in different.stderr
    suite.write_text(suite.read_text().replace("Do good-a", "Do good-a now"))
    (repo / "new.txt").write_text("x")
    git(repo, "add", "new.txt")
    git(repo, "commit", "-qm", "moved on")
    changed = cli(["resume", run_id], cwd=repo)
    assert changed.exit_code == 2
    assert "suite digest: stored" in changed.stderr and "base commit: stored" in changed.stderr
    assert "Traceback" not in changed.output
    unknown = cli(["resume", "no-such-run"], cwd=repo)
    assert unknown.exit_code == 2 and "no run 'no-such-run'" in unknown.stderr


@pytest.mark.slow
def test_resume_of_a_complete_run_runs_nothing(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite, attempts=1)
    first = eval_json(cli, repo, suite, "--agent-cmd", MIXED_AGENT)
    again = cli(["resume", first["run"]["id"], "--format", "json"], cwd=repo)
    assert again.exit_code == 0 and "0 attempts to run (5 already done)" in again.stderr
    assert comparable(json.loads(again.stdout)) == comparable(first)


@pytest.mark.slow
def test_retry_errors_only_retries_infrastructure(cli, repo: Path, write_suite) -> None:
    FlakyInfraAgent.calls.clear()
    tasks = [task("infra"), task("always-infra"), task("fails"), task("slow", timeout_secs=1), task("crashes")]
    envelope = eval_json(
        cli,
        repo,
        write_suite(tasks, attempts=1),
        "--agent",
        "tests.agents_for_tests:FlakyInfraAgent",
        "--retry-errors",
        "2",
        "--jobs",
        "2",
    )
    by_task = {t["task_id"]: t["attempts"][0] for t in envelope["report"]["tasks"]}
    assert by_task["infra"]["outcome"] == "pass" and by_task["infra"]["retries"] == 2
    assert by_task["infra"]["retry_reasons"] == ["provider answered 503"] * 2
    assert by_task["always-infra"]["outcome"] == "error" and by_task["always-infra"]["retries"] == 2
    assert by_task["fails"]["outcome"] == "fail" and by_task["fails"]["retries"] == 0
    assert by_task["slow"]["outcome"] == "timeout" and by_task["slow"]["retries"] == 0
    # A crash of the adapter on what the agent wrote is the agent's: recorded, never re-rolled.
    assert by_task["crashes"]["outcome"] == "error" and by_task["crashes"]["error_category"] == "crashed"
    assert by_task["crashes"]["retries"] == 0
    assert FlakyInfraAgent.calls == {
        ("infra", 1): 3,
        ("always-infra", 1): 3,
        ("fails", 1): 1,
        ("slow", 1): 1,
        ("crashes", 1): 1,
    }
    # The retried share is in the envelope, with the headline as first tries alone would have made it.
    report = envelope["report"]
    assert report["retried_attempts"] == 2
    assert report["overall"]["pass_at_k"] == 1 / 5 and report["first_try"]["pass_at_k"] == 0.0


def test_without_retry_errors_infrastructure_errors_stand(cli, repo: Path, write_suite) -> None:
    FlakyInfraAgent.calls.clear()
    suite = write_suite([task("infra")], attempts=1)
    # Its only attempt errs, so the run measured nothing: exit 1, with the report still printed.
    envelope = eval_json(cli, repo, suite, "--agent", "tests.agents_for_tests:FlakyInfraAgent", exit_code=1)
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "error" and attempt["error_category"] == "provider_server" and attempt["retries"] == 0


@pytest.mark.slow
def test_runs_and_report_commands(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite, attempts=2)
    envelope = eval_json(cli, repo, suite, "--agent-cmd", MIXED_AGENT, "--model", "acme/m1")
    run_id = envelope["run"]["id"]
    listing = cli(["runs"], cwd=repo)
    assert listing.exit_code == 0
    row = next(line for line in listing.stdout.splitlines() if line.startswith(run_id))
    assert "command / acme/m1" in row and "10/10" in row and "0.600" in row  # pass@1 = (1+0+.5+1+.5)/5
    again = cli(["report", run_id, "--format", "json"], cwd=repo)
    assert again.exit_code == 0 and json.loads(again.stdout) == envelope
    markdown = cli(["report", run_id], cwd=repo)
    assert markdown.exit_code == 0 and f"run `{run_id}`" in markdown.stdout
    # A run that never wrote its envelope (a crash) is rebuilt from its attempt records.
    (repo / ".worktrial" / "runs" / run_id / "envelope.json").unlink()
    rebuilt = json.loads(cli(["report", run_id, "--format", "json"], cwd=repo).stdout)
    assert comparable(rebuilt) == comparable(envelope) and rebuilt["run"]["complete"] is True


@pytest.mark.slow
def test_credentials_in_a_base_url_are_never_stored(cli, repo: Path, write_suite) -> None:
    suite = mixed_suite(write_suite, attempts=1)
    url = "http://user:s3cret@m.invalid:9/v1?key=abc123"
    envelope = eval_json(cli, repo, suite, "--agent-cmd", "touch done.txt", "--base-url", url)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    stored = "".join(p.read_text() for p in run_dir.rglob("*") if p.is_file())  # artifacts included
    assert "s3cret" not in stored and "abc123" not in stored
    assert json.loads((run_dir / "run.json").read_text())["config"]["base_url"] == "http://m.invalid:9/v1"
    refused = cli(["resume", envelope["run"]["id"]], cwd=repo)
    assert refused.exit_code == 2 and "pass --base-url http://m.invalid:9/v1 with them again" in refused.stderr
    other = cli(["resume", envelope["run"]["id"], "--base-url", "http://m.invalid:8/v1"], cwd=repo)
    assert (
        other.exit_code == 2 and "--base-url: stored http://m.invalid:9/v1, given http://m.invalid:8/v1" in other.stderr
    )
    again = cli(["resume", envelope["run"]["id"], "--base-url", url], cwd=repo)
    assert again.exit_code == 0, again.output
