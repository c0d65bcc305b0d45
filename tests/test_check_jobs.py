"""``worktrial check --jobs N`` and its progress: eval's per-attempt lines (a live bar with an ETA on a terminal)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import task
from tests.fakes import share_with_sandbox


def test_check_runs_with_jobs_and_shows_progress(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    share_with_sandbox(shared)
    counter = shared / "setups.txt"
    environment = {"setup": [{"sh": f"echo x >> {counter}"}]}
    suite = write_suite([task(f"t{i}") for i in range(4)], environment=environment)
    result = cli(["check", str(suite), "--trust", "--jobs", "1", "--repeats", "1"], cwd=repo)
    assert result.exit_code == 1, result.output  # only the lint of the counter's absolute path
    assert "outside the worktree" in result.stdout
    assert "oracle does not pass" not in result.stdout and "passes with no change" not in result.stdout
    # One slot for the oracle's run, one for the nop's, one for the re-runs of the verifiers.
    assert len(counter.read_text().splitlines()) == 3
    lines = result.stderr.splitlines()
    assert sum(1 for line in lines if line.startswith("[4/4]")) == 2, result.stderr  # the oracle's and the nop's
    assert any("pass t0 #1" in line for line in lines) and any("fail t3 #1" in line for line in lines)
