"""worktrial check finds planted suite problems: always-passing, unsolvable, flaky, and lint findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.analysis.lint import lint_suite, shell_syntax
from worktrial.model.suite import parse_suite

ROOT = Path(__file__).resolve().parent.parent


def sound(task_id: str, **fields: object) -> dict[str, object]:
    """A task that passes every check unless a field is overridden."""
    defaults: dict[str, object] = {"timeout_secs": 300, "prompt": f"Create done.txt for {task_id}"}
    return task(task_id, **{**defaults, **fields})


def test_check_finds_planted_problems(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    counter = tmp_path / "flaky-counter"
    # Passes on even calls only (oracle: call 0, nop never reaches it, re-runs: calls 1-3); the counter lives
    # outside every worktree, so the verdict changes while the files it checks do not.
    flaky_verify = {"sh": f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; [ $((n % 2)) -eq 0 ]"}
    # Passes only the first time it ever runs: consistent within the re-runs, but not with the oracle's attempt.
    sentinel = tmp_path / "ran-once"
    once_only = {"sh": f"test ! -e {sentinel} && touch {sentinel}"}
    suite = write_suite(
        [
            sound("good"),
            sound("always-passes", verify_commands=["test -f README.md"]),
            sound("unsolvable", solution=[{"sh": "echo nope > other.txt"}]),
            sound("broken-solution", solution=[{"sh": "exit 3"}]),
            sound("flaky", verify_commands=["test -f done.txt", flaky_verify]),
            sound("once-only", verify_commands=["test -f done.txt", once_only]),
            {k: v for k, v in sound("no-solution").items() if k != "solution"},
        ]
    )

    # The flaky verifiers keep a counter outside the worktree, which a sandboxed verify could not see.
    args = ["check", str(suite), "--trust", "--sandbox", "off", "--format", "json", "-q", "--repeats", "3"]
    result = cli(args, cwd=repo)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    # 4 agreeing verdicts bound the flake rate by 1 - 0.05^(1/4) = 53% and catch a 10% flake only 34% of the time
    assert report["flake_upper_bound"] == pytest.approx(1 - 0.05**0.25)
    assert report["detects_10pct_flake"] == pytest.approx(1 - 0.9**4 - 0.1**4)
    by_id = {t["task_id"]: t for t in report["tasks"]}
    assert by_id["good"]["problems"] == []
    assert by_id["good"]["verify_passes"] == 4 and by_id["good"]["verify_runs"] == 4
    assert any("passes with no change" in p for p in by_id["always-passes"]["problems"])
    assert by_id["always-passes"]["nop"] == "pass"
    assert by_id["unsolvable"]["oracle"] == "fail"
    assert any("oracle does not pass" in p for p in by_id["unsolvable"]["problems"])
    flaky = by_id["flaky"]
    assert flaky["problems"] == [
        f"flaky verifier: verify_commands[1] (sh -c '{flaky_verify['sh']}') passed 1 of 3 re-runs "
        "on the oracle's unchanged result"
    ], flaky
    assert (flaky["verify_passes"], flaky["verify_runs"]) == (2, 4)
    assert by_id["no-solution"]["oracle"] is None and by_id["no-solution"]["problems"] == []
    assert report["without_solution"] == ["no-solution"]
    broken = by_id["broken-solution"]["problems"]
    assert len(broken) == 1 and "oracle does not pass (fail: agent claimed failure" in broken[0], broken
    assert by_id["once-only"]["problems"] == [
        "flaky verifier: passed on the oracle's attempt but failed all 3 re-runs of its result"
    ]
    assert report["ok"] is False and report["problems"] == 7
    # The two verifiers that keep state in files outside the worktree are named by the location lint.
    assert sorted(lint["task_id"] for lint in report["lints"]) == ["flaky", "once-only"]
    assert all("outside the worktree and the suite directory" in lint["message"] for lint in report["lints"])


def test_check_markdown_table_and_repeats(cli, repo: Path, write_suite) -> None:
    suite = write_suite([sound("good"), sound("always-passes", verify_commands=["test -f README.md"])])
    result = cli(["check", str(suite), "--trust", "--repeats", "2"], cwd=repo)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "| task | solution | oracle | nop | verifier on oracle result | status |" in out
    assert "| good | yes | pass | fail | 3/3 pass | ok |" in out
    assert "| always-passes | yes | pass | pass | 3/3 pass | **1 problem** |" in out
    assert "passes with no change (nop agent)" in out
    assert "**1 problem(s) found.**" in out
    assert "running the oracle agent" in result.stderr
    # 3 verdicts: rule-of-three bound 1 - 0.05^(1/3) = 63%, a 10% flake caught with 27%: the output says so
    assert "flaky at most 63% of the time" in out
    assert "so it may well have been missed: `--repeats 15` catches it with 81%." in out


@pytest.mark.slow
def test_check_passes_the_bundled_suite(cli, repo: Path) -> None:
    result = cli(["check", str(ROOT / "suites/smoke-workspace-basics.json"), "--trust", "-q"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert "**No problems found.**" in result.stdout


def test_check_needs_trust(cli, repo: Path, write_suite) -> None:
    result = cli(["check", str(write_suite([sound("good")]))], cwd=repo)
    assert result.exit_code == 2
    assert "--trust" in result.stderr


def test_lints_reach_the_report_and_fail_the_check(cli, repo: Path, write_suite) -> None:
    suite = write_suite(
        [
            sound("piped", verify_commands=["grep -q done done.txt && test -s done.txt"]),
            sound("twin-a", prompt="Same words"),
            sound("twin-b", prompt="Same   words"),
        ]
    )
    result = cli(["check", str(suite), "--trust", "--format", "json", "-q"], cwd=repo)
    assert result.exit_code == 1, result.output
    lints = json.loads(result.stdout)["lints"]
    assert lints[0]["where"] == "$.tasks[0].verify_commands[0]"
    assert json.loads(lints[0]["suggestion"]) == {"sh": "grep -q done done.txt && test -s done.txt"}
    assert {lint["task_id"] for lint in lints if "duplicate prompt" in lint["message"]} == {"twin-a", "twin-b"}


def test_shell_syntax_lint() -> None:
    flagged = {
        "grep -q x f | wc -l": ["|"],
        "make test && echo ok": ["&&"],
        "echo a; echo b": ["a;"],
        "echo hi > out.txt": [">"],
        "test -n $HOME": ["$HOME"],
        "grep -q 'two words' f": ["'two", "words'"],
        'grep -q "two words" f': ['"two'],
        "cat ~/x": ["~/x"],
        "python -c print(1) 2>/dev/null": ["2>/dev/null"],
        "echo $(date)": ["$(date)"],
        "git log --format='%s'": ["--format='%s'"],
    }
    for command, tokens in flagged.items():
        assert shell_syntax(command) == tokens, command
    # The plain form passes these through literally on purpose (see commands.py): not findings.
    for command in ['grep -qx {"name":"worktrial","count":3} f.json', "grep -qx #Setup README.md", "test -f a.txt"]:
        assert shell_syntax(command) == [], command


def test_timeout_lints() -> None:
    suite = parse_suite(
        {
            "id": "s",
            "tasks": [
                {
                    "id": "quick",
                    "prompt": "p",
                    "timeout_secs": 20,
                    "verify_timeout_secs": 2,
                    "verify_commands": ["true"],
                },
                {"id": "fine", "prompt": "q", "timeout_secs": 600, "verify_commands": [{"sh": "a && b"}]},
            ],
        }
    )
    lints = lint_suite(suite)
    assert [(lint.task_id, lint.where) for lint in lints] == [
        ("quick", "$.tasks[0].timeout_secs"),
        ("quick", "$.tasks[0].verify_timeout_secs"),
    ]
    assert "very short" in lints[0].message
