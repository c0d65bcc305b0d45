"""`worktrial runs` lists every stored run, and marks the ones whose records it cannot verify here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import SuiteWriter, task

Cli = Callable[..., Result]


def _eval(cli: Cli, repo: Path, suite: Path, *extra: str) -> str:
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json", *extra]
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    run_id: str = json.loads(result.stdout)["run"]["id"]
    return run_id


def _row(listing: str, run_id: str) -> str:
    (row,) = [line.rstrip() for line in listing.splitlines() if line.startswith(run_id)]
    return row


@pytest.mark.slow
def test_runs_lists_runs_signed_under_another_home(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite([task("t1"), task("t2")], attempts=2)
    elsewhere = _eval(cli, repo, suite, "--label", "from the other home")
    # Another HOME (or user): its config dir, where run keys live, is not the one the first run was signed under.
    monkeypatch.setenv("WORKTRIAL_CONFIG_DIR", str(tmp_path / "another-home" / "config"))
    mine = _eval(cli, repo, suite)
    edited = _eval(cli, repo, suite)
    runs = repo / ".worktrial" / "runs"
    with (runs / edited / "run.json").open("a") as fh:
        fh.write(" ")  # still valid JSON, no longer the bytes the harness signed
    (runs / "20200101T000000Z-0bad00").mkdir()
    (runs / "20200101T000000Z-0bad00" / "run.json").write_text("{not json")

    listing = cli(["runs"], cwd=repo)
    assert listing.exit_code == 0, listing.output
    text = listing.stdout
    assert _row(text, mine).split()[-1] == "yes"
    row = _row(text, elsewhere)
    assert "from the other home — oracle" in row and row.split()[-5:] == ["4/4", "1.000", "no:", "key", "missing"]
    assert _row(text, edited).split()[-4:] == ["4/4", "1.000", "no:", "changed"]
    assert _row(text, "20200101T000000Z-0bad00").endswith("no: unreadable")
    keys = tmp_path / "another-home" / "config" / "run-keys"
    assert f"key missing: 1 run(s) cannot be verified here: their signing keys are not in {keys}" in text
    assert "changed: 1 run(s)" in text and "unreadable: 1 run(s)" in text
    # As the note says, the other commands still show the run from the other HOME.
    assert cli(["report", elsewhere, "--format", "json"], cwd=repo).exit_code == 0
    assert cli(["view", elsewhere, "--output", str(tmp_path / "page.html")], cwd=repo).exit_code == 0


def test_runs_without_problems_has_no_verified_column(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    run_id = _eval(cli, repo, write_suite([task("t1")]))
    listing = cli(["runs"], cwd=repo).stdout
    assert "verified" not in listing and "cannot be verified" not in listing
    assert _row(listing, run_id).split()[-1] == "1.000"
