"""Standard errors and confidence intervals over per-task values (Miller 2024, arXiv 2411.00640).

Errors are computed across tasks, treating each task's mean over its attempts as one observation; attempts
of one task are never pooled as if independent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean (sample variance, n-1); None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    m = mean(values)
    variance = math.fsum((v - m) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance / n)


def ci95(center: float, stderr: float | None, lo: float = 0.0, hi: float = 1.0) -> tuple[float, float] | None:
    """Normal-approximation 95% interval, clipped to the metric's range."""
    if stderr is None:
        return None
    return (max(lo, center - Z95 * stderr), min(hi, center + Z95 * stderr))
