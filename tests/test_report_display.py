"""What reports show of real runs: repeated failures once, build files folded away, setup named while it runs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import SuiteWriter, git, task
from worktrial.engine.run import RunObserver, RunOptions, run_suite
from worktrial.model.artifacts import Patch, collapsed_line, display_patch

Cli = Callable[..., Result]

# The agent leaves its attempt number where the second task's verifier prints it: that task fails differently each
# time, the first task the same way each time. Each verifier's output is not in its command (which the page shows).
AGENT = "echo attempt-$WORKTRIAL_ATTEMPT > n.txt"
SAME = {"sh": "echo FAILED test_x - assert 1 == $((1+1)); exit 1"}  # the output is not in the command
VARIES = {"sh": "cat n.txt; exit 1"}


def test_identical_failures_are_one_block_in_the_report_and_the_page(
    cli: Cli, repo: Path, write_suite: SuiteWriter
) -> None:
    suite = write_suite([task("same", verify_commands=[SAME]), task("varies", verify_commands=[VARIES])], attempts=3)
    made = cli(["eval", "--suite", str(suite), "--agent-cmd", AGENT, "--trust", "-q", "--format", "json"], cwd=repo)
    run_id = json.loads(made.stdout)["run"]["id"]
    report = cli(["report", run_id], cwd=repo).stdout
    failures = report[report.index("## Failed verification") :]
    assert "**`same` attempts 1–3**: verify 1" in failures and "(the same output each time)" in failures
    assert failures.count("FAILED test_x - assert 1 == 2") == 1
    for n in (1, 2, 3):  # a different output each time: a block each
        assert f"**`varies` #{n}**: verify 1" in failures and f"attempt-{n}" in failures
    page = Path(cli(["view", run_id], cwd=repo).stdout.strip()).read_text()
    assert page.count("The same command and output as") == 2  # attempts 2 and 3 of "same" point at #1
    assert 'href="#same/1"' in page
    assert page.count("FAILED test_x - assert 1 == 2") == 1
    for n in (1, 2, 3):
        assert f"attempt-{n}" in page


def _byte_code_suite(write_suite: SuiteWriter, repo: Path) -> Path:
    """A base whose environment setup compiled ``mod.py`` (``__pycache__`` committed with it, as setup's output
    always is), and a solution whose import writes that byte-code again."""
    (repo / "mod.py").write_text("def f():\n    return 1\n")
    (repo / ".gitignore").write_text("*.log\n*.pyc\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a module")
    solve = {"sh": "sed -i 's/return 1/return 22/' mod.py && python3 -c 'import mod'"}
    verify = {"sh": "python3 -c 'import mod; assert mod.f() == 22'"}
    setup = {"setup": [{"sh": "python3 -c 'import mod'"}]}
    return write_suite([task("fix", solution=[solve], verify_commands=[verify])], environment=setup)


@pytest.mark.slow
def test_ignored_build_files_are_one_line_in_show_and_the_page(
    cli: Cli, repo: Path, write_suite: SuiteWriter, rooms: str
) -> None:
    suite = _byte_code_suite(write_suite, repo)
    made = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json"], cwd=repo)
    assert made.exit_code == 0, made.output
    run_id = json.loads(made.stdout)["run"]["id"]
    stored = json.loads((repo / ".worktrial/runs" / run_id / "attempts/fix/1/artifacts.json").read_text())
    byte_code = [f for f in stored["patch"]["files"] if f.endswith(".pyc")]
    assert len(byte_code) == 1 and byte_code[0].startswith("__pycache__/mod.")
    assert stored["patch"]["ignored"] == byte_code  # the base tracks it only because setup's output was committed
    shown = cli(["show", run_id, "fix", "1"], cwd=repo).stdout
    assert "1 ignored build file changed: __pycache__/mod." in shown and "--full-patch shows them" in shown
    assert "Binary files" not in shown and "+    return 22" in shown
    full = cli(["show", run_id, "fix", "1", "--full-patch"], cwd=repo).stdout
    assert "Binary files a/__pycache__/mod." in full and "ignored build file" not in full
    page = Path(cli(["view", run_id], cwd=repo).stdout.strip()).read_text()
    assert '<details class="collapsed-files"><summary class="muted">1 ignored build file changed' in page


def test_display_patch_folds_only_build_files_it_can_name() -> None:
    diff = (
        "diff --git a/app.py b/app.py\n+x\n"
        "diff --git a/build/out.o b/build/out.o\nBinary files a/build/out.o and b/build/out.o differ\n"
        "diff --git a/pkg/__pycache__/m.cpython-311.pyc b/pkg/__pycache__/m.cpython-311.pyc\nBinary\n"
        'diff --git "a/__pycache__/\\303\\251.pyc" "b/__pycache__/\\303\\251.pyc"\nBinary quoted\n'
        "diff --git a/a b/a b/a b/a b/a\n+spaces\n"
    )
    shown = display_patch(Patch(diff=diff, files=[], ignored=["build/out.o"]))
    assert shown.collapsed == ["build/out.o", "pkg/__pycache__/m.cpython-311.pyc"]
    assert "+x" in shown.diff and "Binary quoted" in shown.diff and "+spaces" in shown.diff  # a quoted name is shown
    assert "out.o" not in shown.diff and "m.cpython" not in shown.diff
    assert "Binary files a/build/out.o" in shown.collapsed_diff
    assert collapsed_line(["a", "b", "c", "d"]) == "4 ignored build files changed: a, b, c and 1 more"


class _Phases(RunObserver):
    def __init__(self) -> None:
        self.heard: list[str] = []

    def start(self, task_id: str, attempt: int) -> None:
        self.heard.append("start")

    def phase(self, task_id: str, attempt: int, phase: str) -> None:
        self.heard.append(phase)


def test_environment_setup_is_the_setup_phase(repo: Path, write_suite: SuiteWriter) -> None:
    """Before the first setup command, and without any, an attempt whose environment is being set up is in setup."""
    suite = write_suite([task("t1")], environment={"setup": [{"sh": "echo prepared > prepared.txt"}]})
    phases = _Phases()
    run_suite(suite, RunOptions(agent="oracle", workspace=repo, jobs=1), phases)
    assert phases.heard == ["start", "setup", "agent", "verify"]


def test_report_tables_wrap_task_ids_at_80_columns() -> None:
    from rich.console import Console

    from worktrial.render.terminal import ReportMarkdown

    ids = ["fix-pipe-cell-escaping-in-tables-with-unicode", "fix-pipe-cell-escaping-in-headers-with-unicode"]
    rows = "\n".join(f"| {i} | capability | 0/3 | 0.000 | 0.000 | 3 fail | 0.2s |" for i in ids)
    head = "| task | category | passed/total | pass@3 | pass^3 | outcomes | mean duration |\n"
    text = head + "|---|---|---:|---:|---:|---|---:|\n"
    console = Console(width=80, record=True, force_terminal=False)
    console.print(ReportMarkdown(text + rows))
    screen = console.export_text()
    assert "…" not in screen
    column = "".join(re.findall(r"^ (\S+)", screen, re.MULTILINE))  # the first column, its wrapped pieces joined
    assert all(i in column for i in ids)
