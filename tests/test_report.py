"""Markdown report and envelope contents for a run with every kind of outcome."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.conftest import SuiteWriter, git, task

AGENT = (
    'case "$WORKTRIAL_TASK_ID" in '
    "solved) touch done.txt ;; "
    'flaky) [ "$WORKTRIAL_ATTEMPT" = 1 ] && touch done.txt; true ;; '
    "slow) sleep 30 ;; "
    "broken) no-such-binary-qq ;; "
    "esac"
)


def make_suite(write_suite: SuiteWriter) -> Path:
    return write_suite(
        [
            task("solved", name="Solved task"),
            task("flaky", name="Flaky | pipe"),
            task("slow", category="regression", timeout_secs=1),
            task("broken", category="regression"),
        ],
        attempts=2,
        name="Report suite",
    )


@pytest.mark.slow
def test_markdown_report(cli, repo: Path, write_suite) -> None:
    suite = make_suite(write_suite)
    result = cli(["eval", "--suite", str(suite), "--agent-cmd", AGENT, "--trust", "--model", "acme/coder-1"], cwd=repo)
    assert result.exit_code == 0, result.output
    md = result.stdout
    head = git(repo, "rev-parse", "HEAD")
    assert md.startswith("# worktrial: Report suite (`test-suite`)\n")
    assert "- agent: `command` · model: `acme/coder-1`" in md
    assert f"- base commit: `{head[:12]}`" in md
    assert "attempts per task: 2 · headline k = 2" in md
    assert "| group | tasks | passed/total | pass@2 | 95% CI | pass^2 | 95% CI |" in md
    # per task pass@2: 1, 1, 0, 0 -> 0.5; pass^2: 1, 0, 0, 0 -> 0.25
    # k = n = 2: each task's pass@2 / pass^2 is one pass/fail, so the CIs are Clopper–Pearson intervals over
    # tasks (statsmodels' "beta": 2 of 4 [0.068, 0.932], 1 of 4 [0.006, 0.806], 2 of 2 [0.158, 1], 1 of 2
    # [0.013, 0.987], 0 of 2 [0, 0.842]); exact at any size, and never zero-width.
    assert "| **overall** | 4 | 3/8 | 0.500 | [0.068, 0.932] | 0.250 | [0.006, 0.806] |" in md
    assert "| capability | 2 | 3/4 | 1.000 | [0.158, 1.000] | 0.500 | [0.013, 0.987] |" in md
    assert "| regression | 2 | 0/4 | 0.000 | [0.000, 0.842] | 0.000 | [0.000, 0.842] |" in md
    assert "95% CIs: exact Clopper–Pearson intervals" in md
    assert "Missing attempts" not in md
    assert "| solved | capability | 2/2 | 1.000 | 1.000 | 2 pass |" in md
    assert "| flaky | capability | 1/2 | 1.000 | 0.000 | 1 pass · 1 fail |" in md
    assert "| slow | regression | 0/2 | 0.000 | 0.000 | 2 timeout |" in md
    assert "| broken | regression | 0/2 | 0.000 | 0.000 | 2 error |" in md
    assert "## Errors and timeouts" in md
    # one line per task for attempts that ended the same way
    assert "- `slow` attempts 1–2: **timeout** — agent exceeded its 1s timeout" in md
    assert "- `broken` attempts 1–2: **error** — command not found: no-such-binary-qq" in md
    assert "`slow` #1" not in md and "`broken` #2" not in md
    assert "**Efficiency:** cost unknown (unpriced: 8 of 8 attempts" in md
    # progress lines go to stderr, one per attempt, with the ETA until the last
    lines = [line for line in result.stderr.splitlines() if re.match(r"\[\d/8\] ", line)]
    assert len(lines) == 8
    slow = r"\[\d/8\] timeout slow #1 \(\d+\.\ds\)( · ETA ~\d+:\d\d)? — agent exceeded its 1s timeout"
    assert any(re.match(slow, x) for x in lines)
    assert all(" · ETA ~" in x for x in lines[:-1]) and " · ETA" not in lines[-1]


@pytest.mark.slow
def test_envelope_contents(cli, repo: Path, write_suite) -> None:
    suite = make_suite(write_suite)
    result = cli(
        ["eval", "--suite", str(suite), "--agent-cmd", AGENT, "--trust", "--model", "acme/coder-1", "--k", "1",
         "--format", "json", "--jobs", "3"],
        cwd=repo,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    env = json.loads(result.stdout)
    assert env["schema_version"] == 1 and env["harness"] == "worktrial" and env["harness_version"] == "0.1.0"
    assert (env["provider"], env["model"]) == ("acme", "coder-1")
    assert env["agent"] == {"name": "command", "command": AGENT}
    assert env["suite_sha256"] == hashlib.sha256(suite.read_bytes()).hexdigest()
    run = env["run"]
    assert run["complete"] is True and run["attempts"] == 2 and run["k"] == 1 and run["jobs"] == 3
    assert run["workspace"] == {"path": str(repo), "base_commit": git(repo, "rev-parse", "HEAD"), "dirty": False}
    assert run["started_at"].endswith("Z") and run["finished_at"].endswith("Z")
    report = env["report"]
    assert report["suite_id"] == "test-suite" and report["suite_name"] == "Report suite" and report["k"] == 1
    assert report["overall"]["pass_at_k"] == 3 / 8
    assert set(report["categories"]) == {"capability", "regression"}
    flaky = report["tasks"][1]
    assert flaky["name"] == "Flaky | pipe" and flaky["curves"]["pass_at"] == {"1": 0.5, "2": 1.0}
    first = flaky["attempts"][0]
    assert set(first) >= {
        "attempt", "outcome", "claimed", "verified", "reason", "duration_secs", "agent_secs", "verify_secs",
        "cost_usd", "tokens", "trace",
    }  # fmt: skip
    assert first["trace"].startswith(f".worktrial/eval/traces/{run['id']}/")
    assert report["unpriced_runs"] == 8 and report["cost_usd"] is None
