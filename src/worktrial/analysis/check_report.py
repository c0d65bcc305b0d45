"""What ``worktrial check`` found, as data: pure models shared by the checker and the renderers."""

from __future__ import annotations

from pydantic import BaseModel

from worktrial.analysis.lint import Lint
from worktrial.model.records import Outcome


class TaskCheck(BaseModel):
    """What the three runs found for one task; ``problems`` empty means the task is sound."""

    task_id: str
    has_solution: bool
    oracle: Outcome | None
    oracle_reason: str | None
    nop: Outcome
    nop_reason: str | None
    verify_runs: int
    verify_passes: int | None
    problems: list[str]
    lints: int


class CheckReport(BaseModel):
    suite_path: str
    suite_sha256: str
    suite_id: str
    repeats: int
    base_commit: str
    tasks: list[TaskCheck]
    lints: list[Lint]
    without_solution: list[str]
    problems: int
    ok: bool
