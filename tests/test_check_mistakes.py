"""check names the classic mistakes of suites for real repositories: dirty setup, undeclared suite files,
verifiers that read something outside the worktree, absolute paths in commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import git, task
from tests.fakes import share_with_sandbox


def _check(cli: Any, repo: Path, suite: Path) -> dict[str, Any]:
    result = cli(["check", str(suite), "--trust", "--format", "json", "-q", "--repeats", "1"], cwd=repo)
    assert result.exit_code in (0, 1), result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _problems(report: dict[str, Any], task_id: str) -> list[str]:
    return next(t["problems"] for t in report["tasks"] if t["task_id"] == task_id)


def test_setup_that_leaves_the_tree_dirty_is_named(cli, repo: Path, write_suite) -> None:
    dirty = task("dirty", setup_commands=[{"sh": "echo planted > planted.txt"}])
    clean = task("clean", environment={"setup": [{"sh": "echo planted > planted.txt"}]})
    report = _check(cli, repo, write_suite([dirty, clean]))
    assert any("setup_commands leave the tree dirty (planted.txt)" in p for p in _problems(report, "dirty"))
    assert _problems(report, "clean") == []


def test_undeclared_suite_file_is_named(cli, repo: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "hidden").mkdir(parents=True)
    (bundle / "hidden" / "declared.txt").write_text("done\n")
    (bundle / "extra").mkdir()
    (bundle / "extra" / "expected.txt").write_text("done\n")
    reads_undeclared = task("t1", verify_commands=[{"sh": 'cmp done.txt "$WORKTRIAL_SUITE_DIR/extra/expected.txt"'}])
    reads_declared = task("t2", verify_commands=[{"sh": 'cmp done.txt "$WORKTRIAL_SUITE_DIR/hidden/declared.txt"'}])
    suite = bundle / "suite.json"
    suite.write_text(json.dumps({"id": "s", "files": ["hidden/*"], "tasks": [reads_undeclared, reads_declared]}))
    report = _check(cli, repo, suite)
    assert any("not declared in `files`" in p for p in _problems(report, "t1"))
    assert _problems(report, "t2") == []
    lints = [lint for lint in report["lints"] if lint["task_id"] == "t1"]
    lints = [lint for lint in lints if "not declare" in lint["message"]]
    assert lints and "extra/expected.txt" in lints[0]["message"] and "extra/expected.txt" in lints[0]["suggestion"]
    assert not [lint for lint in report["lints"] if lint["task_id"] == "t2" and "not declare" in lint["message"]]


def test_verifier_testing_another_checkout_is_named(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    """The editable-install mistake: the verifier imports the module from another checkout, not the worktree."""
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "planted bug")
    other = tmp_path / "other-checkout"
    other.mkdir()
    (other / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    share_with_sandbox(other)  # an install the sandbox shows the verifier, as a user's own sandbox config would
    # As an editable install of another checkout does: that checkout comes first on sys.path.
    code = f"import sys; sys.path.insert(0, '{other}'); import calc; assert calc.add(2, 3) == 5"
    verify = {"argv": [sys.executable, "-c", code]}
    fix = {"sh": "sed -i 's/a - b/a + b/' calc.py"}
    suite = write_suite([task("fix", verify_commands=[verify], solution=[fix])])
    report = _check(cli, repo, suite)
    problems = _problems(report, "fix")
    assert any("passes with no change" in p for p in problems)
    assert any("still passes after the files the solution changed (calc.py) are emptied" in p for p in problems)
    assert any(str(other) in lint["message"] for lint in report["lints"])


def test_a_sound_verifier_survives_the_probes(cli, repo: Path, write_suite) -> None:
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "planted bug")
    verify = {"argv": ["python3", "-c", "import calc; assert calc.add(2, 3) == 5"]}
    fix = {"sh": "sed -i 's/a - b/a + b/' calc.py"}
    report = _check(cli, repo, write_suite([task("fix", verify_commands=[verify], solution=[fix], timeout_secs=600)]))
    assert report["ok"] is True, report
