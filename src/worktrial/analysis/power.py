"""Planning with power: how many tasks or attempts a comparison needs, and what difference it can detect.

Plans are for the mean pass rate (pass@1) of two runs compared task by task by the exact sign-flip test
``compare`` uses (``worktrial.analysis.planning`` has the sample-size rule). The variance model (``omega2``,
``sigma2_a``, ``sigma2_b``) is either assumed or estimated from envelopes: two envelopes of the same suite give
every term directly; a single envelope gives the attempt noise, and the across-task variance of the difference is
taken as twice that run's across-task variance, which assumes the two runs' per-task rates are uncorrelated. Real
runs usually find the same tasks easy, so that guess errs towards asking for more tasks, never fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from worktrial.analysis import planning, stats
from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope, Report, TaskReport
from worktrial.safe_text import for_terminal

# Defaults when nothing is known: Miller's illustrative across-question variance, and the worst case for
# pass/fail attempts (a 50% chance on every task), so an unknown agent never looks easier to measure.
DEFAULT_OMEGA2 = 1 / 9
DEFAULT_SIGMA2 = 0.25


class VarianceModel(BaseModel):
    """The variance of one task's paired pass-rate difference, split into its sources."""

    omega2: float = Field(
        description="Across-task variance of the true per-task difference. Estimated from two runs it is not clipped "
        "at 0 (clipping would bias every plan towards more tasks), so it can be slightly negative."
    )
    sigma2_a: float = Field(description="Within-task variance of one attempt of run A.")
    sigma2_b: float = Field(description="Within-task variance of one attempt of run B.")
    source: str = Field(description="Where the numbers come from.")

    def per_task(self, attempts: int) -> float:
        """Variance of one task's paired difference with ``attempts`` attempts in both runs."""
        return max(0.0, self.omega2 + self.sigma2_a / attempts + self.sigma2_b / attempts)

    @classmethod
    def from_true_rates(cls, pairs: Sequence[tuple[float, float]]) -> VarianceModel:
        """The variances of a population of tasks whose true pass rates in runs A and B are known (simulations)."""
        differences = [b - a for a, b in pairs]
        return cls(
            omega2=stats.sample_variance(differences) or 0.0,
            sigma2_a=stats.mean([a * (1 - a) for a, _ in pairs]),
            sigma2_b=stats.mean([b * (1 - b) for _, b in pairs]),
            source="true",
        )


class PowerPlan(BaseModel):
    """What a design with ``tasks`` tasks and ``attempts`` attempts per task can and cannot detect."""

    alpha: float
    power: float
    variance: VarianceModel
    tasks: int | None
    attempts: int
    delta: float | None
    minimum_detectable_difference: float | None = Field(description="At `tasks` tasks and `attempts` attempts.")
    tasks_needed: int | None = Field(description="To detect `delta` with `attempts` attempts per task.")
    attempts_needed: int | None = Field(description="To detect `delta` with `tasks` tasks; None if impossible.")


def _counts(tasks: Sequence[TaskReport]) -> list[tuple[int, int]]:
    return [(t.passed_runs, t.total_runs) for t in tasks if t.total_runs > 0]


def _mean_attempts(counts: Sequence[tuple[int, int]]) -> float:
    return stats.mean([float(n) for _, n in counts])


def _spread(values: Sequence[float], clusters: Sequence[str | None]) -> tuple[float, str]:
    """Per-task variance of ``values``; with clusters, N x the cluster-robust (CR2) variance of their mean.

    Tasks of one cluster that move together carry less information than independent tasks; expressing that as
    an inflated per-task variance (the design effect) lets the usual formulas plan with it, assuming a bigger
    suite keeps the same cluster structure.
    """
    g = stats.cluster_count(clusters)
    if g is None:
        return stats.sample_variance(values) or 0.0, ""
    robust = stats.cluster_robust(values, clusters)
    se = robust[0] if robust is not None else 0.0
    return len(values) * se * se, f", cluster-robust over {g} clusters"


def estimate_from_one(report: Report, source: str, sigma2: float | None = None) -> VarianceModel:
    """Attempt noise from the run itself; across-task variance of a difference as if rates were uncorrelated."""
    counts = _counts(report.tasks)
    if len(counts) < 2:
        raise BadInputError(f"{source}: need at least two tasks with attempts to estimate variances")
    within = stats.mean_within_variance(counts)
    within = within if within is not None else sigma2
    if within is None:
        raise BadInputError(
            f"{source}: every task has one attempt, so attempt noise cannot be estimated; pass --sigma2"
        )
    ran = [t for t in report.tasks if t.total_runs > 0]
    rates = [t.passed_runs / t.total_runs for t in ran]
    observed, clustered = _spread(rates, [t.cluster for t in ran])
    between = max(0.0, observed - within / _mean_attempts(counts))
    return VarianceModel(
        omega2=2 * between,
        sigma2_a=within,
        sigma2_b=within,
        source=f"estimated from {source} (one run: assumes uncorrelated per-task rates{clustered})",
    )


def estimate_from_pair(a: Report, b: Report, source: str, sigma2: float | None = None) -> VarianceModel:
    """Every term from two runs of the same tasks: attempt noise of each, and what remains of the difference."""
    tasks_b = {t.task_id: t for t in b.tasks}
    pairs = [(t, tasks_b[t.task_id]) for t in a.tasks if t.task_id in tasks_b]
    pairs = [(x, y) for x, y in pairs if x.total_runs > 0 and y.total_runs > 0]
    if len(pairs) < 2:
        raise BadInputError(f"{source}: need at least two shared tasks with attempts to estimate variances")
    counts_a = [(x.passed_runs, x.total_runs) for x, _ in pairs]
    counts_b = [(y.passed_runs, y.total_runs) for _, y in pairs]
    sigma2_a = stats.mean_within_variance(counts_a)
    sigma2_b = stats.mean_within_variance(counts_b)
    sigma2_a = sigma2_a if sigma2_a is not None else sigma2
    sigma2_b = sigma2_b if sigma2_b is not None else sigma2
    if sigma2_a is None or sigma2_b is None:
        raise BadInputError(
            f"{source}: a run has one attempt per task, so attempt noise cannot be estimated; pass --sigma2"
        )
    diffs = [y.passed_runs / y.total_runs - x.passed_runs / x.total_runs for x, y in pairs]
    observed, clustered = _spread(diffs, [x.cluster for x, _ in pairs])
    noise = sigma2_a / _mean_attempts(counts_a) + sigma2_b / _mean_attempts(counts_b)
    # Unclipped: at the runs' own attempt count the plan's variance is then exactly the observed one (unbiased).
    return VarianceModel(omega2=observed - noise, sigma2_a=sigma2_a, sigma2_b=sigma2_b, source=source + clustered)


def variance_model(
    runs: Sequence[tuple[str, Envelope]], *, omega2: float | None = None, sigma2: float | None = None
) -> VarianceModel:
    """Estimated from zero, one or two labelled runs (defaults when none), then any explicit override."""
    if len(runs) > 2:
        raise BadInputError("variances come from one envelope, or from two runs of the same suite")
    if len(runs) == 2 and runs[0][1].bundle_digest != runs[1][1].bundle_digest:
        raise BadInputError(f"{runs[0][0]} and {runs[1][0]} used different suite files; their variances do not pair")
    label = " and ".join(name for name, _ in runs)
    if len(runs) == 2:
        model = estimate_from_pair(runs[0][1].report, runs[1][1].report, label, sigma2)
    elif runs:
        model = estimate_from_one(runs[0][1].report, label, sigma2)
    else:
        model = VarianceModel(
            omega2=DEFAULT_OMEGA2, sigma2_a=DEFAULT_SIGMA2, sigma2_b=DEFAULT_SIGMA2, source="assumed defaults"
        )
    if omega2 is None and sigma2 is None:
        return model
    return VarianceModel(
        omega2=model.omega2 if omega2 is None else omega2,
        sigma2_a=model.sigma2_a if sigma2 is None else sigma2,
        sigma2_b=model.sigma2_b if sigma2 is None else sigma2,
        source=f"{model.source}, overridden on the command line",
    )


def plan(
    variance: VarianceModel,
    *,
    tasks: int | None,
    attempts: int,
    delta: float | None,
    alpha: float = stats.ALPHA,
    power: float = stats.POWER,
) -> PowerPlan:
    """Every answer the inputs allow: the detectable difference, and the tasks or attempts ``delta`` needs."""
    if attempts < 1:
        raise BadInputError(f"attempts must be at least 1 (got {attempts})")
    if tasks is not None and tasks < 1:
        raise BadInputError(f"tasks must be at least 1 (got {tasks})")
    if delta is not None and not 0 < delta <= 1:
        raise BadInputError(f"delta is a difference in pass rate, between 0 and 1 (got {delta})")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise BadInputError("alpha and power must be between 0 and 1")
    per_task = variance.per_task(attempts)
    mdd = None
    if tasks is not None:
        mdd = planning.minimum_detectable_difference(per_task, tasks, alpha, power, attempts=attempts)
    tasks_needed = None
    if delta is not None:
        tasks_needed = planning.required_tasks(per_task, delta, alpha, power, attempts=attempts)
    attempts_needed = None
    if delta is not None and tasks is not None:
        attempts_needed = planning.required_attempts(
            max(0.0, variance.omega2), variance.sigma2_a, variance.sigma2_b, tasks, delta, alpha, power
        )
    return PowerPlan(
        alpha=alpha,
        power=power,
        variance=variance,
        tasks=tasks,
        attempts=attempts,
        delta=delta,
        minimum_detectable_difference=mdd,
        tasks_needed=tasks_needed,
        attempts_needed=attempts_needed,
    )


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def render_plan(p: PowerPlan) -> str:
    """Plain-language lines for the terminal."""
    v = p.variance
    lines = [
        f"variance model ({for_terminal(v.source)}): omega2 = {v.omega2:.4f}, "
        f"sigma2 = {v.sigma2_a:.4f} (A), {v.sigma2_b:.4f} (B)"
        + (" (below 0 by sampling noise: the true differences hardly vary across tasks)" if v.omega2 < 0 else ""),
        f"two-sided alpha = {p.alpha:g}, power = {p.power:.0%}, pass@1 compared task by task by the exact sign-flip "
        "test compare uses",
    ]
    if p.minimum_detectable_difference is not None:
        lines.append(
            f"with {p.tasks} tasks x {p.attempts} attempts: minimum detectable difference "
            f"{p.minimum_detectable_difference:.3f} ({p.minimum_detectable_difference * 100:.1f} points)"
        )
    if p.tasks_needed is not None and p.delta is not None:
        lines.append(f"to detect {p.delta:g} with {_n(p.attempts, 'attempt')} per task: {_n(p.tasks_needed, 'task')}")
    if p.delta is not None and p.tasks is not None:
        if p.attempts_needed is None:
            lines.append(
                f"to detect {p.delta:g} with {_n(p.tasks, 'task')}: not possible with any number of attempts "
                "(the across-task variance needs more tasks)"
            )
        else:
            lines.append(
                f"to detect {p.delta:g} with {_n(p.tasks, 'task')}: {_n(p.attempts_needed, 'attempt')} per task"
            )
    if p.tasks is not None and p.minimum_detectable_difference is None:
        fewest = planning.fewest_tasks(p.alpha)
        lines.append(
            f"with {p.tasks} tasks x {p.attempts} attempts: no difference is detectable"
            + (f" (the exact test needs at least {fewest} tasks)" if p.tasks < fewest else "")
        )
    if p.tasks is None and p.delta is None:
        lines.append("give --tasks (for the detectable difference) and/or --delta (for the tasks needed)")
    return "\n".join(lines) + "\n"


SMALL_SUITE_DIFFERENCE = 0.10
"""A design that would miss a true 10-point difference in pass rate is small enough to say so next to its table."""


def small_suite_note(
    tasks: int,
    attempts: int,
    *,
    comparisons: int = 1,
    clusters: int | None = None,
    alpha: float = stats.ALPHA,
    power: float = stats.POWER,
) -> str | None:
    """One plain sentence for a leaderboard or comparison whose suite is too small to tell close runs apart.

    Two limits, whichever bites: the exact paired tests cannot give a p-value below ``2 / 2^units`` (every unit
    changed the same way), so with Holm over ``comparisons`` rows a small enough suite separates nothing at all;
    otherwise the minimum detectable difference of this design under the assumed default variances (what
    ``worktrial power --tasks N --attempts K`` prints). None when neither is worth a sentence.
    """
    units = clusters if clusters is not None else tasks
    if units < 1 or attempts < 1 or comparisons < 1:
        return None
    what = f"{_n(tasks, 'task')}" + (f" in {_n(clusters, 'cluster')}" if clusters is not None else "")
    floor = min(1.0, comparisons * 2.0 ** (1 - units))
    if floor >= alpha:
        corrected = f" (after correcting for {comparisons} comparisons)" if comparisons > 1 else ""
        return (
            f"With {what}, no difference can be told apart: even a run better on every task gets "
            f"p = {floor:.3g}{corrected}, not below {alpha:g}; not separated does not mean equal."
        )
    variance = VarianceModel(
        omega2=DEFAULT_OMEGA2, sigma2_a=DEFAULT_SIGMA2, sigma2_b=DEFAULT_SIGMA2, source="assumed defaults"
    )
    mdd = plan(variance, tasks=units, attempts=attempts, delta=None, alpha=alpha, power=power)
    if mdd.minimum_detectable_difference is None:  # the exact test cannot reach that power with so few units
        return (
            f"With {what}, no difference can be told apart with {power:.0%} power at α = {alpha:g} (as "
            f"`worktrial power --tasks {units} --attempts {attempts}` plans); not separated does not mean equal."
        )
    if mdd.minimum_detectable_difference < SMALL_SUITE_DIFFERENCE:
        return None
    return (
        f"With {what}, differences below {mdd.minimum_detectable_difference:.2f} in pass rate cannot be told apart "
        f"({power:.0%} power at α = {alpha:g} with typical per-task variances, as "
        f"`worktrial power --tasks {units} --attempts {attempts}` plans); not separated does not mean equal."
    )
