"""Cell formatting shared by every markdown renderer, so a number reads the same in every report.

Text (names, reasons, ids) goes through ``worktrial.safe_text`` instead: it came from an agent or a suite.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from worktrial.model.envelope import BudgetInfo, Metrics, Report
from worktrial.model.records import AttemptRecord, ErrorCategory
from worktrial.util import plural

MISSING = "—"
_T = TypeVar("_T")


def attempt_ranges(numbers: Iterable[int]) -> str:
    """``1–3, 5``: attempt numbers in order, runs of consecutive ones as a range."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def attempts_label(numbers: Iterable[int]) -> str:
    """``#2`` for one attempt, ``attempts 1–3`` for several: how a report names the attempts a block stands for."""
    listed = sorted(set(numbers))
    return f"#{listed[0]}" if len(listed) == 1 else f"attempts {attempt_ranges(listed)}"


def grouped(items: Iterable[_T], key: Callable[[_T], Hashable]) -> list[list[_T]]:
    """Items with equal keys together, each group where its first item was: a block repeated for several attempts
    is shown once for all of them."""
    groups: dict[Hashable, list[_T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def num(value: float | None, signed: bool = False) -> str:
    """A rate or mean with three decimals (``+`` shown for differences)."""
    if value is None:
        return MISSING
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def ci(interval: tuple[float, float] | None, signed: bool = False) -> str:
    if interval is None:
        return MISSING
    return f"[{num(interval[0], signed)}, {num(interval[1], signed)}]"


def p_value(value: float | None) -> str:
    if value is None:
        return MISSING
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def usd(value: float | None) -> str:
    """Dollars; unknown cost is spelled out, never shown as zero."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def budget_summary(budget: BudgetInfo | None) -> str | None:
    """The run's spending limits and what they did, in one line of plain text (None: the run had no budget)."""
    if budget is None:
        return None
    limits = [f"--max-cost {usd(budget.max_cost)}" if budget.max_cost is not None else None]
    limits.append(f"--max-cost-per-attempt {usd(budget.max_cost_per_attempt)}" if budget.max_cost_per_attempt else None)
    text = f"{', '.join(x for x in limits if x) or 'no limit'}; spent {usd(budget.spent)}"
    if budget.unpriced_attempts:
        text += f" ({budget.unpriced_attempts} attempt(s) of unknown cost not included"
        text += ", counted as $0 by --allow-unpriced)" if budget.allow_unpriced else ")"
    if budget.stopped:
        text += f"; it stopped the run: {budget.reason or 'limit reached'}"
    return text


def infrastructure_summary(report: Report) -> str | None:
    """``report.infrastructure_errors`` in one line of plain text (None when there were none)."""
    count = report.infrastructure_errors
    if not count:
        return None
    return (
        f"{plural(count, 'try', 'tries')} ended in an error of the infrastructure (a provider's 5xx or 429, an "
        "unreachable or slow provider, a cut stream, a lost worker), never counted as the agent's failure"
    )


_PROVIDER_TROUBLE: dict[str | None, str] = {
    ErrorCategory.PROVIDER_SERVER: "because the provider failed on every attempt",
    ErrorCategory.PROVIDER_RATE_LIMIT: "because the provider rate-limited every attempt",
    ErrorCategory.PROVIDER_UNREACHABLE: "because the provider could not be reached on any attempt",
    ErrorCategory.PROVIDER_SLOW: "because the provider did not answer in time on any attempt",
    ErrorCategory.PROVIDER_STREAM_CUT: "because the provider cut its stream short on every attempt",
}


def nothing_measured(attempts: Sequence[AttemptRecord]) -> str:
    """Why a run whose every attempt ended in error measured nothing, and what to do (the end of a sentence): the
    cause, when every attempt shares one of the provider's (then the setup is not at fault), else the first reason."""
    first = attempts[0].reason or attempts[0].error_category
    causes = {a.error_category for a in attempts}
    if len(causes) == 1 and (cause := _PROVIDER_TROUBLE.get(next(iter(causes)))) is not None:
        fix = (
            "check the endpoint (--base-url, or the base URL in the agent's own configuration) and this machine's "
            "network"
            if causes == {ErrorCategory.PROVIDER_UNREACHABLE}
            else "this is the provider's trouble, not the setup's: run again later, or with --retry-errors N"
        )
        return f"{cause} (first: {first}); {fix}"
    if causes <= set(_PROVIDER_TROUBLE):
        return (
            f"because the provider failed on every attempt (first: {first}); run again later, or with --retry-errors N"
        )
    return f"(first: {first}); fix the setup and run again"


def plain(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """A count-like figure (tokens, turns) with thousands separators."""
    if value is None:
        return "unknown"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def rate(value: float | None, count: int | None, total: int | None) -> str:
    """A rate with what it counts: ``12.5% (1 of 8)``."""
    return MISSING if value is None else f"{value:.1%} ({count} of {total})"


_METHODS = {
    "clopper-pearson": "exact Clopper–Pearson intervals (each task is one pass/fail at this k, so the rate is a "
    "proportion over tasks)",
    "beta-effective-n": "Clopper–Pearson intervals at the data's effective sample size with a t correction "
    "(Korn & Graubard), never zero-width",
    "wilson": "Wilson score intervals (each task is one pass/fail at this k, so the rate is a proportion over tasks)",
    "wilson-effective-n": "Wilson intervals at the data's effective sample size with a t correction "
    "(Korn & Graubard), never zero-width",
}


def interval_note(method: str | None, clusters: int | None) -> str | None:
    """One sentence saying how the report's 95% CIs were computed; None for envelopes that do not say."""
    if method is None:
        return None
    base = method.split(",")[0]
    text = _METHODS.get(base, method)
    if clusters is not None:
        robust = " (CR2)" if "CR2" in method else ""
        text += f"; errors are cluster-robust{robust} over {clusters} clusters of tasks"
    return f"95% CIs: {text}. See docs/statistics.md."


def setup_time(total: float | None, mean: float | None) -> str | None:
    """Time spent before the agents started, total and per attempt; None for runs that did not record it."""
    if total is None or mean is None:
        return None
    return f"{total:.1f}s in total · {mean:.1f}s per attempt (not in any attempt's duration or timeout)"


def missing_note(m: Metrics, k: int, planned_attempts: int) -> str | None:
    """What the headline counts when attempts are missing; None when none are (or the envelope does not say)."""
    if m.tasks_measured is None:
        return None
    planned = m.tasks * planned_attempts
    missing = planned - m.total_runs
    if missing <= 0 and m.tasks_measured == m.tasks:
        return None
    counted = (
        f"pass@{k} and pass^{k} count each task with the attempts it has"
        if m.tasks_measured == m.tasks
        else f"pass@{k} and pass^{k} are over the {m.tasks_measured} of {m.tasks} tasks with at least {k} attempts"
    )
    head = f"{missing} of {planned} planned attempts are missing; " if missing > 0 else ""
    return head + counted


def provenance_line(record: AttemptRecord) -> str | None:
    """Where an attempt's verdict came from when no agent ran for it in its run (``regrade``, ``eval --reuse``)."""
    origin = record.provenance
    if origin is None:
        return None
    where = f"run {origin.run} attempt {origin.attempt} (suite digest {origin.suite_digest[:12]})"
    if origin.kind == "reused":
        return f"reused from {where}: the same task definition"
    if origin.reverified:
        return f"regraded from {where}: its stored change verified again against this suite"
    return f"regraded from {where}: keeps its {record.outcome}, which verification never decided"
