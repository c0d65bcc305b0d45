"""Logging: swallowed errors become log records; the CLI shows warnings by default and more with -v / -vv."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import task
from worktrial.isolation.copying_slot import CopyingSlot
from worktrial.isolation.workspace import open_source, resolve_commit


def test_a_failed_slot_reset_is_logged_and_the_slot_rebuilt(
    repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slot = CopyingSlot(open_source(repo), resolve_commit(repo), tmp_path / "slot")
    try:
        ws = slot.acquire()
        shutil.rmtree(ws.worktree)  # what an agent that deletes its whole worktree leaves behind
        with caplog.at_level(logging.WARNING, logger="worktrial"):
            again = slot.acquire()
        assert (again.worktree / "README.md").read_text() == "# sample repo\n" and slot.builds == 2
        warnings = [r for r in caplog.records if r.name == "worktrial.isolation.pool"]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        assert "reset failed, rebuilding it: worktree directory is gone" in warnings[0].getMessage()
    finally:
        slot.close()


def _eval(cli: Callable[..., Result], repo: Path, suite: Path, *global_flags: str) -> Result:
    args = [*global_flags, "eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "-q"]
    return cli(args, cwd=repo)


@pytest.mark.slow
def test_cli_is_quiet_by_default_and_logs_with_verbose(
    cli: Callable[..., Result], repo: Path, write_suite: Any
) -> None:
    suite = write_suite([task("t")])
    quiet = _eval(cli, repo, suite)
    assert quiet.exit_code == 0, quiet.output
    assert "worktrial: INFO" not in quiet.stderr and "worktrial: DEBUG" not in quiet.stderr
    info = _eval(cli, repo, suite, "-v")
    assert info.exit_code == 0 and len(json.loads(info.stdout)["report"]["tasks"]) == 1
    assert "worktrial: INFO: slot " in info.stderr and "[worktrial.isolation.pool]" in info.stderr
    assert "worktrial: DEBUG" not in info.stderr
    debug = _eval(cli, repo, suite, "-vv")
    assert "worktrial: DEBUG: config: " in debug.stderr
    # The run's own -v (every attempt's reason) is a different flag and still works next to the global one.
    both = cli(["-v", "eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-v"], cwd=repo)
    assert both.exit_code == 0 and "worktrial: INFO" in both.stderr
