"""Cell formatting shared by every markdown renderer, so a number reads the same in every report.

Text (names, reasons, ids) goes through ``worktrial.safe_text`` instead: it came from an agent or a suite.
"""

from __future__ import annotations

MISSING = "—"


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


def plain(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """A count-like figure (tokens, turns) with thousands separators."""
    if value is None:
        return "unknown"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def rate(value: float | None, count: int | None, total: int | None) -> str:
    """A rate with what it counts: ``12.5% (1 of 8)``."""
    return MISSING if value is None else f"{value:.1%} ({count} of {total})"


_METHODS = {
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
        text += f"; errors are cluster-robust over {clusters} clusters of tasks"
    return f"95% CIs: {text}. See docs/statistics.md."


def setup_time(total: float | None, mean: float | None) -> str | None:
    """Time spent before the agents started, total and per attempt; None for runs that did not record it."""
    if total is None or mean is None:
        return None
    return f"{total:.1f}s in total · {mean:.1f}s per attempt (not in any attempt's duration or timeout)"
