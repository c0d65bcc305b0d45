"""Standard errors, confidence intervals, paired comparisons and power (Miller 2024, arXiv 2411.00640).

Errors are computed across tasks, treating each task's mean over its attempts as one observation; attempts
of one task are never pooled as if independent. Two runs on the same tasks are compared through per-task
paired differences, whose spread already contains both the across-task variation and the attempt noise, so
the paired standard error is usually much smaller than the two unpaired ones combined.

Power follows the same model: the variance of one task's paired difference is
``omega2 + sigma2_a / k_a + sigma2_b / k_b``, where ``omega2`` is the across-task variance of the true
difference and ``sigma2_x / k_x`` is the within-task (attempt) noise of run x averaged over k_x attempts.
Every function here is pure, so reports, ``compare``, ``power`` and leaderboards share one implementation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

Z95 = 1.959963984540054
ALPHA = 0.05
POWER = 0.80
_NORMAL = NormalDist()


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def sample_variance(values: Sequence[float]) -> float | None:
    """Unbiased sample variance (n-1); None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    m = mean(values)
    return math.fsum((v - m) ** 2 for v in values) / (n - 1)


def standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean (sample variance, n-1); None with fewer than two values."""
    variance = sample_variance(values)
    return None if variance is None else math.sqrt(variance / len(values))


def ci95(center: float, stderr: float | None, lo: float = 0.0, hi: float = 1.0) -> tuple[float, float] | None:
    """Normal-approximation 95% interval, clipped to the metric's range."""
    if stderr is None:
        return None
    return (max(lo, center - Z95 * stderr), min(hi, center + Z95 * stderr))


def two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard-normal test statistic."""
    return 2.0 * (1.0 - _NORMAL.cdf(abs(z)))


def z_for(alpha: float = ALPHA, power: float = POWER) -> float:
    """``z_{1-alpha/2} + z_{power}``: how many standard errors a true difference must span to be detected."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need 0 < alpha < 1 and 0 < power < 1 (got alpha={alpha}, power={power})")
    return _NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of per-task differences (b - a) with its paired standard error, 95% CI and two-sided p-value."""

    n: int
    mean: float | None
    stderr: float | None
    ci95: tuple[float, float] | None
    p_value: float | None


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """Compare two runs task by task: ``b[i] - a[i]`` for the same task i in both.

    The p-value uses the normal approximation, as Miller recommends for evals of realistic size; with a
    handful of tasks it is optimistic, which the width of the CI makes visible. When every task moved by
    exactly the same amount the standard error is 0: p is 1 for no change and 0 otherwise.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths (got {len(a)} and {len(b)})")
    if not a:
        return PairedDifference(0, None, None, None, None)
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    m = mean(diffs)
    se = standard_error(diffs)
    if se is None:
        return PairedDifference(len(diffs), m, None, None, None)
    if se == 0.0:
        return PairedDifference(len(diffs), m, se, (m, m), 1.0 if m == 0.0 else 0.0)
    p = two_sided_p(m / se)
    return PairedDifference(len(diffs), m, se, ci95(m, se, lo=-1.0, hi=1.0), p)


def within_task_variance(passed: int, total: int) -> float | None:
    """Unbiased variance of one task's pass/fail outcomes across its attempts; None with one attempt."""
    if total < 2:
        return None
    return passed * (total - passed) / (total * (total - 1))


def mean_within_variance(counts: Sequence[tuple[int, int]]) -> float | None:
    """Average within-task variance over tasks given ``(passed, total)``; tasks with one attempt are skipped."""
    values = [v for v in (within_task_variance(c, n) for c, n in counts) if v is not None]
    return mean(values) if values else None


def between_task_variance(rates: Sequence[float], within: float | None, attempts: float) -> float | None:
    """Across-task variance of the *true* per-task values, removing the attempt noise ``within / attempts``.

    The observed variance of per-task means overstates it by the noise of averaging only ``attempts``
    draws; the estimate is clipped at 0 because a variance cannot be negative.
    """
    observed = sample_variance(rates)
    if observed is None:
        return None
    return max(0.0, observed - (within or 0.0) / attempts)


def difference_variance(omega2: float, sigma2_a: float, sigma2_b: float, k_a: float, k_b: float) -> float:
    """Variance of one task's paired difference with ``k_a`` and ``k_b`` attempts per task."""
    if omega2 < 0 or sigma2_a < 0 or sigma2_b < 0:
        raise ValueError("variances must be non-negative")
    if k_a <= 0 or k_b <= 0:
        raise ValueError("attempts must be positive")
    return omega2 + sigma2_a / k_a + sigma2_b / k_b


def minimum_detectable_difference(
    variance: float | None, tasks: int, alpha: float = ALPHA, power: float = POWER
) -> float | None:
    """Smallest true difference detected with the given power, for a per-task difference ``variance``."""
    if variance is None or tasks < 1:
        return None
    return z_for(alpha, power) * math.sqrt(variance / tasks)


def required_tasks(variance: float, delta: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Tasks needed to detect a true difference ``delta`` with the given power (Miller's sample-size formula)."""
    if delta <= 0:
        raise ValueError(f"delta must be positive (got {delta})")
    # A tiny epsilon keeps an exact integer result (e.g. 969.0000001 from rounding) from rounding up.
    return max(1, math.ceil(z_for(alpha, power) ** 2 * variance / delta**2 - 1e-9))


def required_attempts(
    omega2: float,
    sigma2_a: float,
    sigma2_b: float,
    tasks: int,
    delta: float,
    alpha: float = ALPHA,
    power: float = POWER,
) -> int | None:
    """Attempts per task (the same for both runs) needed to detect ``delta`` with ``tasks`` tasks.

    None when no number of attempts suffices: attempts only shrink the within-task noise, never ``omega2``,
    so too few tasks cannot be rescued by repetition.
    """
    if delta <= 0 or tasks < 1:
        raise ValueError("delta and tasks must be positive")
    budget = tasks * delta**2 / z_for(alpha, power) ** 2 - omega2
    noise = sigma2_a + sigma2_b
    if noise == 0:
        return 1 if budget >= 0 else None
    if budget <= 0:
        return None
    return max(1, math.ceil(noise / budget - 1e-9))
