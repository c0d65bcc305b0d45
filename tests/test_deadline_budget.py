"""The agent knows its deadline, is told to stop before it is killed, and a run keeps to its budget."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task

pytestmark = pytest.mark.slow

SAVES_ON_TERM = (
    "trap 'echo saved > done.txt; exit 0' TERM; "
    "while :; do sleep 0.1; done"  # works until told to stop, then saves its work in the grace period
)
IGNORES_TERM = "trap '' TERM; while :; do sleep 0.1; done"


def _eval(cli, repo: Path, suite: Path, *flags: str) -> tuple[int, dict[str, Any], str]:
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", *flags], cwd=repo)
    envelope: dict[str, Any] = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, envelope, result.stderr


def _attempts(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for t in envelope["report"]["tasks"] for a in t["attempts"]]


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_sigterm_comes_before_the_kill_and_on_timeout_verify_records_the_solved_timeout(
    cli, repo: Path, write_suite, sandbox: str
) -> None:
    suite = write_suite([task("t", timeout_secs=1, solution=None)], on_timeout="verify")
    code, envelope, stderr = _eval(
        cli, repo, suite, "--agent-cmd", SAVES_ON_TERM, "--grace-secs", "20", "--sandbox", sandbox
    )
    assert code == 0, stderr
    (attempt,) = _attempts(envelope)
    assert attempt["outcome"] == "timeout"  # solved or not, a timeout never counts as a pass
    assert attempt["agent_ended"] == "sigterm"  # it saved its work within the grace and exited
    assert attempt["verified"] is True  # and the verifier saw that work
    assert envelope["report"]["timeouts_verified"] == 1 and envelope["report"]["overall"]["passed_runs"] == 0
    assert envelope["run"]["grace_secs"] == 20


def test_by_default_a_timeout_is_not_verified(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t", timeout_secs=1, solution=None)])
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", SAVES_ON_TERM, "--grace-secs", "20")
    assert code == 0, stderr
    (attempt,) = _attempts(envelope)
    assert attempt["outcome"] == "timeout" and attempt["verified"] is None and attempt["agent_ended"] == "sigterm"
    assert envelope["report"]["timeouts_verified"] == 0


def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t", timeout_secs=1, solution=None)], on_timeout="verify")
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", IGNORES_TERM, "--grace-secs", "1")
    assert code == 0, stderr
    (attempt,) = _attempts(envelope)
    assert attempt["outcome"] == "timeout" and attempt["agent_ended"] == "killed"
    assert attempt["verified"] is False  # it left nothing that passes
    assert attempt["agent_secs"] >= 2.0  # the full timeout and the full grace before SIGKILL, never less


def test_the_agent_reads_its_deadline(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    out = tmp_path / "deadline.txt"
    suite = write_suite([task("t", timeout_secs=300)])
    agent = f'echo "$WORKTRIAL_DEADLINE $WORKTRIAL_TIMEOUT_SECS $WORKTRIAL_GRACE_SECS" > {out}; echo done > done.txt'
    before = time.time()
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", agent, "--sandbox", "off", "--grace-secs", "7")
    after = time.time()
    assert code == 0, stderr
    deadline, timeout, grace = out.read_text().split()
    assert int(before) + 300 - 1 <= int(deadline) <= int(after) + 300
    assert (timeout, grace) == ("300", "7")
    assert _attempts(envelope)[0]["agent_ended"] == "exit"


def _paid(cost: float) -> str:
    """A command agent that solves the task and reports what it spent in its usage file."""
    return f'echo \'{{"cost_usd": {cost}, "input_tokens": 10, "output_tokens": 5}}\' > "$WORKTRIAL_USAGE_FILE"; ' + (
        "echo done > done.txt"
    )


def test_max_cost_stops_the_run_and_resume_continues_it_with_a_higher_budget(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(f"t{i}") for i in range(5)])
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", _paid(1.0), "--jobs", "1", "--max-cost", "2.5")
    assert code == 3, stderr
    assert "worktrial: stopped: the budget --max-cost $2.5 is reached" in stderr
    # $1 spent after the first, and a second likely brings it to $2 <= $2.5: it starts; a third would pass it.
    assert len(_attempts(envelope)) == 2
    budget = envelope["run"]["budget"]
    assert budget["stopped"] is True and budget["spent"] == 2.0 and budget["max_cost"] == 2.5
    run_id = envelope["run"]["id"]
    more = cli(["resume", run_id, "--max-cost", "10", "--format", "json"], cwd=repo)
    assert more.exit_code == 0, more.stderr
    resumed = json.loads(more.stdout)
    assert len(_attempts(resumed)) == 5 and resumed["run"]["complete"] is True
    assert resumed["run"]["budget"]["stopped"] is False and resumed["run"]["budget"]["spent"] == 5.0


def test_progress_shows_spend_against_the_budget(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t1"), task("t2")])
    result = cli(
        ["eval", "--suite", str(suite), "--trust", "--agent-cmd", _paid(0.25), "--max-cost", "9", "--jobs", "1"],
        cwd=repo,
    )
    assert result.exit_code == 0, result.stderr
    assert "spent $0.2500 of $9" in result.stderr and "spent $0.5000 of $9" in result.stderr
    assert "**Budget:** \\--max-cost \\$9.00; spent \\$0.5000" in result.stdout  # markdown-escaped


def test_an_attempt_without_a_cost_stops_a_budgeted_run_unless_allowed(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t1"), task("t2"), task("t3")])
    silent = "echo done > done.txt"
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", silent, "--jobs", "1", "--max-cost", "5")
    assert code == 3 and "reported no cost" in stderr and "--allow-unpriced" in stderr
    assert len(_attempts(envelope)) == 1
    code, envelope, stderr = _eval(
        cli, repo, suite, "--agent-cmd", silent, "--jobs", "1", "--max-cost", "5", "--allow-unpriced"
    )
    assert code == 0, stderr
    assert len(_attempts(envelope)) == 3 and envelope["run"]["budget"]["unpriced_attempts"] == 3


def test_a_model_without_a_price_refuses_a_budget_before_anything_runs(
    cli, repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    suite = write_suite([task("t1")])
    result = cli(
        ["eval", "--suite", str(suite), "--trust", "--model", "openai/no-such-model-has-a-price", "--max-cost", "1"],
        cwd=repo,
    )
    assert result.exit_code == 2, result.output
    assert "a budget needs prices" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (repo / ".worktrial" / "runs").exists() or not any((repo / ".worktrial" / "runs").iterdir())


def test_max_cost_per_attempt_fails_an_attempt_that_spent_past_it(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t1")])
    code, envelope, stderr = _eval(cli, repo, suite, "--agent-cmd", _paid(0.8), "--max-cost-per-attempt", "0.5")
    assert code == 0, stderr
    (attempt,) = _attempts(envelope)
    assert attempt["outcome"] == "fail" and attempt["verified"] is None  # solved, but past its cap: no verdict
    assert "cost cap" in attempt["reason"] and "$0.8000" in attempt["reason"]
    assert envelope["run"]["budget"]["max_cost_per_attempt"] == 0.5


def test_a_matrix_shares_one_budget(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t1"), task("t2")])
    result = cli(
        [
            *("eval", "--suite", str(suite), "--trust", "--agent", "command", "--agent", "oracle"),
            *("--agent-cmd", _paid(1.0), "--jobs", "1", "--max-cost", "1.5", "--format", "json"),
        ],
        cwd=repo,
    )
    assert result.exit_code == 3, result.output
    assert "worktrial: stopped: the budget --max-cost $1.5 is reached" in result.stderr
    assert "worktrial resume" in result.stderr and "--max-cost USD" in result.stderr
    runs = list((repo / ".worktrial" / "runs").iterdir())
    assert len(runs) == 1  # the second configuration never started
    assert len((runs[0] / "attempts.jsonl").read_text().splitlines()) == 1
