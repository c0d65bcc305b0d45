from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import task

ROOT = Path(__file__).resolve().parent.parent


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
