"""Standard errors, confidence intervals, paired comparisons and power (Miller 2024, arXiv 2411.00640).

Errors are computed across tasks, treating each task's mean over its attempts as one observation; attempts
of one task are never pooled as if independent. When tasks carry a ``cluster`` (a repository, a task family),
clusters rather than tasks are the independent units: standard errors are cluster-robust (Miller 2024 §2.2)
with G - 1 degrees of freedom for G clusters.

Most evals are small (10 to 50 tasks), so nothing here leans on the normal approximation where it is known to
fail: means use Student t quantiles, proportions use Wilson score intervals (or, for means of fractional
values, Wilson with an effective sample size, Korn & Graubard 1998), and paired comparisons use an exact
sign-flip permutation test, which for one pass/fail outcome per task is exactly McNemar's exact test. No
interval is ever zero-width: data without spread get the interval binomial reasoning gives, and a variance is
"zero" only relative to the scale of the data, never by ``== 0.0`` on a float.

Everything is pure and dependency-free (the t distribution for integer degrees of freedom has a closed form),
so reports, ``compare``, ``power`` and leaderboards share one implementation and the audit recomputes it.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

Z95 = 1.959963984540054
ALPHA = 0.05
POWER = 0.80
_NORMAL = NormalDist()
# A spread below this fraction of the data's scale is rounding noise, not variation (3 tasks that each gain 1/3
# give a float standard error of about 1e-17).
RELATIVE_TOLERANCE = 1e-9
EXACT_TASKS = 22
"""Up to this many units the sign-flip test enumerates every sign pattern (meet in the middle: 2 x 2^11 sums)."""
MONTE_CARLO_DRAWS = 20_000
MONTE_CARLO_SEED = 20_241_101
_MAX_STATES = 200_000


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


def is_negligible(spread: float, values: Sequence[float]) -> bool:
    """Whether a standard deviation or error is rounding noise relative to the data's magnitude."""
    scale = max((abs(v) for v in values), default=0.0)
    return spread <= RELATIVE_TOLERANCE * max(scale, 1e-300)


def standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean (sample variance, n-1); None with fewer than two values."""
    variance = sample_variance(values)
    if variance is None:
        return None
    se = math.sqrt(variance / len(values))
    return 0.0 if is_negligible(se, values) else se


def cluster_count(clusters: Sequence[str | None] | None) -> int | None:
    """Number of clusters; None when tasks are not clustered (no task names a cluster)."""
    if clusters is None or all(c is None for c in clusters):
        return None
    return len(set(_cluster_ids(clusters)))


def _cluster_ids(clusters: Sequence[str | None]) -> list[str]:
    """A task without a cluster is its own cluster, so a partly clustered suite is still handled soundly."""
    return [c if c is not None else f"\0task-{i}" for i, c in enumerate(clusters)]


def cluster_sums(values: Sequence[float], clusters: Sequence[str | None]) -> list[float]:
    sums: dict[str, list[float]] = {}
    for value, cluster in zip(values, _cluster_ids(clusters), strict=True):
        sums.setdefault(cluster, []).append(value)
    return [math.fsum(v) for v in sums.values()]


def cluster_robust_se(values: Sequence[float], clusters: Sequence[str | None]) -> float | None:
    """Cluster-robust standard error of the mean (Miller 2024 eq. 4, with the G/(G-1) small-sample factor).

    ``SE^2 = G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2 / n^2``; None with fewer than two clusters.
    """
    n = len(values)
    if n == 0:
        return None
    m = mean(values)
    residuals = cluster_sums([v - m for v in values], clusters)
    g = len(residuals)
    if g < 2:
        return None
    se = math.sqrt(g / (g - 1) * math.fsum(r * r for r in residuals)) / n
    return 0.0 if is_negligible(se, values) else se


def two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard-normal statistic, from erfc so it never underflows to 0 before 1e-300."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def _t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student t with integer ``df`` (Abramowitz & Stegun 26.7.3/26.7.4, a finite series)."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        total, term = 0.0, math.cos(theta)
        if df > 1:
            total = term
            for j in range(3, df - 1, 2):
                term *= c2 * (j - 1) / j
                total += term
        return 2.0 / math.pi * (theta + s * total)
    total, term = 1.0, 1.0
    for j in range(2, df - 1, 2):
        term *= c2 * (j - 1) / j
        total += term
    return s * total


@lru_cache(maxsize=4096)
def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of Student t with integer ``df`` >= 1 (bisection on the exact CDF)."""
    if not 0 < probability < 1:
        raise ValueError(f"need 0 < probability < 1 (got {probability})")
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1 (got {df})")
    if probability == 0.5:
        return 0.0
    if df > 5000:  # the series grows with df; Cornish-Fisher is exact to 1e-9 here
        z = _NORMAL.inv_cdf(probability)
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    central = abs(2 * probability - 1)
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_central(math.sqrt(df) * math.tan(mid), df) < central:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    q = math.sqrt(df) * math.tan((lo + hi) / 2)
    return q if probability > 0.5 else -q


def t95(df: int) -> float:
    """Two-sided 95% critical value of t with ``df`` degrees of freedom."""
    return t_quantile(0.975, df)


def z_for(alpha: float = ALPHA, power: float = POWER, df: int | None = None) -> float:
    """``q_{1-alpha/2} + q_{power}``: how many standard errors a true difference must span to be detected.

    Normal quantiles by default; Student t with ``df`` degrees of freedom when the design is small.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need 0 < alpha < 1 and 0 < power < 1 (got alpha={alpha}, power={power})")
    if df is None:
        return _NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)
    return t_quantile(1 - alpha / 2, df) + t_quantile(power, df)


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion; ``successes`` and ``n`` may be effective (fractional) counts."""
    if n <= 0:
        raise ValueError(f"need n > 0 (got {n})")
    p = min(1.0, max(0.0, successes / n))
    z2 = z * z
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, center - half), min(1.0, center + half))


@dataclass(frozen=True)
class Interval:
    """A 95% interval for a mean over tasks, with how it was computed (named in the envelope)."""

    stderr: float | None
    ci95: tuple[float, float] | None
    method: str | None


def rate_interval(
    values: Sequence[float], *, binary: bool, cap: int, clusters: Sequence[str | None] | None = None
) -> Interval:
    """95% interval for the mean of per-task rates in [0, 1].

    ``binary``: every value is one pass/fail (one attempt, or pass@k / pass^k at k = n), so the mean is a
    binomial proportion over tasks and the Wilson interval applies directly. Otherwise, or with clusters, the
    interval is Wilson at the effective sample size ``mean(1-mean)/SE^2`` shrunk by ``(z/t_df)^2`` (Korn &
    Graubard 1998): it follows the t interval where the data vary and stays inside [0, 1] and non-degenerate
    where they do not. ``cap`` bounds the effective sample size by the number of independent pass/fail draws
    the values summarise (tasks x attempts per k), which is what the data can at most be worth.
    """
    n = len(values)
    if n == 0:
        return Interval(None, None, None)
    m = mean(values)
    clustered = cluster_count(clusters) is not None
    if clustered:
        assert clusters is not None
        se = cluster_robust_se(values, clusters)
        df = len(set(_cluster_ids(clusters))) - 1
    else:
        se = standard_error(values)
        df = n - 1
    if binary and not clustered:
        return Interval(se, wilson(m * n, n), "wilson")
    if se is None or df < 1:
        return Interval(se, None, None)
    spread = m * (1 - m)
    n_eff = float(cap) if se == 0.0 or spread <= 0 else min(float(cap), spread / (se * se))
    n_eff *= (Z95 / t95(df)) ** 2
    method = "wilson-effective-n, cluster-robust" if clustered else "wilson-effective-n"
    return Interval(se, wilson(m * n_eff, n_eff), method)


def normal_interval(
    center: float, stderr: float | None, lo: float = 0.0, hi: float = 1.0
) -> tuple[float, float] | None:
    """The 1.96-SE interval of schema_version 1 envelopes written before this module used t and Wilson.

    Kept only so ``worktrial audit`` can recompute the numbers such an envelope published.
    """
    if stderr is None:
        return None
    return (max(lo, center - Z95 * stderr), min(hi, center + Z95 * stderr))


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p of ``k`` successes in ``n`` fair coin flips (McNemar's exact test on discordant pairs)."""
    if n == 0:
        return 1.0
    tail = min(k, n - k)
    p = 2 * sum(math.comb(n, i) for i in range(tail + 1)) / (1 << n)
    return min(1.0, p)


def _half_sums(values: Sequence[float]) -> list[float]:
    sums = [0.0]
    for v in values:
        sums = [s + v for s in sums] + [s - v for s in sums]
    return sorted(sums)


def sign_flip_p(units: Sequence[float], *, seed: int = MONTE_CARLO_SEED) -> tuple[float, str, float | None]:
    """Two-sided sign-flip permutation p-value of ``sum(units)`` (H0: each unit's difference is symmetric about 0).

    Returns ``(p, method, monte_carlo_error)``. Exact by enumeration up to ``EXACT_TASKS`` units, exact by
    dynamic programming over distinct sums when the values take few distinct sizes, otherwise Monte Carlo with
    a fixed seed (reproducible) and its standard error.
    """
    values = [abs(u) for u in units if not is_negligible(abs(u), units)]
    observed = abs(math.fsum(units))
    scale = math.fsum(values)
    if not values or observed <= RELATIVE_TOLERANCE * scale:
        return 1.0, "sign-flip permutation (exact)", None
    threshold = observed - RELATIVE_TOLERANCE * scale
    if len(values) <= EXACT_TASKS:
        left, right = _half_sums(values[: len(values) // 2]), _half_sums(values[len(values) // 2 :])
        extreme = 0
        for s in left:
            extreme += len(right) - bisect_left(right, threshold - s)
            extreme += bisect_right(right, -threshold - s)
        return extreme / (len(left) * len(right)), "sign-flip permutation (exact)", None
    exact = _dp_sign_flip(values, threshold)
    if exact is not None:
        return exact, "sign-flip permutation (exact)", None
    rng = random.Random(seed)
    hits = 0
    for _ in range(MONTE_CARLO_DRAWS):
        total = math.fsum(v if rng.random() < 0.5 else -v for v in values)
        hits += abs(total) >= threshold
    p = (hits + 1) / (MONTE_CARLO_DRAWS + 1)
    return (
        p,
        f"sign-flip permutation (Monte Carlo, {MONTE_CARLO_DRAWS} draws)",
        math.sqrt(p * (1 - p) / MONTE_CARLO_DRAWS),
    )


def _dp_sign_flip(values: Sequence[float], threshold: float) -> float | None:
    """Exact distribution of the signed sum on a 1e-9 grid; None when it has too many distinct sums."""
    grid = 1e-9 * max(values)
    steps = [round(v / grid) for v in values]
    counts: dict[int, int] = {0: 1}
    for step in steps:
        nxt: dict[int, int] = {}
        for s, c in counts.items():
            nxt[s + step] = nxt.get(s + step, 0) + c
            nxt[s - step] = nxt.get(s - step, 0) + c
        counts = nxt
        if len(counts) > _MAX_STATES:
            return None
    limit = threshold / grid - len(steps)  # absorbs the rounding of each step
    extreme = sum(c for s, c in counts.items() if abs(s) >= limit)
    return extreme / (1 << len(steps))


@dataclass(frozen=True)
class PairedDifference:
    """Mean of per-task differences (b - a) with its paired standard error, 95% CI and two-sided p-value."""

    n: int
    mean: float | None
    stderr: float | None
    ci95: tuple[float, float] | None
    p_value: float | None
    test: str | None = None
    monte_carlo_error: float | None = None
    clusters: int | None = None
    df: int | None = None


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    binary: bool = False,
    clusters: Sequence[str | None] | None = None,
) -> PairedDifference:
    """Compare two runs task by task: ``b[i] - a[i]`` for the same task i in both.

    The p-value comes from the exact sign-flip permutation test over tasks (over clusters when tasks are
    clustered), which is McNemar's exact test when every value is one pass/fail (``binary``); the CI is a t
    interval with N - 1 (or G - 1) degrees of freedom. When the differences have no spread the CI is None:
    a zero-width interval would claim a certainty that a handful of identical differences cannot give.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths (got {len(a)} and {len(b)})")
    if not a:
        return PairedDifference(0, None, None, None, None)
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    m = mean(diffs)
    g = cluster_count(clusters)
    if g is not None:
        assert clusters is not None
        units = cluster_sums(diffs, clusters)
        se, df = cluster_robust_se(diffs, clusters), g - 1
    else:
        units, se, df = diffs, standard_error(diffs), len(diffs) - 1
    if binary and g is None:
        b_only = sum(1 for d in diffs if d > 0.5)
        a_only = sum(1 for d in diffs if d < -0.5)
        p, test, mc = binomial_two_sided(b_only, b_only + a_only), "exact McNemar", None
    else:
        p, test, mc = sign_flip_p(units)
        if g is not None:
            test += f", over {g} clusters"
    interval = None
    if se is not None and se > 0 and df >= 1:
        half = t95(df) * se
        interval = (max(-1.0, m - half), min(1.0, m + half))
    return PairedDifference(len(diffs), m, se, interval, p, test, mc, g, df if df >= 1 else None)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm step-down adjusted p-values (family-wise error control); None entries are left out of the family."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(indexed)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


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
    variance: float | None, tasks: int, alpha: float = ALPHA, power: float = POWER, df: int | None = None
) -> float | None:
    """Smallest true difference detected with the given power, for a per-task difference ``variance``.

    ``df`` (tasks - 1, or clusters - 1) switches to t quantiles, which small designs need.
    """
    if variance is None or tasks < 1 or (df is not None and df < 1):
        return None
    return z_for(alpha, power, df) * math.sqrt(variance / tasks)


def required_tasks(variance: float, delta: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Tasks needed to detect a true difference ``delta`` with the given power, with t quantiles at N - 1 df.

    Starts from Miller's normal sample-size formula and grows N until the t-based requirement holds too.
    """
    if delta <= 0:
        raise ValueError(f"delta must be positive (got {delta})")
    # A tiny epsilon keeps an exact integer result (e.g. 969.0000001 from rounding) from rounding up.
    n = max(2, math.ceil(z_for(alpha, power) ** 2 * variance / delta**2 - 1e-9))
    while n < 10**7 and z_for(alpha, power, n - 1) ** 2 * variance / delta**2 > n + 1e-9:
        n += 1
    return n


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
    if tasks < 2:
        return None
    budget = tasks * delta**2 / z_for(alpha, power, tasks - 1) ** 2 - omega2
    noise = sigma2_a + sigma2_b
    if noise == 0:
        return 1 if budget >= 0 else None
    if budget <= 0:
        return None
    return max(1, math.ceil(noise / budget - 1e-9))
