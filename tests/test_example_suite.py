"""The example suite for a real library (examples/inflection): oracle passes every task, nop fails every task,
check is clean, and each task ran at its own commit of the vendored repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worktrial.model.suite import load_suite

pytestmark = pytest.mark.slow

SUITE = Path(__file__).resolve().parent.parent / "examples" / "inflection" / "suite.json"


def test_example_suite_declares_its_files() -> None:
    loaded = load_suite(SUITE)
    names = [f.name for f in loaded.files]
    assert names == [
        "hidden/test_kebabize.py",
        "hidden/test_ordinal.py",
        "hidden/test_uncountable.py",
        "patches/kebabize.diff",
    ]
    assert loaded.digest != loaded.sha256


def test_example_suite_checks_clean(cli, repo: Path) -> None:
    result = cli(["check", str(SUITE), "--trust", "--format", "json", "-q", "--repeats", "1"], cwd=repo)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True, report
    assert [(t["task_id"], t["oracle"], t["nop"]) for t in report["tasks"]] == [
        ("add-kebabize", "pass", "fail"),
        ("fix-ordinal-teens", "pass", "fail"),
        ("fix-uncountable-case", "pass", "fail"),
    ]
    # The oracle run is stored: its envelope names each task's own base commit in the vendored repository.
    runs = sorted((repo / ".worktrial" / "runs").iterdir())
    envelope = json.loads((runs[0] / "envelope.json").read_text())
    bases = envelope["run"]["task_base_commits"]
    assert len(set(bases.values())) == 3
    assert envelope["suite_bundle_sha256"] == load_suite(SUITE).digest
