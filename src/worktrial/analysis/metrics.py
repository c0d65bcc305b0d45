"""pass@k, pass^k and their aggregates: pure functions of attempt records.

pass@k = 1 - C(n-c, k) / C(n, k)  (unbiased estimator, Chen et al. 2021): at least one of k attempts passes.
pass^k = C(c, k) / C(n, k)        (tau-bench): all k attempts pass.
Both are computed as running products, never as huge binomials.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from worktrial.analysis import stats
from worktrial.analysis.honesty import honesty_figures
from worktrial.model.envelope import Curves, Metrics, PairFloat, PairInterval, Report, TaskReport
from worktrial.model.records import RETRYABLE_ERRORS, AttemptRecord
from worktrial.model.suite import CATEGORIES, Category


def _check(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need n >= 1, 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k attempts drawn without replacement from n passes.

    ``1 - prod(1 - k/i)`` as ``-expm1(sum(log1p(-k/i)))``, so a pass@k close to 0 keeps its relative precision.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    if k == 1:
        return c / n  # exact, so pass@1 == pass^1 bit for bit
    # 0.0 - x rather than -x: c = 0 gives 0.0, not -0.0
    return 0.0 - math.expm1(math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1)))


def pass_power_k(n: int, c: int, k: int) -> float:
    """Probability that all of k attempts drawn without replacement from n pass."""
    _check(n, c, k)
    if c < k:
        return 0.0
    if k == 1:
        return c / n
    product = 1.0
    for i in range(k):
        product *= (c - i) / (n - i)
    return product


@dataclass(frozen=True)
class TaskInfo:
    """The suite facts metrics need about a task."""

    id: str
    name: str
    category: Category
    cluster: str | None = None


def task_report(task: TaskInfo, attempts: Sequence[AttemptRecord], k: int) -> TaskReport:
    ordered = sorted(attempts, key=lambda r: r.attempt)
    n = len(ordered)
    c = sum(1 for r in ordered if r.outcome == "pass")
    curves = Curves(
        pass_at={str(j): pass_at_k(n, c, j) for j in range(1, n + 1)},
        pass_power={str(j): pass_power_k(n, c, j) for j in range(1, n + 1)},
    )
    return TaskReport(
        task_id=task.id,
        name=task.name,
        category=task.category,
        cluster=task.cluster,
        passed_runs=c,
        total_runs=n,
        pass_at_k=pass_at_k(n, c, k) if 1 <= k <= n else None,
        pass_power_k=pass_power_k(n, c, k) if 1 <= k <= n else None,
        curves=curves,
        attempts=list(ordered),
        mean_reward=mean_reward(ordered),
    )


def mean_reward(attempts: Sequence[AttemptRecord]) -> float | None:
    """The mean of the attempts' rewards (Harbor reports this beside pass@k); None when none has one."""
    rewards = [a.reward for a in attempts if a.reward is not None]
    return math.fsum(rewards) / len(rewards) if rewards else None


def headline_interval(
    tasks: Sequence[TaskReport], values: Sequence[float], k: int, rule: stats.IntervalRule = "current"
) -> stats.Interval:
    """The 95% interval of a pass@k or pass^k mean over ``tasks`` (see ``stats.rate_interval``).

    With k equal to every task's attempt count each value is one pass/fail, so the mean is a proportion over
    tasks; otherwise each task's value summarises ``n // k`` disjoint k-draws, which bounds what it is worth.
    """
    binary = all(t.total_runs == k for t in tasks)
    cap = sum(t.total_runs // k for t in tasks)
    clusters = [t.cluster for t in tasks]
    return stats.rate_interval(values, binary=binary, cap=cap, clusters=clusters, rule=rule)


def group_metrics(tasks: Sequence[TaskReport], k: int, *, rule: stats.IntervalRule = "current") -> Metrics:
    """Mean over tasks that have attempts, for each k every one of them reaches.

    The headline pass@k and pass^k are over the tasks with at least k attempts (``tasks_measured``): a task that
    lost an attempt still counts with the attempts it has, and only a task with fewer than k is left out, so a
    few missing attempts never blank the headline. ``rule`` recomputes older envelopes the way they were
    written: "wilson" (named intervals, a headline only when every task reached k) or "normal" (1.96 SE).
    """
    ran = [t for t in tasks if t.total_runs > 0]
    metrics = Metrics(
        tasks=len(tasks),
        passed_runs=sum(t.passed_runs for t in tasks),
        total_runs=sum(t.total_runs for t in tasks),
        pass_at_k=None,
        pass_power_k=None,
    )
    if not ran:
        return metrics
    reach = min(t.total_runs for t in ran)
    metrics.curves = Curves(
        pass_at={str(j): stats.mean([t.curves.pass_at[str(j)] for t in ran]) for j in range(1, reach + 1)},
        pass_power={str(j): stats.mean([t.curves.pass_power[str(j)] for t in ran]) for j in range(1, reach + 1)},
    )
    if rule == "current":
        measured = [t for t in ran if t.total_runs >= k]
        metrics.tasks_measured = len(measured)
    else:
        measured = ran if k <= reach and len(ran) == len(tasks) else []
    if not measured:
        return metrics
    at = [t.curves.pass_at[str(k)] for t in measured]
    power = [t.curves.pass_power[str(k)] for t in measured]
    metrics.pass_at_k = stats.mean(at)
    metrics.pass_power_k = stats.mean(power)
    if rule == "normal":
        se_at, se_power = stats.standard_error(at), stats.standard_error(power)
        metrics.stderr = PairFloat(pass_at_k=se_at, pass_power_k=se_power)
        metrics.ci95 = PairInterval(
            pass_at_k=stats.normal_interval(metrics.pass_at_k, se_at),
            pass_power_k=stats.normal_interval(metrics.pass_power_k, se_power),
        )
        return metrics
    i_at, i_power = headline_interval(measured, at, k, rule), headline_interval(measured, power, k, rule)
    metrics.stderr = PairFloat(pass_at_k=i_at.stderr, pass_power_k=i_power.stderr)
    metrics.ci95 = PairInterval(pass_at_k=i_at.ci95, pass_power_k=i_power.ci95)
    metrics.interval = i_at.method
    metrics.clusters = stats.cluster_count([t.cluster for t in measured])
    return metrics


def build_report(
    suite_id: str,
    suite_name: str,
    tasks: Sequence[TaskInfo],
    records: Iterable[AttemptRecord],
    k: int,
    *,
    rule: stats.IntervalRule = "current",
) -> Report:
    """Every number of the report from the per-attempt records; order follows the suite's task order.

    ``rule`` is for ``worktrial audit``: an older envelope is recomputed the way it was written.
    """
    by_task: dict[str, list[AttemptRecord]] = {t.id: [] for t in tasks}
    for record in records:
        if record.task_id in by_task:
            by_task[record.task_id].append(record)
    reports = [task_report(t, by_task[t.id], k) for t in tasks]
    categories = {
        cat: group_metrics([r for r in reports if r.category == cat], k, rule=rule)
        for cat in CATEGORIES
        if any(r.category == cat for r in reports)
    }
    attempts = [a for r in reports for a in r.attempts]
    efficiency = efficiency_figures(attempts)
    retried = sum(1 for records in by_task.values() for r in records if r.retries)
    first_try = None
    if retried:  # what the headline would say had no attempt been given a second try
        first_reports = [task_report(t, [_first_try(r) for r in by_task[t.id]], k) for t in tasks]
        first_try = group_metrics(first_reports, k, rule=rule)
    return Report(
        suite_id=suite_id,
        suite_name=suite_name,
        k=k,
        overall=group_metrics(reports, k, rule=rule),
        categories=categories,
        tasks=reports,
        honesty=honesty_figures(attempts),
        retried_attempts=retried,
        infrastructure_errors=sum(
            r.retries + (r.outcome == "error" and r.error_category in RETRYABLE_ERRORS)
            for records in by_task.values()
            for r in records
        ),
        first_try=first_try,
        timeouts=sum(1 for a in attempts if a.outcome == "timeout"),
        timeouts_verified=sum(1 for a in attempts if a.outcome == "timeout" and a.verified is True),
        **efficiency,
        **setup_figures(attempts),
        mean_reward=mean_reward(attempts),
    )


def _first_try(record: AttemptRecord) -> AttemptRecord:
    if not record.retries:
        return record
    return record.model_copy(update={"outcome": "error", "verified": None})


def setup_figures(attempts: Sequence[AttemptRecord]) -> dict[str, float | None]:
    """Time spent before the agents started (total and mean over the attempts that recorded it): setup is paid once
    per slot, so the mean says what it cost an attempt on average, not what one setup takes."""
    timed = [a.setup_secs for a in attempts if a.setup_secs is not None]
    total = math.fsum(timed) if timed else None
    return {"setup_secs": total, "mean_setup_secs_per_attempt": total / len(timed) if total is not None else None}


def efficiency_figures(attempts: Sequence[AttemptRecord]) -> dict[str, float | int | None]:
    """Cost and efficiency; unknown cost is never treated as free, so any unpriced attempt nulls the cost means.

    Token and turn means depend only on tokens and turns: they are null when some attempt's own figure is unknown,
    never because an attempt is unpriced (a CLI that reports tokens but no cost still shows its token figures).
    """
    known = [a.cost_usd for a in attempts if a.cost_usd is not None]
    unpriced = len(attempts) - len(known)
    solves = sum(1 for a in attempts if a.outcome == "pass")
    all_priced = bool(attempts) and unpriced == 0
    total = math.fsum(known) if known else None
    tokens = [a.tokens.total() for a in attempts]
    turns = [a.turns for a in attempts]
    return {
        "cost_usd": total,
        "unpriced_runs": unpriced,
        "cost_per_solve": total / solves if all_priced and solves and total is not None else None,
        "mean_cost_per_attempt": total / len(attempts) if all_priced and total is not None else None,
        "mean_tokens_per_attempt": (
            stats.mean([float(t) for t in tokens if t is not None])
            if tokens and all(t is not None for t in tokens)
            else None
        ),
        "mean_turns_per_attempt": (
            stats.mean([float(t) for t in turns if t is not None])
            if turns and all(t is not None for t in turns)
            else None
        ),
    }
