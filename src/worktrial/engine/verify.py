"""Run a task's verify commands in a worktree: in order, each with its own bound, stop at the first failure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from worktrial.isolation.proc import DEFAULT_TAIL_BYTES, ProcessScope, ProcResult, run_command
from worktrial.model.commands import display
from worktrial.model.suite import Task


@dataclass(frozen=True)
class VerifyResult:
    passed: bool
    reason: str | None
    secs: float
    runs: tuple[ProcResult, ...] = ()
    """Each command that ran, in order (the last one is the failure when ``passed`` is False)."""


def run_verify(
    task: Task,
    worktree: Path,
    env: Mapping[str, str],
    scope: ProcessScope | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
) -> VerifyResult:
    start = time.monotonic()
    runs: list[ProcResult] = []
    for command in task.verify_commands:
        result = run_command(
            command, cwd=worktree, env=env, timeout=task.verify_timeout_secs, scope=scope, tail_bytes=tail_bytes
        )
        runs.append(result)
        if not result.ok:
            if result.timed_out:
                why = f"verify timed out after {task.verify_timeout_secs}s: {display(command)}"
            else:
                why = f"verify failed: {result.describe_failure(display(command))}"
            return VerifyResult(False, why, time.monotonic() - start, tuple(runs))
    return VerifyResult(True, None, time.monotonic() - start, tuple(runs))
