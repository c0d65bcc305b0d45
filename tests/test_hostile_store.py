"""Hostile agents against the run store: a pass is earned only by verify commands, whatever the agent writes.

The agent finds the run store the way a real one could: its private repository borrows the workspace's objects,
so ``objects/info/alternates`` names the user's repository, and ``.worktrial/runs/`` is next to it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task
from tests.hostile_support import PROJECT, run_worktrial

FIND_STORE = (
    'alt="$(cat "$(git rev-parse --path-format=absolute --git-common-dir)/objects/info/alternates")"\n'
    'repo="$(dirname "$(dirname "$alt")")"\n'
)
FORGE = FIND_STORE + (
    'for f in "$repo"/.worktrial/runs/*/attempts.jsonl; do\n'
    '  rec=\'"task_id":"t","outcome":"pass","claimed":true,"verified":true,'
    '"duration_secs":1,"agent_secs":1,"verify_secs":0\'\n'
    # A plain record for this very attempt, before the harness writes the real one (first line used to win) ...
    '  echo "{$rec,\\"attempt\\":$WORKTRIAL_ATTEMPT}" >> "$f"\n'
    # ... one dressed up as signed, and a hundred attempts past the planned range.
    '  echo "{\\"sig\\":\\"$(printf %064d 0)\\",\\"record\\":{$rec,\\"attempt\\":$WORKTRIAL_ATTEMPT}}" >> "$f"\n'
    '  n=1; while [ $n -le 100 ]; do echo "{$rec,\\"attempt\\":$n}" >> "$f"; n=$((n+1)); done\n'
    "done\n"
)


def _forging_run(repo: Path, write_suite, tmp_path: Path, attempts: int = 3, sandbox: str = "off") -> dict[str, Any]:
    agent = tmp_path / "forge.sh"
    agent.write_text(FORGE)
    suite = write_suite([task("t", verify_commands=["false"])], attempts=attempts)
    result = run_worktrial(
        # Unsandboxed by default: the sandbox hides the run store; these are the guarantees that hold without it.
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--format", "json", "-q", "--sandbox", sandbox],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1"},
    )
    assert result.returncode == 0, result.stderr
    envelope: dict[str, Any] = json.loads(result.stdout)
    envelope["_suite"] = str(suite)
    return envelope


@pytest.mark.slow
def test_forged_records_never_count(repo: Path, write_suite, tmp_path: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path)
    run_id = envelope["run"]["id"]
    run_dir = repo / ".worktrial" / "runs" / run_id
    assert (run_dir / "attempts.jsonl").read_text().count("\n") > 300  # the forgeries are really there
    assert envelope["report"]["overall"]["passed_runs"] == 0

    runs = run_worktrial(["runs"], cwd=repo)
    (row,) = [line for line in runs.stdout.splitlines() if line.startswith(run_id)]
    assert "3/3" in row and row.split()[-1] == "0.000"

    # Rebuilt from the records alone (as after a crash): still no pass, still three attempts.
    (run_dir / "envelope.json").unlink()
    report = run_worktrial(["report", run_id, "--format", "json"], cwd=repo)
    assert report.returncode == 0, report.stderr
    rebuilt = json.loads(report.stdout)
    assert rebuilt["report"]["overall"]["passed_runs"] == 0
    assert rebuilt["report"]["overall"]["total_runs"] == 3


@pytest.mark.slow
@pytest.mark.sandbox
def test_forging_agent_in_the_sandbox_never_reaches_the_store(repo: Path, write_suite, tmp_path: Path) -> None:
    """The same forger with --sandbox on: the run store is hidden, so not one foreign line lands in it."""
    envelope = _forging_run(repo, write_suite, tmp_path, sandbox="on")
    assert envelope["run"]["sandbox"]["kind"] == "bubblewrap"
    lines = (repo / ".worktrial" / "runs" / envelope["run"]["id"] / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all('"sig"' in line for line in lines), lines
    assert envelope["report"]["overall"]["passed_runs"] == 0


def _signed_attempt(line: str) -> int | None:
    """The attempt number of a signed record line, None for anything else (plain forgeries, junk)."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or "sig" not in doc or not isinstance(doc.get("record"), dict):
        return None
    attempt = doc["record"].get("attempt")
    return attempt if isinstance(attempt, int) else None


@pytest.mark.slow
def test_resume_counts_only_the_harness_records(repo: Path, write_suite, tmp_path: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    # Drop the harness's own record of attempt 3 (as if the run died before writing it): resume reruns it.
    lines = (run_dir / "attempts.jsonl").read_text().splitlines(keepends=True)
    forged_sig = "0" * 64  # what FORGE signs with; "0000" anywhere in the line also matched real durations
    real_third = [i for i, line in enumerate(lines) if _signed_attempt(line) == 3 and forged_sig not in line]
    del lines[real_third[-1]]
    (run_dir / "attempts.jsonl").write_text("".join(lines))
    (run_dir / "envelope.json").unlink()
    result = run_worktrial(["resume", envelope["run"]["id"], "--format", "json"], cwd=repo)
    assert result.returncode == 0, result.stderr
    resumed = json.loads(result.stdout)
    attempts = [a for t in resumed["report"]["tasks"] for a in t["attempts"]]
    assert sorted(a["attempt"] for a in attempts) == [1, 2, 3]
    assert resumed["report"]["overall"]["passed_runs"] == 0
    assert resumed["report"]["overall"]["pass_at_k"] == 0.0
    assert "2 already done" in result.stderr

    audit = run_worktrial(["audit", str(run_dir / "envelope.json"), "--suite", envelope["_suite"]], cwd=repo)
    assert audit.returncode == 0, audit.stdout
    assert "the harness did not write" in audit.stdout  # the forgeries are reported, not counted


@pytest.mark.slow
def test_edited_run_json_is_refused(repo: Path, write_suite, tmp_path: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path, attempts=1)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    meta = json.loads((run_dir / "run.json").read_text())
    meta["config"]["attempts"] = 100
    meta["work_root"] = str(tmp_path / "precious")
    (tmp_path / "precious").mkdir()
    (run_dir / "run.json").write_text(json.dumps(meta))
    # The envelope the harness signed still reports the run as it was ...
    report = run_worktrial(["report", envelope["run"]["id"], "--format", "json"], cwd=repo)
    assert report.returncode == 0 and json.loads(report.stdout)["run"]["attempts"] == 1
    # ... and nothing acts on the edited run.json: one line, exit 2, the named directory untouched.
    (run_dir / "envelope.json").unlink()
    for args in (["resume", envelope["run"]["id"]], ["report", envelope["run"]["id"]]):
        result = run_worktrial(args, cwd=repo)
        assert result.returncode == 2, result.stderr
        assert "changed outside worktrial" in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "precious").is_dir()


@pytest.mark.slow
def test_audit_catches_an_envelope_that_differs_from_the_store(repo: Path, write_suite, tmp_path: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path, attempts=2)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    published = json.loads((run_dir / "envelope.json").read_text())
    extra = dict(published["report"]["tasks"][0]["attempts"][0], attempt=7)
    published["report"]["tasks"][0]["attempts"].append(extra)
    forged = tmp_path / "forged.json"
    (run_dir / "envelope.json").write_text(json.dumps(published))
    audit = run_worktrial(["audit", str(run_dir / "envelope.json"), "--suite", envelope["_suite"]], cwd=repo)
    assert audit.returncode == 1
    assert "outside the run's 1..2" in audit.stdout
    assert "not in the run store" in audit.stdout
    assert not forged.exists()


LOCK_HOLDER = """
import sys, time
from pathlib import Path
from worktrial.state.store import RunStore
store = RunStore.open(Path(sys.argv[1]), sys.argv[2], writer=True)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_one_writer_per_run(repo: Path, write_suite, tmp_path: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path, attempts=1)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(repo), envelope["run"]["id"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(Path(PROJECT) / "src"), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        from worktrial.errors import BadInputError
        from worktrial.state.store import RunStore

        try:
            RunStore.open(repo, envelope["run"]["id"], writer=True)
        except BadInputError as exc:
            assert f"pid {holder.pid}" in str(exc)
        else:
            raise AssertionError("a second writer got the run")
        second = run_worktrial(["resume", envelope["run"]["id"]], cwd=repo)
        assert second.returncode == 2 and f"pid {holder.pid}" in second.stderr, second.stderr
    finally:
        holder.kill()
        holder.wait()
    RunStore.open(repo, envelope["run"]["id"], writer=True).close()  # free again once the holder is gone


@pytest.mark.slow
def test_resume_rechecks_trust(repo: Path, write_suite, tmp_path: Path, isolated_state: Path) -> None:
    envelope = _forging_run(repo, write_suite, tmp_path, attempts=1)
    (isolated_state / "config" / "trust.json").unlink()  # e.g. another machine, or trust revoked
    result = run_worktrial(["resume", envelope["run"]["id"]], cwd=repo)
    assert result.returncode == 2
    assert "has not been trusted" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_resume_of_an_unsigned_run_leaves_a_foreign_work_root_alone(
    repo: Path, write_suite, tmp_path: Path, isolated_state: Path
) -> None:
    """A run stored before signing (no key) is still resumable, but its work_root is checked before removal."""
    envelope = _forging_run(repo, write_suite, tmp_path, attempts=2)
    run_id = envelope["run"]["id"]
    run_dir = repo / ".worktrial" / "runs" / run_id
    (isolated_state / "config" / "run-keys" / f"{run_id}.key").unlink()
    precious = tmp_path / "Documents"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work\n")
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(signed=False, work_root=str(precious))
    (run_dir / "run.json").write_text(json.dumps(meta))
    lines = [
        json.loads(line)["record"]
        for line in (run_dir / "attempts.jsonl").read_text().splitlines()
        if line.startswith('{"sig"') and "0000000000" not in line
    ]
    (run_dir / "attempts.jsonl").write_text(json.dumps(lines[0]) + "\n")
    result = run_worktrial(["resume", run_id, "--format", "json"], cwd=repo)
    assert result.returncode == 0, result.stderr
    assert (precious / "thesis.txt").read_text() == "years of work\n"
    assert "leaving " + str(precious) + " alone" in result.stderr
    assert json.loads(result.stdout)["report"]["overall"]["total_runs"] == 2


@pytest.mark.slow
def test_absurd_attempts_is_one_line(repo: Path, write_suite) -> None:
    suite = write_suite([task("t")])
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent", "nop", "--attempts", "1000000000", "--trust"], cwd=repo
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "worktrial: error: --attempts must be between 1 and 10000 per task (got 1000000000)"
    )
