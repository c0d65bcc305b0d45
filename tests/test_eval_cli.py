"""worktrial eval end to end through the real CLI: outcomes, reasons, exit codes, reports, traces."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task


def run_json(cli, repo: Path, suite: Path, *extra: str) -> dict[str, Any]:
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *extra], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def attempts_of(envelope: dict[str, Any], task_index: int = 0) -> list[dict[str, Any]]:
    attempts: list[dict[str, Any]] = envelope["report"]["tasks"][task_index]["attempts"]
    return attempts


# --- exit codes and messages -------------------------------------------------------------------------


def assert_clean_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("worktrial: error: ")
    for needle in needles:
        assert needle in result.stderr


def test_bad_suite_is_exit_2(cli, repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "s", "tasks": [{"id": "a", "prompt": "p", "verify_commands": []}]}')
    result = cli(["eval", "--suite", str(bad), "--agent", "nop", "--trust"], cwd=repo)
    assert_clean_error(result, 2, "$.tasks[0].verify_commands: must not be empty")


def test_not_a_repository_is_exit_2(cli, tmp_path: Path, write_suite) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    suite = write_suite([task()])
    result = cli(["eval", "--suite", str(suite), "--agent", "nop", "--trust"], cwd=plain)
    assert_clean_error(result, 2, "is not inside a git repository", "--workspace")


def test_repository_without_commits_is_exit_2(cli, tmp_path: Path, write_suite) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    result = cli(["eval", "--suite", str(write_suite([task()])), "--agent", "nop", "--trust"], cwd=empty)
    assert_clean_error(result, 2, "has no commits yet")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "choose an agent"),
        (["--agent", "wizard"], "unknown agent 'wizard'; known agents: aider, builtin, claude-code, codex, command"),
        (["--agent", "oracle", "--agent-cmd", "x"], "--agent-cmd only works with --agent command"),
        (["--agent", "command"], "--agent command needs --agent-cmd"),
        (["--agent", "nop", "--attempts", "2", "--k", "3"], "--k must be between 1 and the number of attempts (2)"),
    ],
)
def test_bad_flags_are_exit_2(cli, repo: Path, write_suite, args: list[str], needle: str) -> None:
    result = cli(["eval", "--suite", str(write_suite([task()])), "--trust", *args], cwd=repo)
    assert_clean_error(result, 2, needle)


def test_untrusted_suite_is_refused_without_a_terminal(cli, repo: Path, write_suite, monkeypatch) -> None:
    suite = write_suite([task()])
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle"], cwd=repo)
    assert_clean_error(result, 2, "has not been trusted", "--trust", "WORKTRIAL_TRUST=1")
    assert not (repo / ".worktrial").exists(), "nothing may run before trust is granted"
    # Granting once is remembered for this digest in this workspace ...
    assert cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust"], cwd=repo).exit_code == 0
    assert cli(["eval", "--suite", str(suite), "--agent", "oracle"], cwd=repo).exit_code == 0
    # ... and an edited suite (new digest) asks again.
    suite.write_text(suite.read_text().replace("Do t1", "Do t1 again"))
    assert cli(["eval", "--suite", str(suite), "--agent", "oracle"], cwd=repo).exit_code == 2
    monkeypatch.setenv("WORKTRIAL_TRUST", "1")
    assert cli(["eval", "--suite", str(suite), "--agent", "oracle"], cwd=repo).exit_code == 0


def test_debug_shows_traceback(cli, repo: Path, tmp_path: Path) -> None:
    result = cli(["--debug", "eval", "--suite", str(tmp_path / "missing.json"), "--agent", "nop"], cwd=repo)
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and "suite file not found" in result.stderr


# --- outcomes ------------------------------------------------------------------------------------------


def test_exec_eval_is_the_same_command(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task()])
    flags = ["--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json"]
    short, long = cli(["eval", *flags], cwd=repo), cli(["exec", "eval", *flags], cwd=repo)
    assert short.exit_code == long.exit_code == 0

    def measured(value: Any) -> Any:
        """The envelope without what legitimately differs between two runs, compared as data (never as rendered
        text, where a timing can appear in any line): the run's id, times and durations, trace paths."""
        if isinstance(value, dict):
            volatile = {"id", "started_at", "finished_at", "trace", "host"}
            return {k: measured(v) for k, v in value.items() if k not in volatile and "_secs" not in k}
        return [measured(v) for v in value] if isinstance(value, list) else value

    assert measured(json.loads(short.stdout)) == measured(json.loads(long.stdout))


def test_claimed_failure_is_fail_and_not_verified(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(verify_commands=["true"])])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent-cmd", "exit 3"))[0]
    assert attempt["outcome"] == "fail"
    assert attempt["claimed"] is False and attempt["verified"] is None
    assert attempt["reason"] == "agent claimed failure: agent exited 3"


def test_verify_always_records_what_verification_would_say(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(verify_commands=["true"])])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent-cmd", "exit 3", "--verify-always"))[0]
    assert attempt["outcome"] == "fail" and attempt["verified"] is True


def test_claimed_success_without_work_fails_verification(cli, repo: Path, write_suite) -> None:
    attempt = attempts_of(run_json(cli, repo, write_suite([task()]), "--agent", "nop"))[0]
    assert attempt["outcome"] == "fail" and attempt["claimed"] is True and attempt["verified"] is False
    assert attempt["reason"] == "verify failed: test -f done.txt exited 1"


def test_timeout_kills_agent_and_is_recorded(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(timeout_secs=1, verify_commands=["test -f done.txt"])])
    envelope = run_json(cli, repo, suite, "--agent-cmd", "touch done.txt; sleep 60", "--verify-always")
    attempt = attempts_of(envelope)[0]
    assert attempt["outcome"] == "timeout"
    assert attempt["claimed"] is None
    assert attempt["verified"] is True  # diagnosis only: the outcome stays timeout
    assert attempt["agent_secs"] < 10
    assert attempt["reason"] == "agent exceeded its 1s timeout"


def test_missing_agent_executable_is_exit_2_before_any_attempt(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task()])
    result = cli(["eval", "--suite", str(suite), "--trust", "--agent-cmd", "no-such-agent-zz --go"], cwd=repo)
    assert_clean_error(result, 2, "'no-such-agent-zz' is not installed or not on PATH")
    assert not (repo / ".worktrial" / "runs").exists() or not any((repo / ".worktrial" / "runs").iterdir())
    missing_path = cli(["eval", "--suite", str(suite), "--trust", "--agent-cmd", "/no/such/agent"], cwd=repo)
    assert_clean_error(missing_path, 2, "/no/such/agent does not exist or is not executable")


def test_a_run_where_every_attempt_errs_exits_1(cli, repo: Path, write_suite) -> None:
    # The shell hides the program from the preflight; every attempt then ends in error: the run measured nothing.
    suite = write_suite([task("a"), task("b")])
    result = cli(
        [
            "eval",
            "--suite",
            str(suite),
            "--trust",
            "--format",
            "json",
            "-q",
            "--agent-cmd",
            "sh -c 'no-such-agent-zz --go'",
        ],
        cwd=repo,
    )
    assert result.exit_code == 1, result.output
    assert "every attempt ended in error, so the run measured nothing" in result.stderr
    attempt = attempts_of(json.loads(result.stdout))[0]
    assert attempt["outcome"] == "error"
    assert attempt["reason"] == "command not found: no-such-agent-zz"


def test_missing_verify_executable_is_a_failed_verify(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(verify_commands=["no-such-checker-zz --strict"])])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent", "oracle"))[0]
    assert attempt["outcome"] == "fail"
    assert attempt["reason"] == "verify failed: command not found: no-such-checker-zz"


def test_verify_timeout_is_a_failed_verify(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(verify_commands=["sleep 30"], verify_timeout_secs=1)])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent", "oracle"))[0]
    assert attempt["outcome"] == "fail"
    assert attempt["reason"] == "verify timed out after 1s: sleep 30"


def test_verify_stops_at_first_failure(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(verify_commands=["false", "touch verify-ran-on.txt"])])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent", "oracle", "--keep-worktrees"))[0]
    assert attempt["reason"] == "verify failed: false exited 1"
    assert not (Path(attempt["worktree"]) / "verify-ran-on.txt").exists()


def test_setup_commands_run_before_the_agent(cli, repo: Path, write_suite) -> None:
    ok = task("ok", setup_commands=["mkdir pre"], verify_commands=["test -f pre/seen"])
    broken = task("broken", setup_commands=["false"])
    suite = write_suite([ok, broken])
    envelope = run_json(cli, repo, suite, "--agent-cmd", "test -d pre && touch pre/seen")
    assert attempts_of(envelope, 0)[0]["outcome"] == "pass"
    failed = attempts_of(envelope, 1)[0]
    assert failed["outcome"] == "error" and failed["reason"] == "setup failed: step 1 (false) exited 1"


def test_oracle_without_solution_is_an_error(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task(solution=None), task("t2")])
    attempt = attempts_of(run_json(cli, repo, suite, "--agent", "oracle"))[0]
    assert attempt["outcome"] == "error" and attempt["reason"] == "task has no solution"


def test_command_agent_contract(cli, repo: Path, write_suite) -> None:
    script = (
        'cat > stdin.txt; printf "%s|%s|%s|%s" "$WORKTRIAL_TASK_ID" "$WORKTRIAL_ATTEMPT" '
        '"$WORKTRIAL_PROMPT" "$(pwd -P)" > env.txt; test "$WORKTRIAL_WORKTREE" -ef . && touch done.txt'
    )
    suite = write_suite([task("contract", prompt="Say hi", verify_commands=["test -f done.txt"])], attempts=2)
    envelope = run_json(cli, repo, suite, "--agent-cmd", script, "--keep-worktrees")
    for n, attempt in enumerate(attempts_of(envelope), start=1):
        worktree = Path(attempt["worktree"])
        assert attempt["outcome"] == "pass"
        assert (worktree / "stdin.txt").read_text() == "Say hi"
        assert (worktree / "env.txt").read_text() == f"contract|{n}|Say hi|{worktree.resolve()}"


def test_usage_file_is_reported(cli, repo: Path, write_suite) -> None:
    usage = {
        "input_tokens": 1200,
        "output_tokens": 300,
        "cached_input_tokens": 100,
        "cache_creation_tokens": 50,
        "reasoning_tokens": 20,
        "cost_usd": 0.0125,
        "turns": 4,
        "tool_calls": {"bash": 3, "edit": 2},
        "errors": {"tool_error": 1},
    }
    cmd = f"touch done.txt; printf '%s' '{json.dumps(usage)}' > \"$WORKTRIAL_USAGE_FILE\""
    envelope = run_json(cli, repo, write_suite([task()]), "--agent-cmd", cmd)
    attempt = attempts_of(envelope)[0]
    assert attempt["tokens"] == {
        "input": 1200,
        "output": 300,
        "cached_input": 100,
        "cache_creation": 50,
        "reasoning": 20,
    }
    assert attempt["cost_usd"] == 0.0125 and attempt["turns"] == 4 and attempt["tool_calls"] == 5
    report = envelope["report"]
    assert report["cost_usd"] == 0.0125 and report["unpriced_runs"] == 0
    assert report["cost_per_solve"] == 0.0125 and report["mean_tokens_per_attempt"] == 1500
    trace = json.loads((repo / attempt["trace"]).read_text())
    assert trace["tool_counts"] == {"bash": 3, "edit": 2} and trace["error_counts"] == {"tool_error": 1}
    assert trace["tokens"]["cached_input"] == 100 and trace["cost_usd"] == 0.0125


def test_malformed_usage_is_noted_not_fatal(cli, repo: Path, write_suite) -> None:
    cmd = "touch done.txt; echo '{not json' > \"$WORKTRIAL_USAGE_FILE\""
    envelope = run_json(cli, repo, write_suite([task()]), "--agent-cmd", cmd)
    attempt = attempts_of(envelope)[0]
    assert attempt["outcome"] == "pass" and attempt["cost_usd"] is None
    trace = json.loads((repo / attempt["trace"]).read_text())
    assert trace["notes"] == ["usage file is not valid JSON: JSONDecodeError"]
    assert envelope["report"]["unpriced_runs"] == 1 and envelope["report"]["cost_per_solve"] is None


def test_traces_hold_no_transcript_content(cli, repo: Path, write_suite) -> None:
    secret = "PROMPT-TEXT-7f3a9c"
    suite = write_suite([task(prompt=f"Please {secret}")], attempts=2)
    cmd = 'echo "model said: $WORKTRIAL_PROMPT"; cat >&2; touch done.txt'
    envelope = run_json(cli, repo, suite, "--agent-cmd", cmd)
    traces = [repo / a["trace"] for a in attempts_of(envelope)]
    assert len(traces) == 2 and all(p.exists() for p in traces)
    for path in traces:
        text = path.read_text()
        assert secret not in text
        data = json.loads(text)
        assert data["output_bytes"] > 0
        assert set(data) == {
            "task_id", "attempt", "outcome", "duration_secs", "setup_secs", "agent_secs", "verify_secs", "turns",
            "tool_calls",
            "tool_counts", "error_counts", "repeated_tool_calls", "latency_ms", "tokens", "cost_usd",
            "output_bytes", "notes", "gateway",
        }  # fmt: skip
        assert data["gateway"] is None  # counts only, and only for agents routed through the model gateway
    assert secret not in json.dumps(envelope)


def test_output_file_and_schema_commands(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = cli(
        ["eval", "--suite", str(write_suite([task()])), "--agent", "oracle", "--trust", "--format", "json",
         "--output", str(out)],
        cwd=repo,
    )  # fmt: skip
    assert result.exit_code == 0 and result.stdout == ""
    envelope = json.loads(out.read_text())
    assert envelope["schema_version"] == 1 and envelope["harness"] == "worktrial"
    for which, title in (("suite", "worktrial eval suite"), ("envelope", "worktrial result envelope")):
        schema = cli(["schema", which])
        assert schema.exit_code == 0 and title in json.loads(schema.stdout)["title"]


def test_output_to_a_device_writes_through_it(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    """--output /dev/null (or a FIFO) must be written to, never renamed over."""
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    suite = write_suite([task()])
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--output", str(fifo)], cwd=repo)
    reader.join(10)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert received and received[0].startswith("# worktrial: ")


def test_a_matrix_marks_a_row_that_measured_nothing(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("a"), task("b")])
    args = ["eval", "--suite", str(suite), "--trust", "-q", "--agent", "oracle", "--agent", "command"]
    result = cli([*args, "--agent-cmd", "sh -c 'no-such-agent-zz'"], cwd=repo)
    assert "measured nothing: every attempt ended in error" in result.stdout, result.output
    ranked = result.stdout.split("## Not ranked")[0]
    assert "oracle" in ranked and "command" not in ranked.split("|", 1)[1].split("oracle")[0]


def test_a_model_server_that_is_down_is_exit_2_before_any_attempt(cli, repo: Path, write_suite) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on once this socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    suite = write_suite([task()])
    args = ["eval", "--suite", str(suite), "--trust", "--model", "openai-compatible/local-model"]
    result = cli([*args, "--base-url", f"http://127.0.0.1:{port}/v1"], cwd=repo)
    assert_clean_error(result, 2, f"nothing answers at http://127.0.0.1:{port}/v1 (connection refused)")
    runs = repo / ".worktrial" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
