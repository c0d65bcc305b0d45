"""worktrial audit re-verifies a real envelope, and catches an edited metric, suite, outcome or trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task


@pytest.fixture
def published(cli, repo: Path, write_suite, tmp_path: Path) -> tuple[Path, Path]:
    """A real run of the oracle on two tasks (2 attempts each); returns (envelope, suite)."""
    suite = write_suite([task("a"), task("b", verify_commands=["test -f missing.txt"])], attempts=2)
    envelope = tmp_path / "envelope.json"
    result = cli(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "--output", str(envelope)],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    return envelope, suite


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def test_untouched_envelope_checks_out(cli, published: tuple[Path, Path]) -> None:
    envelope, suite = published
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 0, result.output
    assert "ok: every published number matches" in result.stdout
    assert "4 trace files checked" in result.stdout
    data = json.loads(cli(["audit", str(envelope), "--suite", str(suite), "--format", "json"]).stdout)
    assert data["ok"] is True and data["mismatches"] == [] and data["values_compared"] > 50


def test_edited_metric_is_caught(cli, published: tuple[Path, Path]) -> None:
    envelope, suite = published

    def inflate(data: dict[str, Any]) -> None:
        data["report"]["overall"]["pass_at_k"] = 0.9
        data["report"]["tasks"][1]["passed_runs"] = 1

    edit(envelope, inflate)
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 1
    assert "report.overall.pass_at_k: published 0.9, recomputed 0.5" in result.stdout
    assert "report.tasks[b].passed_runs: published 1, recomputed 0" in result.stdout
    assert "2 mismatch(es)" in result.stdout


def test_edited_suite_is_caught(cli, published: tuple[Path, Path]) -> None:
    envelope, suite = published
    edit(suite, lambda data: data["tasks"][1].update(category="regression"))
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 1
    assert "suite_sha256: the envelope was produced from suite file sha256" in result.stdout
    assert 'report.tasks[b].category: published "capability", recomputed "regression"' in result.stdout
    assert "report.categories.regression: missing from the envelope" in result.stdout


def test_envelope_from_before_the_honesty_metric_still_checks_out(cli, published: tuple[Path, Path]) -> None:
    envelope, suite = published
    edit(envelope, lambda data: data["report"].pop("honesty"))
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 0, result.output


def test_envelope_with_wilson_intervals_is_judged_on_them(cli, published: tuple[Path, Path]) -> None:
    """An envelope written before Clopper–Pearson names "wilson" intervals: the audit recomputes those."""
    from worktrial.analysis.metrics import TaskInfo, build_report
    from worktrial.model.records import AttemptRecord

    envelope, suite = published

    def as_before(data: dict[str, Any]) -> None:
        report = data["report"]
        tasks = [TaskInfo(t["task_id"], t["name"], t["category"], t.get("cluster")) for t in report["tasks"]]
        records = [AttemptRecord.model_validate(a) for t in report["tasks"] for a in t["attempts"]]
        before = build_report(report["suite_id"], report["suite_name"], tasks, records, report["k"], rule="wilson")
        for name in ("overall", "categories"):
            report[name] = before.model_dump(mode="json")[name]
        for metrics in [report["overall"], *report["categories"].values()]:
            del metrics["tasks_measured"]
        assert report["overall"]["interval"] == "wilson"

    edit(envelope, as_before)
    result = cli(["audit", str(envelope), "--suite", str(suite), "--no-traces"])
    assert result.exit_code == 0, result.output
    edit(envelope, lambda data: data["report"]["overall"]["ci95"].update(pass_at_k=[0.0, 1.0]))
    result = cli(["audit", str(envelope), "--suite", str(suite), "--no-traces"])
    assert result.exit_code == 1 and "report.overall.ci95.pass_at_k" in result.stdout


def test_edited_outcome_is_caught(cli, published: tuple[Path, Path]) -> None:
    """Flipping an outcome and every count consistently still contradicts the attempt's verified fact."""
    envelope, suite = published

    def flip(data: dict[str, Any]) -> None:
        data["report"]["tasks"][1]["attempts"][0]["outcome"] = "pass"

    edit(envelope, flip)
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 1
    assert "report.tasks[b].attempts[1]: outcome pass but claimed=True, verified=False" in result.stdout


def _trace(envelope: Path, task_index: int = 0) -> Path:
    data = json.loads(envelope.read_text())
    attempt = data["report"]["tasks"][task_index]["attempts"][0]
    trace: str = attempt["trace"]
    return Path(data["run"]["workspace"]["path"]) / trace


def test_missing_and_leaky_traces_are_caught(cli, published: tuple[Path, Path]) -> None:
    envelope, suite = published
    _trace(envelope, 0).unlink()
    edit(_trace(envelope, 1), lambda data: data.update(messages=[{"role": "user", "content": "secret"}]))
    result = cli(["audit", str(envelope), "--suite", str(suite)])
    assert result.exit_code == 1
    assert "does not exist" in result.stdout
    assert "holds transcript field $.messages" in result.stdout
    assert "holds transcript field $.messages[0].content" in result.stdout
    skipped = cli(["audit", str(envelope), "--suite", str(suite), "--no-traces"])
    assert skipped.exit_code == 0, skipped.output


def test_traces_found_under_an_explicit_workspace(cli, published: tuple[Path, Path], tmp_path: Path) -> None:
    envelope, suite = published
    workspace = Path(json.loads(envelope.read_text())["run"]["workspace"]["path"])
    copy = tmp_path / "downloaded"
    shutil.copytree(workspace / ".worktrial", copy / ".worktrial")
    shutil.rmtree(workspace / ".worktrial")
    assert cli(["audit", str(envelope), "--suite", str(suite)]).exit_code == 1
    result = cli(["audit", str(envelope), "--suite", str(suite), "--workspace", str(copy)])
    assert result.exit_code == 0, result.output


def test_not_an_envelope(cli, tmp_path: Path, write_suite) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"schema_version": 1}')
    result = cli(["audit", str(bogus), "--suite", str(write_suite([task("a")]))])
    assert result.exit_code == 2
    assert "not a worktrial envelope" in result.stderr
