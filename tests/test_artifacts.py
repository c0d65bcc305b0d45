"""Per-attempt artifacts: command output, agent output and patch stored locally, bounded and redacted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import SuiteWriter, git, task

Cli = Callable[..., Result]


def _run(cli: Cli, repo: Path, suite: Path, *extra: str) -> tuple[dict[str, Any], Path]:
    result = cli(["eval", "--suite", str(suite), "--trust", "-q", "--format", "json", *extra], cwd=repo)
    assert result.exit_code in (0, 1), result.output
    envelope = json.loads(result.stdout)
    return envelope, repo / ".worktrial" / "runs" / envelope["run"]["id"]


def _artifacts(run_dir: Path, task_id: str, attempt: int) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "attempts" / task_id / str(attempt) / "artifacts.json").read_text())
    return loaded


AGENT = "echo agent-says-$((40+2)); echo agent-complains >&2; echo new > added.txt; echo more >> README.md"
# The output names what failed in words that are not in the command itself (the reason quotes the command).
VERIFY = {"sh": "echo running tests; echo FAILED test_feature - expected $((2+2)); exit 3"}


def test_failing_verify_output_and_patch_are_kept_and_shown(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    (repo / "image.bin").write_bytes(bytes(range(256)))
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "binary")
    agent = AGENT + "; printf '\\000\\001\\002' > image.bin"
    suite = write_suite([task("feature", setup_commands=[{"sh": "echo preparing"}], verify_commands=[VERIFY])])
    envelope, run_dir = _run(cli, repo, suite, "--agent-cmd", agent)
    stored = _artifacts(run_dir, "feature", 1)
    setup, verify = stored["commands"]
    assert setup["phase"] == "setup" and setup["exit_code"] == 0 and "preparing" in setup["output_tail"]
    assert verify["phase"] == "verify" and verify["exit_code"] == 3
    assert "FAILED test_feature - expected 4" in verify["output_tail"]
    assert stored["agent_stdout"]["text"] == "agent-says-42\n"
    assert stored["agent_stderr"]["text"] == "agent-complains\n"
    patch = stored["patch"]
    assert sorted(patch["files"]) == ["README.md", "added.txt", "image.bin"]
    assert "+new" in patch["diff"] and "+more" in patch["diff"]
    assert "Binary files a/image.bin and b/image.bin differ" in patch["diff"]
    # Nothing of it in the published envelope or the trace files.
    run_files = [run_dir / "envelope.json", *(repo / ".worktrial" / "eval" / "traces").rglob("*.json")]
    for published in run_files:
        text = published.read_text()
        assert "agent-says-42" not in text and "expected 4" not in text and "+new" not in text
    shown = cli(["show", envelope["run"]["id"], "feature", "1"], cwd=repo)
    assert shown.exit_code == 0, shown.output
    assert "FAILED test_feature - expected 4" in shown.stdout
    assert "agent-says-42" in shown.stdout and "+new" in shown.stdout
    report = cli(["report", envelope["run"]["id"]], cwd=repo)
    assert "## Failed verification" in report.stdout and "FAILED test_feature - expected 4" in report.stdout


def test_no_artifacts_keeps_nothing(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite([task("feature", verify_commands=[VERIFY])])
    _, run_dir = _run(cli, repo, suite, "--agent-cmd", AGENT, "--no-artifacts")
    assert not (run_dir / "attempts").exists()


def test_secrets_in_the_environment_never_reach_artifacts(
    cli: Cli, repo: Path, write_suite: SuiteWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "pl4nted-s3cret-value-0042"
    monkeypatch.setenv("MY_SERVICE_API_TOKEN", secret)
    leak = "echo $MY_SERVICE_API_TOKEN; echo $MY_SERVICE_API_TOKEN >&2; echo $MY_SERVICE_API_TOKEN > leaked.txt"
    verify = {"sh": "echo $MY_SERVICE_API_TOKEN; cat leaked.txt; exit 1"}
    suite = write_suite(
        [task("leaky", verify_commands=[verify], setup_commands=[{"sh": "echo $MY_SERVICE_API_TOKEN"}])]
    )
    _, run_dir = _run(cli, repo, suite, "--agent-cmd", leak)
    stored = _artifacts(run_dir, "leaky", 1)
    assert stored["redactions"] >= 5
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    assert "[REDACTED]" in stored["agent_stdout"]["text"] and "[REDACTED]" in stored["patch"]["diff"]


@pytest.mark.slow
def test_a_50_mb_agent_output_keeps_the_tail(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    # 50 MiB of numbered lines, then a final marker: only the last MiB is kept, with the full size recorded.
    agent = "yes 'line of agent output that repeats' | head -c 52428800; echo; echo THE-LAST-LINE"
    suite = write_suite([task("chatty", verify_commands=["true"])])
    _, run_dir = _run(cli, repo, suite, "--agent-cmd", agent)
    stored_file = run_dir / "attempts" / "chatty" / "1" / "artifacts.json"
    assert stored_file.stat().st_size < 3 * 1024 * 1024
    stdout = json.loads(stored_file.read_text())["agent_stdout"]
    assert stdout["truncated"] is True and stdout["total_bytes"] > 50 * 1024 * 1024
    assert stdout["text"].endswith("THE-LAST-LINE\n")
    assert len(stdout["text"].encode()) <= 1024 * 1024


def test_selection_label_and_resume(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite(
        [
            task("parse-a"),
            task("parse-b", category="regression"),
            task("render-a"),
            task("render-b"),
        ]
    )
    envelope, _ = _run(
        cli, repo, suite, "--agent", "oracle", "--task", "parse-*", "--task", "render-b", "--label", "try one"
    )
    ids = [t["task_id"] for t in envelope["report"]["tasks"]]
    assert ids == ["parse-a", "parse-b", "render-b"]
    selection = envelope["run"]["selection"]
    assert selection["tasks"] == ["parse-*", "render-b"] and selection["suite_tasks"] == 4
    assert envelope["run"]["label"] == "try one"
    runs = cli(["runs"], cwd=repo)
    assert "try one" in runs.stdout
    by_category, _ = _run(cli, repo, suite, "--agent", "oracle", "--category", "regression")
    assert [t["task_id"] for t in by_category["report"]["tasks"]] == ["parse-b"]
    limited, _ = _run(cli, repo, suite, "--agent", "oracle", "--limit", "2")
    assert [t["task_id"] for t in limited["report"]["tasks"]] == ["parse-a", "parse-b"]
    resumed = cli(["resume", envelope["run"]["id"], "--format", "json", "-q"], cwd=repo)
    assert [t["task_id"] for t in json.loads(resumed.stdout)["report"]["tasks"]] == ids
    bad = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--task", "nope*"], cwd=repo)
    assert bad.exit_code == 2 and "--task 'nope*' matches no task id" in bad.output


def test_a_pinned_suite_run_from_outside_git_is_found_where_it_was_started(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    suite = write_suite([task("t1"), task("t2", verify_commands=[VERIFY])], workspace={"repo": str(repo)})
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    result = cli(["eval", "--suite", str(suite), "--trust", "-q", "--format", "json", "--agent", "oracle"], cwd=outside)
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run"]["id"]
    run_dir = outside / ".worktrial" / "runs" / run_id
    assert (run_dir / "envelope.json").is_file()
    assert run_id in cli(["runs"], cwd=outside).stdout
    assert cli(["report", run_id], cwd=outside).exit_code == 0
    assert "expected 4" in cli(["show", run_id, "t2", "1"], cwd=outside).stdout
    assert cli(["view", run_id], cwd=outside).exit_code == 0
    audit = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(suite)], cwd=outside)
    assert audit.exit_code == 0, audit.output


def test_compare_shows_labels_and_notes_different_selections(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite([task("a"), task("b"), task("c")])
    partial, _ = _run(cli, repo, suite, "--agent", "oracle", "--task", "a", "--task", "b", "--label", "first try")
    whole, _ = _run(cli, repo, suite, "--agent", "oracle")
    result = cli(["compare", partial["run"]["id"], whole["run"]["id"]], cwd=repo)
    assert result.exit_code == 0, result.output
    assert f"first try ({partial['run']['id']})" in result.stdout
    assert "different selections of the suite" in result.stdout and "A 2 of 3 tasks, B every task" in result.stdout


def test_check_runs_only_the_selected_tasks(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite([task("a", timeout_secs=300), task("b", timeout_secs=300, verify_commands=["true"])])
    whole = cli(["check", str(suite), "--trust", "--format", "json", "--repeats", "1"], cwd=repo)
    assert whole.exit_code == 1
    only_a = cli(["check", str(suite), "--trust", "--format", "json", "--repeats", "1", "--task", "a"], cwd=repo)
    assert only_a.exit_code == 0, only_a.output
    assert "checking 1 of 2 tasks" in only_a.stderr
