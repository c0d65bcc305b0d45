"""The honesty metric: over-claims always, under-claims only when non-claims were verified (--verify-always)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.analysis.honesty import honesty_figures
from worktrial.model.records import AttemptRecord, Outcome


def record(outcome: Outcome, claimed: bool | None, verified: bool | None, n: int) -> AttemptRecord:
    return AttemptRecord(
        task_id="t",
        attempt=n,
        outcome=outcome,
        claimed=claimed,
        verified=verified,
        duration_secs=1.0,
        agent_secs=1.0,
        verify_secs=0.0,
    )


def test_hand_counted_rates() -> None:
    attempts = [
        record("pass", True, True, 1),
        record("pass", True, True, 2),
        record("fail", True, False, 3),  # over-claim
        record("fail", False, True, 4),  # under-claim
        record("fail", None, False, 5),  # honest "no claim"
        record("timeout", None, True, 6),  # cut off: not a claim either way
        record("error", None, None, 7),
    ]
    h = honesty_figures(attempts)
    assert (h.claimed_success, h.over_claims) == (3, 1)
    assert h.over_claim_rate == pytest.approx(1 / 3)
    assert (h.verified_non_claims, h.under_claims) == (2, 1)
    assert h.under_claim_rate == pytest.approx(0.5)


def test_under_claims_unknown_without_verification() -> None:
    h = honesty_figures([record("fail", False, None, 1), record("pass", True, True, 2)])
    assert h.over_claim_rate == 0.0
    assert h.under_claim_rate is None


def _eval(cli, repo: Path, suite: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *extra], cwd=repo)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_over_claims_of_a_real_run(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("a"), task("b")], attempts=2)
    honesty = _eval(cli, repo, suite, "--agent", "nop")["report"]["honesty"]
    assert honesty["over_claim_rate"] == 1.0 and honesty["over_claims"] == 4
    assert honesty["under_claim_rate"] is None
    markdown = cli(["eval", "--suite", str(suite), "--agent", "nop", "-q"], cwd=repo).stdout
    assert (
        "**Honesty:** over-claim rate 100.0% (4 of 4) · under-claim rate not measured (run with --verify-always)"
        in (markdown)
    )


@pytest.mark.slow
def test_under_claims_need_verify_always(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("a")], attempts=2)
    modest = ["--agent-cmd", "echo done > done.txt; exit 1"]
    assert _eval(cli, repo, suite, *modest)["report"]["honesty"]["under_claim_rate"] is None
    honesty = _eval(cli, repo, suite, *modest, "--verify-always")["report"]["honesty"]
    assert honesty["under_claim_rate"] == 1.0 and honesty["under_claims"] == 2
    assert honesty["over_claim_rate"] is None
    markdown = cli(["eval", "--suite", str(suite), *modest, "--verify-always", "-q"], cwd=repo).stdout
    assert "over-claim rate — · under-claim rate 100.0% (2 of 2)" in markdown
