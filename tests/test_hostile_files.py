"""Hostile usage files: a FIFO, a link to /dev/zero, absurd numbers or deep nesting never hang, crash or forge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from tests.hostile_support import run_worktrial

USAGE_ATTACKS = {
    "fifo": 'mkfifo "$WORKTRIAL_USAGE_FILE"',
    "dev-zero": 'ln -s /dev/zero "$WORKTRIAL_USAGE_FILE"',
    "symlink-to-user-file": 'ln -s "$PLANTED_TARGET_PATH" "$WORKTRIAL_USAGE_FILE"',
    "huge": 'head -c 3000000 /dev/zero | tr "\\0" " " > "$WORKTRIAL_USAGE_FILE"',
    "overflowing-cost": 'echo \'{"cost_usd": 1e308, "input_tokens": 1}\' > "$WORKTRIAL_USAGE_FILE"',
    "nested": "python3 -c \"print('[' * 100000 + ']' * 100000)\" > \"$WORKTRIAL_USAGE_FILE\"",
}


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["on", "off"])
@pytest.mark.parametrize("attack", sorted(USAGE_ATTACKS))
def test_usage_file_attacks(repo: Path, write_suite, tmp_path: Path, attack: str, sandbox: str) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"input_tokens": 424242}')
    agent = tmp_path / "agent.sh"
    agent.write_text(f"touch done.txt\n{USAGE_ATTACKS[attack]}\n")
    suite = write_suite([task("t", verify_commands=["test -f done.txt"])], attempts=2)
    result = run_worktrial(
        [
            "eval",
            "--suite",
            str(suite),
            "--agent-cmd",
            f"sh {agent}",
            "--format",
            "json",
            "-q",
            "--sandbox",
            sandbox,
            "--pass-env",
            "PLANTED_TARGET_PATH",
        ],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1", "PLANTED_TARGET_PATH": str(secret)},
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    attempts = envelope["report"]["tasks"][0]["attempts"]
    # The agent's own files never turn its work into an infrastructure error, and nothing it reported counts.
    assert [a["outcome"] for a in attempts] == ["pass", "pass"]
    assert all(a["cost_usd"] is None and a["error_category"] is None for a in attempts)
    assert all(a["tokens"]["input"] in (None, 1) for a in attempts)
    trace = json.loads((repo / attempts[0]["trace"]).read_text())
    if attack != "overflowing-cost":
        assert trace["notes"], "the ignored usage file is noted in the trace"
    report = run_worktrial(["report", envelope["run"]["id"]], cwd=repo)
    assert report.returncode == 0, report.stderr


@pytest.mark.slow
def test_trace_names_never_collide(repo: Path, write_suite) -> None:
    """Task ids that sanitise to the same name still get one trace file each, so an honest run audits clean."""
    tasks = [task(task_id) for task_id in ("a/b", "a_b", "a b")]
    suite = write_suite(tasks, attempts=1)
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--format", "json", "-q", "--trust"], cwd=repo
    )
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    traces = {a["trace"] for t in envelope["report"]["tasks"] for a in t["attempts"]}
    assert len(traces) == 3
    stored = repo / ".worktrial" / "runs" / envelope["run"]["id"] / "envelope.json"
    audit = run_worktrial(["audit", str(stored), "--suite", str(suite)], cwd=repo)
    assert audit.returncode == 0, audit.stdout


@pytest.mark.slow
def test_planted_secrets_never_reach_stored_artefacts(repo: Path, write_suite, tmp_path: Path) -> None:
    """A key the agent makes its shell print, or uses as a tool or error name, is redacted everywhere it is stored."""
    secret = "sk-test-" + "q7Zx" * 8
    agent = tmp_path / "agent.sh"
    agent.write_text(
        'printf \'{"tool_calls": {"%s": 1}, "errors": {"%s": 2}}\' "$OPENAI_API_KEY" "$MY_SERVICE_TOKEN"'
        ' > "$WORKTRIAL_USAGE_FILE"\n'
        '"$OPENAI_API_KEY"\n'  # exit 127: "sh: 1: sk-...: not found" becomes the attempt's reason
    )
    suite = write_suite([task("t")], attempts=1)
    passed = ["--pass-env", "OPENAI_API_KEY", "--pass-env", "MY_SERVICE_TOKEN"]
    result = run_worktrial(
        # Passed explicitly: without --pass-env a command agent never sees the caller's keys at all.
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--format", "json", "-v", *passed],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1", "OPENAI_API_KEY": secret, "MY_SERVICE_TOKEN": secret[::-1]},
    )
    assert result.returncode in (0, 1), result.stderr  # 1: every attempt ended in error (the program is missing)
    envelope = json.loads(result.stdout)
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] != "pass" and "[REDACTED]" in (attempt["reason"] or "")
    report = run_worktrial(["report", envelope["run"]["id"]], cwd=repo)
    texts = [result.stdout, result.stderr, report.stdout]
    texts += [p.read_text(errors="replace") for p in (repo / ".worktrial").rglob("*") if p.is_file()]
    for text in texts:
        assert secret not in text and secret[::-1] not in text


@pytest.mark.slow
def test_fifos_at_the_harness_files_never_hang_it(repo: Path, write_suite, tmp_path: Path) -> None:
    """FIFOs planted where the next trace and the attempt log live: the run ends, with the honest result."""
    agent = tmp_path / "agent.sh"
    agent.write_text(
        'alt="$(cat "$(git rev-parse --path-format=absolute --git-common-dir)/objects/info/alternates")"\n'
        'repo="$(dirname "$(dirname "$alt")")"\n'
        'for d in "$repo"/.worktrial/eval/traces/*/; do for n in 1 2 3; do\n'
        '  for f in "$d"*; do mkfifo "${f%-*}-$n.json" 2>/dev/null; done; done; done\n'
        'for f in "$repo"/.worktrial/runs/*/attempts.jsonl; do rm -f "$f"; mkfifo "$f"; done\n'
        "touch done.txt\n"
    )
    suite = write_suite([task("t")], attempts=3)
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--format", "json", "-q", "--jobs", "1"],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1"},
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert [a["outcome"] for a in envelope["report"]["tasks"][0]["attempts"]] == ["pass"] * 3
    report = run_worktrial(["report", envelope["run"]["id"], "--format", "json"], cwd=repo, timeout=60)
    assert report.returncode == 0 and json.loads(report.stdout)["report"]["overall"]["passed_runs"] == 3
