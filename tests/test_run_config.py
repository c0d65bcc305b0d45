"""A run is one frozen config: resume reloads it whole, refuses what would change the measurement, and records
the containment each session's attempts ran under."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task

pytestmark = pytest.mark.slow


def _suite(write_suite, attempts: int = 2) -> Path:
    path: Path = write_suite([task("a"), task("b"), task("c-other")], attempts=attempts)
    return path


def _eval(cli, repo: Path, suite: Path, *flags: str) -> dict[str, Any]:
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", *flags], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def _forget_last_attempt(repo: Path, run_id: str) -> None:
    """Make a finished run incomplete the way a crash does: its last record never reached the store."""
    path = repo / ".worktrial" / "runs" / run_id / "attempts.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--k", "1"], "--k: stored 2, given 1"),
        (["--attempts", "3"], "--attempts: stored 2, given 3"),
        (["--label", "other"], "--label: stored none, given other"),
        (["--no-artifacts"], "artifacts (--no-artifacts): stored yes, given no"),
        (["--task", "a"], "--task: stored none, given a"),
        (["--category", "regression"], "--category: stored none, given regression"),
        (["--limit", "1"], "--limit: stored none, given 1"),
        (["--max-turns", "3"], "--max-turns/--max-tokens/--temperature: stored none, given max_turns=3"),
        (["--pass-env", "MY_TOKEN"], "--pass-env: stored none, given MY_TOKEN"),
        (["--verify-always"], "--verify-always: stored no, given yes"),
        (["--sandbox", "on"], "--sandbox: stored off, given on"),
        (["--network", "host"], "--network: stored on, given host"),
        (["--max-procs", "64"], "--max-procs: stored none, given 64"),
        (["--agent", "nop"], "--agent: stored oracle, given nop"),
    ],
)
def test_resume_refuses_every_flag_that_changes_what_is_measured(
    cli, repo: Path, write_suite, flags: list[str], needle: str
) -> None:
    suite = _suite(write_suite)
    run_id = _eval(cli, repo, suite, "--sandbox", "off")["run"]["id"]
    _forget_last_attempt(repo, run_id)
    agent = [] if "--agent" in flags else ["--agent", "oracle"]
    refused = cli(["eval", "--suite", str(suite), "--resume", run_id, *agent, *flags], cwd=repo)
    assert refused.exit_code == 2, refused.output
    message = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(message) == 1, refused.stderr  # one line, naming the field
    assert f"cannot resume run {run_id}; it differs from the stored run: {needle}" in message[0]
    assert "--jobs" in message[0]  # and what may change
    assert len((repo / ".worktrial" / "runs" / run_id / "attempts.jsonl").read_text().splitlines()) == 5


def test_resume_accepts_execution_flags_and_flags_equal_to_the_stored_ones(cli, repo: Path, write_suite) -> None:
    suite = _suite(write_suite)
    run_id = _eval(cli, repo, suite, "--sandbox", "off", "--label", "mine", "--k", "1")["run"]["id"]
    _forget_last_attempt(repo, run_id)
    resumed = cli(
        [
            *("eval", "--suite", str(suite), "--resume", run_id, "--agent", "oracle", "--label", "mine", "--k", "1"),
            *("--jobs", "1", "--retry-errors", "2", "--format", "json"),
        ],
        cwd=repo,
    )
    assert resumed.exit_code == 0, resumed.output
    envelope = json.loads(resumed.stdout)
    assert envelope["run"]["complete"] is True and envelope["run"]["label"] == "mine"
    assert envelope["report"]["k"] == 1 and envelope["run"]["jobs"] == 1


def test_a_resumed_sandbox_off_run_stays_off_and_says_so(cli, repo: Path, write_suite) -> None:
    suite = _suite(write_suite)
    first = _eval(cli, repo, suite, "--sandbox", "off")
    assert first["run"]["sandbox"]["kind"] == "none"
    run_id = first["run"]["id"]
    _forget_last_attempt(repo, run_id)
    resumed = cli(["resume", run_id, "--format", "json"], cwd=repo)
    assert resumed.exit_code == 0, resumed.output
    envelope = json.loads(resumed.stdout)
    assert envelope["run"]["complete"] is True
    assert envelope["run"]["sandbox"]["kind"] == "none"  # not the default the resume would have chosen
    assert envelope["run"]["sandboxes"] is None  # one containment for every attempt
    stored = json.loads((repo / ".worktrial" / "runs" / run_id / "run.json").read_text())
    assert stored["config"]["sandbox"]["mode"] == "off" and stored["config"]["attempts"] == 2


def test_a_run_resumed_under_other_containment_says_it_is_mixed(
    cli, repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same frozen request (auto), another machine state: the resumed attempts ran unsandboxed, and the envelope,
    the markdown report and each attempt say so instead of publishing the first session's sandbox for all."""
    suite = _suite(write_suite)
    first = _eval(cli, repo, suite, "--network", "host")
    if first["run"]["sandbox"]["kind"] != "bubblewrap":
        pytest.skip("needs bubblewrap (make sandbox)")
    run_id = first["run"]["id"]
    _forget_last_attempt(repo, run_id)
    monkeypatch.setenv("WORKTRIAL_BWRAP", "/nonexistent/bwrap")
    resumed = cli(["resume", run_id, "--format", "json"], cwd=repo)
    assert resumed.exit_code == 0, resumed.output
    run = json.loads(resumed.stdout)["run"]
    assert [s["kind"] for s in run["sandboxes"]] == ["bubblewrap", "none"]
    assert run["sandbox"]["kind"] == "none"  # the weakest containment any attempt had
    attempts = [a for t in json.loads(resumed.stdout)["report"]["tasks"] for a in t["attempts"]]
    assert sorted(a["sandbox"] for a in attempts) == [0, 0, 0, 0, 0, 1]
    report = cli(["report", run_id, "--format", "markdown"], cwd=repo)
    assert "sandbox: mixed: 5 attempt(s) under bubblewrap" in report.stdout
    assert "1 attempt(s) under none" in report.stdout


def test_a_pinned_suite_run_outside_any_repository_is_listed_and_audits_from_anywhere(
    cli, repo: Path, write_suite, tmp_path: Path
) -> None:
    head = (repo / ".git" / "HEAD").read_text()  # the pinned repository is reached by URL, never as a workspace
    assert head
    suite = write_suite([task("t")], workspace={"repo": f"file://{repo}"})
    outside = tmp_path / "outside"
    outside.mkdir()
    published = tmp_path / "published" / "envelope.json"
    published.parent.mkdir()
    result = cli(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "--output", str(published)],
        cwd=outside,
    )
    assert result.exit_code == 0, result.output
    run_id = json.loads(published.read_text())["run"]["id"]
    listed = cli(["runs"], cwd=outside)
    assert run_id in listed.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    audit = cli(["audit", str(published), "--suite", str(suite)], cwd=elsewhere)
    assert audit.exit_code == 0, audit.output
    assert "1 trace files checked" in audit.output and "does not exist" not in audit.output
