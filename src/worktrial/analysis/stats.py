"""Standard errors, confidence intervals and paired comparisons (Miller 2024, arXiv 2411.00640).

Errors are computed across tasks, treating each task's mean over its attempts as one observation; attempts
of one task are never pooled as if independent. When tasks carry a ``cluster`` (a repository, a task family),
clusters rather than tasks are the independent units.

Most evals are small (5 to 50 tasks) and their rates sit near 0 or 1, so nothing here leans on the normal
approximation where it is known to fail:

- a rate that is one pass/fail per task gets the exact Clopper–Pearson interval over tasks;
- a mean of fractional per-task values gets Clopper–Pearson at the data's effective sample size, shrunk for the
  t distribution (Korn & Graubard 1998); when the values do not vary it falls back to the binomial interval over
  *tasks* (the most a mean of values in [0, 1] can vary), never to tasks x attempts;
- with clusters the standard error is CR2 (Bell & McCaffrey 2002) with the Imbens & Kolesár (2016) degrees of
  freedom, which stays honest when one cluster holds many of the tasks;
- paired comparisons use the exact sign-flip permutation test (McNemar's exact test on pass/fail data) and the
  interval that inverts that same test (``worktrial.analysis.signflip``), so the two never disagree.

No interval is ever zero-width, and a variance is "zero" only relative to the scale of the data, never by
``== 0.0`` on a float. Everything is pure Python, so reports, ``compare``, ``power`` and leaderboards share one
implementation and the audit recomputes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from worktrial.analysis.distributions import NORMAL, clopper_pearson
from worktrial.analysis.distributions import t95 as t95
from worktrial.analysis.distributions import t_quantile as t_quantile
from worktrial.analysis.signflip import RELATIVE_TOLERANCE, sign_flip
from worktrial.analysis.signflip import sign_flip_p as sign_flip_p

Z95 = 1.959963984540054
ALPHA = 0.05
POWER = 0.80
IntervalRule = Literal["current", "wilson", "normal"]
"""How a report's intervals are computed: now; as envelopes with ``interval`` "wilson*" did; or 1.96 SE (none)."""


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


def cluster_robust(values: Sequence[float], clusters: Sequence[str | None]) -> tuple[float, float] | None:
    """CR2 standard error of the mean over clusters, and its Imbens–Kolesár degrees of freedom.

    For a mean the CR2 bias correction has a closed form: cluster g's residual sum is scaled by
    ``1 / sqrt(1 - n_g / N)``, so one large cluster is not trusted as if it were many small ones. The degrees of
    freedom ``N^2 / (sum n_g^2 + ((sum w_g)^2 - sum w_g^2) / N^2)`` with ``w_g = n_g^2 / (1 - n_g / N)`` are the
    Satterthwaite approximation for that estimator; equal clusters give exactly G - 1, and all-singleton clusters
    give the ordinary standard error with N - 1. None with fewer than two clusters.
    """
    n = len(values)
    if n == 0:
        return None
    m = mean(values)
    groups: dict[str, list[float]] = {}
    for value, cluster in zip(values, _cluster_ids(clusters), strict=True):
        groups.setdefault(cluster, []).append(value - m)
    if len(groups) < 2:
        return None
    sizes = [len(r) for r in groups.values()]
    variance = math.fsum(math.fsum(r) ** 2 / (1 - len(r) / n) for r in groups.values()) / (n * n)
    weights = [s * s / (1 - s / n) for s in sizes]
    df = n * n / (sum(s * s for s in sizes) + (math.fsum(weights) ** 2 - math.fsum(w * w for w in weights)) / (n * n))
    se = math.sqrt(variance)
    return (0.0 if is_negligible(se, values) else se), df


def two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard-normal statistic, from erfc so it never underflows to 0 before 1e-300."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def z_for(alpha: float = ALPHA, power: float = POWER, df: float | None = None) -> float:
    """``q_{1-alpha/2} + q_{power}``: how many standard errors a true difference must span to be detected.

    Normal quantiles by default; Student t with ``df`` degrees of freedom when the design is small.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need 0 < alpha < 1 and 0 < power < 1 (got alpha={alpha}, power={power})")
    if df is None:
        return NORMAL.inv_cdf(1 - alpha / 2) + NORMAL.inv_cdf(power)
    return t_quantile(1 - alpha / 2, df) + t_quantile(power, df)


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion; ``successes`` and ``n`` may be effective (fractional) counts.

    Kept for envelopes whose ``interval`` names it (``worktrial audit`` recomputes what they published).
    """
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


CLOPPER_PEARSON = "clopper-pearson"
EFFECTIVE_N = "beta-effective-n"
CLUSTER_ROBUST = "cluster-robust CR2"


def rate_interval(
    values: Sequence[float],
    *,
    binary: bool,
    cap: int,
    clusters: Sequence[str | None] | None = None,
    rule: IntervalRule = "current",
) -> Interval:
    """95% interval for the mean of per-task rates in [0, 1].

    Without clusters, when every value is 0 or 1 (one pass/fail per task, as pass@k is at k = attempts, or a
    suite whose tasks all passed or all failed every attempt) the mean is a binomial proportion over tasks and
    the interval is Clopper–Pearson, exact at any size and near 0 or 1. Otherwise the interval is Clopper–Pearson
    at the effective sample size ``mean(1-mean)/SE^2`` shrunk by ``(z/t_df)^2`` (Korn & Graubard 1998). Two guards
    keep a small sample from looking surer than it is: the variance ratio ``SE^2 N / (mean(1-mean))`` is shrunk
    towards its largest possible value 1 by one pseudo-task, and values without spread fall back to N tasks
    (a mean of values in [0, 1] varies at most like a pass/fail per task). ``cap`` bounds the effective sample size
    by the independent pass/fail draws the values summarise (tasks x attempts per k). With clusters the standard
    error is CR2 with its own degrees of freedom, and no spread falls back to the number of clusters.

    ``rule`` "wilson" recomputes the intervals of envelopes written before these (Wilson, CR1 errors).
    """
    n = len(values)
    if n == 0:
        return Interval(None, None, None)
    if rule == "wilson":
        return _wilson_rate_interval(values, binary=binary, cap=cap, clusters=clusters)
    m = mean(values)
    spread = m * (1 - m)
    if cluster_count(clusters) is None:
        se = standard_error(values)
        if binary or all(v in (0.0, 1.0) for v in values):
            return Interval(se, clopper_pearson(m * n, n), CLOPPER_PEARSON)
        if not se or spread <= 0:  # no spread (or one task): the widest a mean of n values in [0, 1] can vary
            return Interval(se, clopper_pearson(m * n, n), f"{EFFECTIVE_N}, no spread: over tasks")
        df: float = n - 1
        ratio = ((n - 1) * se * se * n / spread + 1) / n
        n_eff = min(float(cap), n / ratio)
        method = EFFECTIVE_N
    else:
        assert clusters is not None
        robust = cluster_robust(values, clusters)
        if robust is None:
            return Interval(None, None, None)
        se, df = robust
        if se == 0.0 or spread <= 0:
            groups = len(set(_cluster_ids(clusters)))
            return Interval(se, clopper_pearson(m * groups, groups), f"{EFFECTIVE_N}, no spread: over clusters")
        n_eff = min(float(cap), spread / (se * se))
        method = f"{EFFECTIVE_N}, {CLUSTER_ROBUST}"
    n_eff *= (Z95 / t95(df)) ** 2
    return Interval(se, clopper_pearson(m * n_eff, n_eff), method)


def _wilson_rate_interval(
    values: Sequence[float], *, binary: bool, cap: int, clusters: Sequence[str | None] | None
) -> Interval:
    """The rule of envelopes whose ``interval`` is "wilson" or "wilson-effective-n[, cluster-robust]"."""
    n = len(values)
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
    df: float | None = None
    interval: str | None = None
    """How ``ci95`` inverts the test behind ``p_value`` (see ``worktrial.analysis.signflip``)."""


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    binary: bool = False,
    clusters: Sequence[str | None] | None = None,
    interval: bool = True,
) -> PairedDifference:
    """Compare two runs task by task: ``b[i] - a[i]`` for the same task i in both.

    The p-value comes from the exact sign-flip permutation test over tasks (over clusters when tasks are
    clustered, each cluster weighted by its size), which is McNemar's exact test when every value is one
    pass/fail (``binary``). The 95% CI is tied to that test: its end nearest 0 is the test's own inversion, so it
    excludes 0 exactly when p < 0.05 (see ``difference_interval``). The standard error (CR2 over clusters)
    describes the spread. ``interval`` False skips the CI (simulations that only need the test).
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths (got {len(a)} and {len(b)})")
    if not a:
        return PairedDifference(0, None, None, None, None)
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    m = mean(diffs)
    g = cluster_count(clusters)
    df: float | None
    if g is not None:
        assert clusters is not None
        ids = _cluster_ids(clusters)
        sums = cluster_sums(diffs, clusters)
        sizes = [ids.count(c) for c in dict.fromkeys(ids)]
        robust = cluster_robust(diffs, clusters)
        se, df = robust if robust is not None else (None, None)
    else:
        sums, sizes = diffs, [1] * len(diffs)
        se = standard_error(diffs)
        df = len(diffs) - 1 if len(diffs) > 1 else None
    wanted = interval and se is not None and df is not None
    result = sign_flip(sums, sizes, interval=wanted and se != 0.0)
    ci, method = None, None
    if wanted:
        bounded = rate_interval([(d + 1) / 2 for d in diffs], binary=False, cap=len(diffs) ** 2, clusters=clusters)
        ci = difference_interval(result.ci95, bounded.ci95, result.p_value)
        if ci is not None:
            method = f"{result.interval}; far end widened to {bounded.method}" if result.ci95 else bounded.method
    test = "exact McNemar" if binary and g is None else result.test
    if g is not None:
        test += f", over {g} clusters"
    return PairedDifference(len(diffs), m, se, ci, result.p_value, test, result.monte_carlo_error, g, df, method)


def difference_interval(
    exact: tuple[float, float] | None, bounded: tuple[float, float] | None, p_value: float, alpha: float = ALPHA
) -> tuple[float, float] | None:
    """The CI of a paired difference: the exact test's inversion, its far end widened by a bounded-mean interval.

    ``exact`` inverts the sign-flip test, which assumes each task's difference is symmetric about the true one; on
    pass/fail data with few tasks that differ at all, that shift model makes the interval too short (it covered
    the true difference as rarely as 41% of the time with 6 tasks). ``bounded`` is Clopper–Pearson for the mean
    of ``(d + 1) / 2`` at the effective sample size (``rate_interval``, with its no-spread fallback over tasks),
    in difference units. The CI spans both, except on the side of 0 when the test rejects: there the exact end
    is kept, so the CI excludes 0 exactly when ``p_value < alpha``. ``exact`` None means the differences have no
    spread; the CI is then ``bounded`` (and 0) when the test keeps 0, and None when it rejects.
    """
    if bounded is not None:
        bounded = (2 * bounded[0] - 1, 2 * bounded[1] - 1)
    if p_value >= alpha:
        parts = [i for i in (exact, bounded) if i is not None]
        if not parts:
            return None
        return (min(0.0, *(i[0] for i in parts)), max(0.0, *(i[1] for i in parts)))
    if exact is None or bounded is None:
        return exact
    if exact[0] > 0.0:
        return (exact[0], max(exact[1], bounded[1]))
    return (min(exact[0], bounded[0]), exact[1])


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
