"""What ``worktrial check`` found, as data: pure models shared by the checker and the renderers."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

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


FLAKE_RATE = 0.10
"""The flake rate ``worktrial check`` is sized to catch: a verifier wrong one time in ten."""
DETECTION = 0.80


def detection_probability(flake_rate: float, verdicts: int) -> float:
    """Chance that ``verdicts`` independent verifications of unchanged files disagree at least once."""
    if verdicts < 2:
        return 0.0
    return 1.0 - (1.0 - flake_rate) ** verdicts - flake_rate**verdicts


def verdicts_needed(flake_rate: float = FLAKE_RATE, probability: float = DETECTION) -> int:
    """Fewest verifications for which a ``flake_rate`` verifier disagrees at least once with ``probability``."""
    n = 2
    while detection_probability(flake_rate, n) < probability:
        n += 1
    return n


def flake_upper_bound(verdicts: int) -> float | None:
    """95% upper bound on the flake rate after ``verdicts`` agreeing verifications: 1 - 0.05^(1/n) ~ 3/n.

    The rule of three (Hanley & Lippman-Hand 1983): no disagreement in n tries is weak evidence when n is small.
    """
    if verdicts < 1:
        return None
    return 1.0 - math.exp(math.log(0.05) / verdicts)


def default_repeats() -> int:
    """Re-runs (besides the oracle's own verification) that catch a 10% flaky verifier with 80% per task."""
    return verdicts_needed() - 1


class CheckReport(BaseModel):
    suite_path: str
    suite_sha256: str
    suite_id: str
    repeats: int
    flake_upper_bound: float | None = Field(
        default=None, description="95% upper bound on a clean task's flake rate after repeats + 1 verdicts."
    )
    detects_10pct_flake: float | None = Field(
        default=None, description="Chance per task that a 10% flaky verifier disagrees at least once."
    )
    base_commit: str
    tasks: list[TaskCheck]
    lints: list[Lint]
    without_solution: list[str]
    problems: int
    warnings: int = Field(default=0, description="Lints shown as warnings: risks that do not fail the check.")
    ok: bool
