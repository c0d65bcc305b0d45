"""Sample sizes for the paired sign-flip test ``compare`` runs: tasks, attempts and the detectable difference.

The variance of one task's paired difference is ``omega2 + sigma2_a / K + sigma2_b / K`` (Miller 2024): ``omega2``
is how much the true difference varies across tasks, ``sigma2`` the attempt-to-attempt noise of one run, ``K``
the attempts per task. Miller's normal formula ``N = (z_{1-a/2} + z_power)^2 v / delta^2`` assumes a test whose
null spread is the variance ``v``. The sign-flip test (and McNemar's, its pass/fail case) is scaled instead by
the second moment of the differences, ``v + delta^2``, and its statistic moves in steps of ``2/K`` (differences of
pass rates over K attempts), so an exact test on N tasks rejects less often than the normal formula promises:
it asked for 10-20% too few tasks. The plan here follows the test actually used:

    sqrt(N) delta - (1/K) / sqrt(N) >= t_{1-a/2, N-1} sqrt(v + delta^2) + t_{power, N-1} sqrt(v)

(Connor's 1987 McNemar sample size with t quantiles and a half-step continuity correction), and no plan has
fewer than the tasks whose 2^N sign patterns can reach p < alpha at all (6 at alpha = 0.05).
``benchmarks/calibration.py`` checks the power this delivers by simulating the exact test.
"""

from __future__ import annotations

import math

from worktrial.analysis.distributions import t_quantile
from worktrial.analysis.stats import ALPHA, POWER

_MAX_TASKS = 10**7
_MAX_ATTEMPTS = 10**6


def difference_variance(omega2: float, sigma2_a: float, sigma2_b: float, k_a: float, k_b: float) -> float:
    """Variance of one task's paired difference with ``k_a`` and ``k_b`` attempts per task."""
    if omega2 < 0 or sigma2_a < 0 or sigma2_b < 0:
        raise ValueError("variances must be non-negative")
    if k_a <= 0 or k_b <= 0:
        raise ValueError("attempts must be positive")
    return omega2 + sigma2_a / k_a + sigma2_b / k_b


def fewest_tasks(alpha: float = ALPHA) -> int:
    """The fewest tasks whose exact sign-flip test can reject at ``alpha``: ``2 / 2^N < alpha``."""
    return max(2, math.floor(1 + math.log2(1 / alpha)) + 1)


def _margin(variance: float, delta: float, tasks: int, alpha: float, power: float, step: float) -> float:
    """Left minus right side of the inequality above (>= 0: ``tasks`` detect ``delta`` with ``power``)."""
    df = tasks - 1
    needed = t_quantile(1 - alpha / 2, df) * math.sqrt(variance + delta * delta)
    needed += t_quantile(power, df) * math.sqrt(variance)
    return math.sqrt(tasks) * delta - step / math.sqrt(tasks) - needed


def required_tasks(
    variance: float, delta: float, alpha: float = ALPHA, power: float = POWER, *, attempts: int | None = None
) -> int:
    """Tasks needed for the exact paired test to detect a true difference ``delta`` with ``power``.

    ``attempts`` (per task, in both runs) sets the continuity correction; None leaves it out.
    """
    if delta <= 0:
        raise ValueError(f"delta must be positive (got {delta})")
    if variance < 0:
        raise ValueError("variance must be non-negative")
    step = 1.0 / attempts if attempts else 0.0
    lo = fewest_tasks(alpha)
    if _margin(variance, delta, lo, alpha, power, step) >= 0:
        return lo
    hi = lo
    while _margin(variance, delta, hi, alpha, power, step) < 0:
        if hi >= _MAX_TASKS:
            return _MAX_TASKS
        lo, hi = hi, min(_MAX_TASKS, hi * 2)
    while hi - lo > 1:  # the margin grows with N from here on: bisect for the first N that meets it
        mid = (lo + hi) // 2
        if _margin(variance, delta, mid, alpha, power, step) >= 0:
            hi = mid
        else:
            lo = mid
    return hi


def minimum_detectable_difference(
    variance: float | None,
    tasks: int,
    alpha: float = ALPHA,
    power: float = POWER,
    *,
    attempts: int | None = None,
    df: float | None = None,
    units: int | None = None,
) -> float | None:
    """Smallest true difference (at most 1) that ``tasks`` tasks detect with ``power``; None when none is.

    With clusters, ``units`` is their number (the test flips whole clusters, so it needs ``fewest_tasks`` of
    them) and ``df`` their degrees of freedom, in place of ``tasks - 1``.
    """
    if variance is None or min(tasks, units or tasks) < fewest_tasks(alpha) or (df is not None and df <= 0):
        return None
    step = 1.0 / attempts if attempts else 0.0
    freedom = float(tasks - 1) if df is None else df
    q_alpha, q_power = t_quantile(1 - alpha / 2, freedom), t_quantile(power, freedom)

    def margin(delta: float) -> float:
        needed = q_alpha * math.sqrt(variance + delta * delta) + q_power * math.sqrt(variance)
        return math.sqrt(tasks) * delta - step / math.sqrt(tasks) - needed

    if margin(1.0) < 0:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if margin(mid) >= 0:
            hi = mid
        else:
            lo = mid
    return hi


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
    if tasks < fewest_tasks(alpha):
        return None

    def enough(k: int) -> bool:
        variance = difference_variance(omega2, sigma2_a, sigma2_b, k, k)
        return _margin(variance, delta, tasks, alpha, power, 1.0 / k) >= 0

    if sigma2_a + sigma2_b == 0:
        return 1 if _margin(omega2, delta, tasks, alpha, power, 0.0) >= 0 else None
    if not enough(_MAX_ATTEMPTS):
        return None
    lo, hi = 0, 1
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi
