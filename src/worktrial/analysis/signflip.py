"""The exact sign-flip permutation test of a paired mean difference, and the confidence interval that inverts it.

Units are tasks (or clusters of tasks): unit ``g`` holds the sum ``u_g`` of its tasks' paired differences and its
size ``n_g``. The mean difference ``mu`` is tested by flipping the signs of ``e_g = u_g - mu n_g`` (H0: each is
symmetric about 0), two-sided as twice the smaller tail; for ``mu = 0`` and one pass/fail per task this is exactly
McNemar's exact test. The 95% interval is every ``mu`` the same test does not reject at 5%, so the interval
excludes 0 exactly when the reported p-value is below 0.05.

- Up to ``EXACT_UNITS`` units both are exact. Flipping the units of a subset S moves the statistic by
  ``2 sum_S e_g``, so the one-sided p-value at ``mu`` is the share of subsets whose weighted mean is at most ``mu``,
  and the interval's ends are order statistics of the subset means (Hartigan 1969). They are found by bisection
  on ``mu`` over meet-in-the-middle subset counts.
- Beyond that, the p-value at 0 stays exact (a generating polynomial over the data's lattice, or Monte Carlo with
  a fixed seed when there is none) and the interval inverts the permutation distribution's normal approximation:
  ``(sum e_g)^2 <= z^2 sum e_g^2`` (Robinson 1982, first order), a quadratic in ``mu``. Should it disagree with
  the exact decision at 0, the end nearest 0 moves to 0, so the two never contradict each other.

The inversion assumes each unit's difference is symmetric about ``mu``; ``stats.paired_difference`` widens its
far end where that shift model is poor (few tasks that differ at all), never its end nearest 0.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

# A spread below this fraction of the data's scale is rounding noise, not variation (3 tasks that each gain 1/3
# give a float standard error of about 1e-17).
RELATIVE_TOLERANCE = 1e-9
EXACT_UNITS = 22
"""Up to this many units the test and its interval are exact by enumeration (meet in the middle: 2 x 2^11 sums)."""
MONTE_CARLO_DRAWS = 20_000
MONTE_CARLO_SEED = 20_241_101
EXACT = "sign-flip permutation (exact)"
MONTE_CARLO = f"sign-flip permutation (Monte Carlo, {MONTE_CARLO_DRAWS} draws)"
INTERVAL_EXACT = "inverts the exact sign-flip test"
INTERVAL_NORMAL = "inverts the sign-flip test (normal approximation; exact at 0)"
_Z95 = 1.959963984540054
_MAX_DENOMINATOR = 10_000
_MAX_POLYNOMIAL_BITS = 40_000_000


@dataclass(frozen=True)
class SignFlip:
    """A two-sided p-value for mean 0 and, when asked for, the 95% interval of the mean from the same test."""

    p_value: float
    test: str
    monte_carlo_error: float | None
    ci95: tuple[float, float] | None = None
    interval: str | None = None


def sign_flip_p(units: Sequence[float], *, seed: int = MONTE_CARLO_SEED) -> tuple[float, str, float | None]:
    """Two-sided sign-flip p-value of ``sum(units)``: ``(p, test, monte_carlo_error)``."""
    result = sign_flip(units, interval=False, seed=seed)
    return result.p_value, result.test, result.monte_carlo_error


def sign_flip(
    sums: Sequence[float],
    sizes: Sequence[int] | None = None,
    *,
    alpha: float = 0.05,
    bounds: tuple[float, float] = (-1.0, 1.0),
    interval: bool = True,
    seed: int = MONTE_CARLO_SEED,
) -> SignFlip:
    """The test of mean ``sum(sums) / sum(sizes)`` = 0 over independent units, and its inverted ``1 - alpha`` CI.

    ``sizes`` defaults to one task per unit. The interval is clipped to ``bounds`` (differences of rates: [-1, 1]);
    it is the whole of ``bounds`` when so few units cannot reject any value at all.
    """
    sizes = [1] * len(sums) if sizes is None else list(sizes)
    if len(sizes) != len(sums) or not sums:
        raise ValueError("need one size per unit and at least one unit")
    scale = math.fsum(abs(u) for u in sums)
    tol = RELATIVE_TOLERANCE * max(scale, 1e-300)
    if len(sums) <= EXACT_UNITS:
        exact = _Subsets(sums, sizes, tol)
        need = alpha * 2 ** (len(sums) - 1)
        p = min(1.0, 2.0 * min(exact.at_most(0.0, 1), exact.at_most(0.0, -1)) / 2 ** len(sums))
        ci = exact.interval(need, bounds) if interval else None
        return SignFlip(p, EXACT, None, ci, INTERVAL_EXACT if interval else None)
    p, test, error = _large(sums, tol, seed)
    mean = math.fsum(sums) / sum(sizes)
    ci = _consistent(_normal_interval(sums, sizes, bounds), p >= alpha, mean) if interval else None
    return SignFlip(p, test, error, ci, INTERVAL_NORMAL if interval else None)


class _Subsets:
    """Every subset of the units by meet in the middle: (sum of u, sum of n) of each half's subsets, with counts."""

    def __init__(self, sums: Sequence[float], sizes: Sequence[int], tol: float) -> None:
        half = len(sums) // 2
        self.left = _enumerate(sums[:half], sizes[:half])
        self.right = _enumerate(sums[half:], sizes[half:])
        self.tol = tol
        self.unit_means = [u / n for u, n in zip(sums, sizes, strict=True)]
        self.mean = math.fsum(sums) / sum(sizes)

    def at_most(self, mu: float, sign: int) -> int:
        """How many subsets S have ``sign * sum_S (u_g - mu n_g) <= tol`` (the empty subset included)."""
        right = sorted((sign * (a - mu * m), c) for a, m, c in self.right)
        values = [v for v, _ in right]
        cumulative = [0, *accumulate(c for _, c in right)]
        return sum(c * cumulative[bisect_right(values, self.tol - sign * (a - mu * m))] for a, m, c in self.left)

    def interval(self, need: float, bounds: tuple[float, float]) -> tuple[float, float]:
        lo, hi = self._end(need, 1, bounds[0]), self._end(need, -1, bounds[1])
        return (min(max(lo, bounds[0]), bounds[1]), min(max(hi, bounds[0]), bounds[1]))

    def _end(self, need: float, sign: int, bound: float) -> float:
        """The outermost ``mu`` on one side that the test keeps: ``at_most(mu, sign) >= need``.

        ``sign`` 1 is the lower end (the count grows with ``mu``), -1 the upper end. Subset means lie between the
        smallest and largest unit mean, so one step beyond those is always rejected.
        """
        if need <= 1:  # the empty subset alone meets it: no value on this side is ever rejected
            return bound
        inside = self.mean
        outside = (min(self.unit_means) - 1.0) if sign > 0 else (max(self.unit_means) + 1.0)
        if min(inside, outside) < 0.0 < max(inside, outside):
            # 0 is decided by the very count the p-value comes from, so the two always agree
            if self.at_most(0.0, sign) >= need:
                inside = 0.0
            else:
                outside = 0.0
        while abs(inside - outside) > 1e-12:
            mid = (inside + outside) / 2
            if self.at_most(mid, sign) >= need:
                inside = mid
            else:
                outside = mid
        return inside


def _enumerate(sums: Sequence[float], sizes: Sequence[int]) -> list[tuple[float, int, int]]:
    """(sum of u, sum of n, how many subsets) for every subset; subsets with equal sums are counted together."""
    found: dict[tuple[float, int], tuple[float, int]] = {(0.0, 0): (0.0, 1)}
    for u, n in zip(sums, sizes, strict=True):
        grown = dict(found)
        for (_, m), (total, count) in found.items():
            key = (round(total + u, 12), m + n)
            kept, before = grown.get(key, (total + u, 0))
            grown[key] = (kept, before + count)
        found = grown
    return [(total, m, count) for (_, m), (total, count) in found.items()]


def _large(sums: Sequence[float], tol: float, seed: int) -> tuple[float, str, float | None]:
    """The p-value at 0 for more units than enumeration covers: exact on a lattice, else seeded Monte Carlo."""
    values = [u for u in sums if abs(u) > tol]
    observed = abs(math.fsum(values))
    steps = _lattice_steps(values)
    if steps is not None:
        return _exact_on_lattice(steps), EXACT, None
    if observed <= tol:
        return 1.0, EXACT, None
    rng = random.Random(seed)
    magnitudes = [abs(v) for v in values]
    hits = sum(
        abs(math.fsum(v if rng.random() < 0.5 else -v for v in magnitudes)) >= observed - tol
        for _ in range(MONTE_CARLO_DRAWS)
    )
    p = (hits + 1) / (MONTE_CARLO_DRAWS + 1)
    return p, MONTE_CARLO, math.sqrt(p * (1 - p) / MONTE_CARLO_DRAWS)


def _lattice_steps(values: Sequence[float]) -> list[int] | None:
    """The values as signed integer steps of one small ``1 / denominator``, or None when there is none."""
    denominator = 1
    for v in {abs(v) for v in values}:
        fraction = Fraction(v).limit_denominator(_MAX_DENOMINATOR)
        if abs(float(fraction) - v) > 1e-10:
            return None
        denominator = math.lcm(denominator, fraction.denominator)
        if denominator > _MAX_DENOMINATOR:
            return None
    steps = [round(v * denominator) for v in values]
    if sum(abs(s) for s in steps) * (len(steps) + 2) > _MAX_POLYNOMIAL_BITS:
        return None
    return steps


def _exact_on_lattice(steps: Sequence[int]) -> float:
    """Exact by the generating polynomial ``prod (1 + x^|s|)``, held in one big integer with a slot per power.

    Its coefficient of ``x^t`` counts the sign patterns whose positive units sum to ``t``; each slot has room for
    ``2^len(steps)``, so the sum of any run of slots is that big integer's residue modulo ``2^width - 1``.
    """
    magnitudes = [abs(s) for s in steps if s]
    observed = abs(sum(steps))
    if observed == 0:
        return 1.0
    total = sum(magnitudes)
    width = len(magnitudes) + 2
    polynomial = 1
    for s in magnitudes:
        polynomial += polynomial << (s * width)
    # sign patterns whose positive units sum to at least the observed ones: one tail of |statistic| >= observed
    tail = (polynomial >> ((total + observed) // 2 * width)) % ((1 << width) - 1)
    return min(1.0, 2 * tail / (1 << len(magnitudes)))


def _normal_interval(sums: Sequence[float], sizes: Sequence[int], bounds: tuple[float, float]) -> tuple[float, float]:
    """Every mu with ``(sum e_g)^2 <= z^2 sum e_g^2``, ``e_g = u_g - mu n_g``: a quadratic ``a mu^2 - 2 b mu + c``."""
    q2 = _Z95 * _Z95
    d, n = math.fsum(sums), float(sum(sizes))
    a = n * n - q2 * sum(m * m for m in sizes)
    b = d * n - q2 * math.fsum(u * m for u, m in zip(sums, sizes, strict=True))
    c = d * d - q2 * math.fsum(u * u for u in sums)
    if a <= 0.0:  # too few units for the approximation to bound anything
        return bounds
    root = math.sqrt(max(0.0, b * b - a * c))
    return (max(bounds[0], (b - root) / a), min(bounds[1], (b + root) / a))


def _consistent(ci: tuple[float, float], keeps_zero: bool, mean: float) -> tuple[float, float]:
    """Make the interval hold 0 exactly when the exact test keeps it: move the end nearest 0 there if needed.

    A rejected 0 is left out on the side of the observed mean (the test rejects towards where the data are).
    """
    lo, hi = ci
    if keeps_zero:
        return (min(lo, 0.0), max(hi, 0.0))
    if lo <= 0.0 <= hi:
        return (1e-12, max(hi, 1e-12)) if mean > 0 else (min(lo, -1e-12), -1e-12)
    return (lo, hi)
