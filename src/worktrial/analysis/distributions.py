"""The few distribution functions worktrial's statistics need, in pure Python: Student t, beta, Clopper–Pearson.

Student t with an integer number of degrees of freedom has a closed-form CDF (Abramowitz & Stegun 26.7.3/26.7.4);
with a fractional number (the Satterthwaite-style degrees of freedom of a cluster-robust error) it goes through the
regularized incomplete beta function, which is also what Clopper–Pearson intervals are made of. Every quantile is
found by a safeguarded Newton iteration, accurate to about 1e-13 relative (the tests check scipy's values).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

NORMAL = NormalDist()
_TINY = 1e-300


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes ``betacf``)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b): the ``x`` with ``I_x(a, b) = q``."""
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    if a > b:  # solve for the smaller side so values near 1 keep their relative precision
        return 1.0 - _beta_ppf_low(1.0 - q, b, a)
    return _beta_ppf_low(q, a, b)


def _beta_ppf_low(q: float, a: float, b: float) -> float:
    log_beta = _log_beta(a, b)
    # Start from the small-x expansion I_x(a, b) ~ x^a / (a B(a, b)); Newton from there, bisection when it strays.
    start = (math.log(q) + math.log(a) + log_beta) / a
    if start < -700.0:  # below the smallest normal float: the quantile is 0 to double precision
        return 0.0
    x = math.exp(start) if start < 0.0 else a / (a + b)
    lo, hi = 0.0, 1.0
    for _ in range(1200):
        f = betainc(a, b, x) - q
        if f == 0.0:
            return x
        if f > 0.0:
            hi = x
        else:
            lo = x
        if hi - lo <= 4e-16 * hi:
            return x
        log_pdf = (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_beta
        step = x - f / math.exp(log_pdf) if -700.0 < log_pdf < 700.0 else -1.0
        if not lo < step < hi:
            step = math.sqrt(lo * hi) if lo > 0.0 and hi > 4.0 * lo else (lo + hi) / 2.0
            if step <= 0.0:
                return hi
        if abs(step - x) <= 1e-15 * x:
            return step
        x = step
    return x


def clopper_pearson(successes: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper–Pearson interval for a proportion: exact (at least 1 - alpha) for a binomial count.

    ``successes`` and ``n`` may be fractional (an effective sample size); the beta quantiles are then the
    Korn & Graubard (1998) interval.
    """
    if n <= 0:
        raise ValueError(f"need n > 0 (got {n})")
    x = min(max(successes, 0.0), n)
    lo = 0.0 if x <= 0.0 else beta_ppf(alpha / 2.0, x, n - x + 1.0)
    hi = 1.0 if x >= n else beta_ppf(1.0 - alpha / 2.0, x + 1.0, n - x)
    return (lo, hi)


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
def t_quantile(probability: float, df: float) -> float:
    """The ``probability`` quantile of Student t with ``df`` > 0 degrees of freedom (integer or fractional)."""
    if not 0 < probability < 1:
        raise ValueError(f"need 0 < probability < 1 (got {probability})")
    if df <= 0 or (df < 1 and float(df).is_integer()):
        raise ValueError(f"degrees of freedom must be positive (got {df})")
    if probability == 0.5:
        return 0.0
    if df > 5000:  # Cornish-Fisher is exact to 1e-9 here
        z = NORMAL.inv_cdf(probability)
        return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    tail = 2.0 * min(probability, 1.0 - probability)
    if not float(df).is_integer():
        # P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2)
        x = beta_ppf(tail, df / 2.0, 0.5)
        q = math.sqrt(df * (1.0 - x) / x)
        return q if probability > 0.5 else -q
    n = int(df)
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_central(math.sqrt(n) * math.tan(mid), n) < 1.0 - tail:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    q = math.sqrt(n) * math.tan((lo + hi) / 2)
    return q if probability > 0.5 else -q


def t95(df: float) -> float:
    """Two-sided 95% critical value of t with ``df`` degrees of freedom."""
    return t_quantile(0.975, df)
