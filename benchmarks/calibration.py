"""Calibration of worktrial's error bars: do its 95% intervals cover 95%, does `compare` reject 5% under the null?

Simulates evals of 10/30/100 tasks x 1/3/10 attempts from task populations whose true values are known, runs
worktrial's own functions on each simulated run (the interval of `report`, the paired test of `compare`) and
prints, per cell: the false-positive rate of `compare` on pass@1 at alpha = 0.05 (two runs of the same agent),
its power against a real difference, and the coverage of the 95% CIs of pass@1, pass@k and pass^k, each side by
side with the nominal value and with the 1.96-SE / normal-p rule worktrial used before ("old"). A last table
does the same for clustered tasks (a strong shared effect per cluster), with and without the `cluster` field.

Populations (per-task true pass probability p):
  mixed  p ~ Beta(0.6, 0.4): many tasks near 0 or 1, mean 0.6 -- typical of agent evals
  easy   p ~ Beta(4, 0.4): mostly easy tasks, mean 0.91 -- where pass@k intervals collapsed to [1, 1]
The headline k of a cell is ceil(attempts / 2) (1, 2, 5), so both kinds of interval are exercised: Wilson where
each task is one pass/fail, and Wilson at the effective sample size otherwise.

Seeded, so every run prints the same table; the Monte Carlo error of a rate r over R replications is
sqrt(r (1 - r) / R), printed under each table.

    .venv/bin/python benchmarks/calibration.py              # 2,000 replications per cell (a few minutes on 2 cores)
    .venv/bin/python benchmarks/calibration.py --reps 400   # quick look
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from worktrial.analysis import stats
from worktrial.analysis.compare import difference
from worktrial.analysis.metrics import headline_interval, pass_at_k, pass_power_k
from worktrial.model.envelope import Curves, TaskReport

TASKS = (10, 30, 100)
ATTEMPTS = (1, 3, 10)
POPULATIONS = {"mixed": (0.6, 0.4), "easy": (4.0, 0.4)}
SHIFT = 0.15
"""Alternative for the power column: run B solves each task with probability min(1, p + 0.15)."""


def beta_moment(a: float, b: float, k: int) -> float:
    """E[p^k] for p ~ Beta(a, b)."""
    return math.prod((a + j) / (a + b + j) for j in range(k))


def truths(a: float, b: float, k: int) -> tuple[float, float, float]:
    """True pass@1, pass@k and pass^k of the population (pass@k as the n -> infinity estimand 1 - E[(1-p)^k])."""
    return a / (a + b), 1 - beta_moment(b, a, k), beta_moment(a, b, k)


def task(n: int, c: int, cluster: str | None = None) -> TaskReport:
    """Only what the interval reads (attempt count, cluster): model_construct skips validation for speed."""
    return TaskReport.model_construct(
        task_id="t",
        name="t",
        category="capability",
        cluster=cluster,
        passed_runs=c,
        total_runs=n,
        pass_at_k=None,
        pass_power_k=None,
        curves=Curves(),
        attempts=[],
    )


def binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


@dataclass
class Tally:
    reps: int = 0
    fp_new: int = 0
    fp_old: int = 0
    power_new: int = 0
    cover: dict[str, int] | None = None

    def hit(self, key: str, ok: bool) -> None:
        assert self.cover is not None
        self.cover[key] = self.cover.get(key, 0) + ok


def _covers(interval: tuple[float, float] | None, truth: float) -> bool:
    return interval is not None and interval[0] - 1e-12 <= truth <= interval[1] + 1e-12


def simulate_cell(args: tuple[str, int, int, int, int]) -> tuple[str, int, int, Tally]:
    population, tasks, attempts, reps, seed = args
    a, b = POPULATIONS[population]
    k = (attempts + 1) // 2
    truth = dict(zip(("pass@1", "pass@k", "pass^k"), truths(a, b, k), strict=True))
    rng = random.Random(seed)
    tally = Tally(cover={})
    binary1 = attempts == 1
    for _ in range(reps):
        p = [rng.betavariate(a, b) for _ in range(tasks)]
        ca = [binomial(rng, attempts, x) for x in p]
        cb = [binomial(rng, attempts, x) for x in p]  # the same agent again: the null
        cs = [binomial(rng, attempts, min(1.0, x + SHIFT)) for x in p]  # a better agent
        reports = [task(attempts, c) for c in ca]
        for name, metric in (("pass@1", pass_at_k), ("pass@k", pass_at_k), ("pass^k", pass_power_k)):
            j = 1 if name == "pass@1" else k
            values = [metric(attempts, c, j) for c in ca]
            new = headline_interval(reports, values, j)
            tally.hit(name + " new", _covers(new.ci95, truth[name]))
            old = stats.normal_interval(stats.mean(values), stats.standard_error(values))
            tally.hit(name + " old", _covers(old, truth[name]))
        ra, rb, rs = ([c / attempts for c in cs_] for cs_ in (ca, cb, cs))
        null = difference(ra, rb, binary=binary1)
        tally.fp_new += null.p_value is not None and null.p_value < stats.ALPHA
        diffs = [y - x for x, y in zip(ra, rb, strict=True)]
        se = stats.standard_error(diffs)
        old_p = (1.0 if stats.mean(diffs) == 0 else 0.0) if not se else stats.two_sided_p(stats.mean(diffs) / se)
        tally.fp_old += old_p < stats.ALPHA
        alt = difference(ra, rs, binary=binary1)
        tally.power_new += alt.p_value is not None and alt.p_value < stats.ALPHA
        tally.reps += 1
    return population, tasks, attempts, tally


def simulate_clusters(args: tuple[int, int, int, int]) -> tuple[int, int, dict[str, int]]:
    """30 tasks x 3 attempts in G clusters; logit p = mu + u_cluster + e_task with a strong shared effect."""
    clusters, tasks, reps, seed = args
    rng = random.Random(seed)
    mu, cluster_sd, task_sd = 0.3, 1.5, 0.5
    truth_rng = random.Random(1)
    draws = 200_000
    truth = (
        sum(
            1 / (1 + math.exp(-(mu + truth_rng.gauss(0, cluster_sd) + truth_rng.gauss(0, task_sd))))
            for _ in range(draws)
        )
        / draws
    )
    attempts = 3
    out = {"plain": 0, "clustered": 0, "fp plain": 0, "fp clustered": 0}
    for _ in range(reps):
        effects = [rng.gauss(0, cluster_sd) for _ in range(clusters)]
        labels = [f"c{i % clusters}" for i in range(tasks)]
        p = [1 / (1 + math.exp(-(mu + effects[i % clusters] + rng.gauss(0, task_sd)))) for i in range(tasks)]
        ca = [binomial(rng, attempts, x) for x in p]
        values = [c / attempts for c in ca]
        plain = headline_interval([task(attempts, c) for c in ca], values, 1)
        clustered = headline_interval([task(attempts, c, g) for c, g in zip(ca, labels, strict=True)], values, 1)
        out["plain"] += _covers(plain.ci95, truth)
        out["clustered"] += _covers(clustered.ci95, truth)
        # compare of two runs of the same agent, where each run also has its own per-cluster luck (e.g. the
        # environment of one repository happened to be slow): tasks of a cluster move together
        luck_a = [rng.gauss(0, 0.8) for _ in range(clusters)]
        luck_b = [rng.gauss(0, 0.8) for _ in range(clusters)]

        def run(luck: list[float], p: list[float] = p) -> list[float]:
            return [
                binomial(rng, attempts, 1 / (1 + math.exp(-(math.log(x / (1 - x)) + luck[i % clusters])))) / attempts
                for i, x in enumerate(p)
            ]

        ra, rb = run(luck_a), run(luck_b)
        out["fp plain"] += (difference(ra, rb).p_value or 1.0) < stats.ALPHA
        out["fp clustered"] += (difference(ra, rb, clusters=labels).p_value or 1.0) < stats.ALPHA
    return clusters, reps, out


def mc(rate: float, reps: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2000, help="replications per cell (default 2000)")
    parser.add_argument("--seed", type=int, default=20241101)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()
    started = time.monotonic()
    jobs = [
        (population, n, m, options.reps, options.seed + 1000 * i + 10 * n + m)
        for i, population in enumerate(POPULATIONS)
        for n in TASKS
        for m in ATTEMPTS
    ]
    cluster_jobs = [(g, 30, options.reps, options.seed + 7 + g) for g in (5, 10)]
    with ProcessPoolExecutor(max_workers=options.workers) as pool:
        results = list(pool.map(simulate_cell, jobs))
        cluster_results = list(pool.map(simulate_clusters, cluster_jobs))
    worst_fp, worst_cover = 0.0, 1.0
    for population in POPULATIONS:
        a, b = POPULATIONS[population]
        print(f"\n### Population `{population}`: p ~ Beta({a:g}, {b:g}), {options.reps} replications per cell\n")
        print(
            "| tasks × attempts | k | compare FPR (nominal 0.05) | power, +0.15 | pass@1 coverage (0.95) "
            "| pass@k coverage | pass^k coverage |"
        )
        print("|---|---:|---|---:|---|---|---|")
        for pop, n, m, t in results:
            if pop != population:
                continue
            assert t.cover is not None
            r = t.reps
            fp_new, fp_old = t.fp_new / r, t.fp_old / r
            covers = {key: value / r for key, value in t.cover.items()}
            if n >= 10:
                worst_fp = max(worst_fp, fp_new)
                worst_cover = min(worst_cover, *(v for key, v in covers.items() if key.endswith("new")))
            cells = [
                f"{n} × {m}",
                str((m + 1) // 2),
                f"**{fp_new:.3f}** (old {fp_old:.3f})",
                f"{t.power_new / r:.3f}",
                *(
                    f"**{covers[name + ' new']:.3f}** (old {covers[name + ' old']:.3f})"
                    for name in ("pass@1", "pass@k", "pass^k")
                ),
            ]
            print("| " + " | ".join(cells) + " |")
        print(
            f"\nMonte Carlo error: ±{mc(0.05, options.reps):.4f} on a rate near 0.05, "
            f"±{mc(0.95, options.reps):.4f} near 0.95 (one standard error)."
        )
    print(
        f"\n### Clustered tasks: 30 tasks × 3 attempts, strong shared effect per cluster, {options.reps} replications\n"
    )
    print("| clusters | pass@1 coverage, clusters ignored | with `cluster` | compare FPR, ignored | with `cluster` |")
    print("|---:|---:|---:|---:|---:|")
    for g, reps, out in cluster_results:
        print(
            f"| {g} | {out['plain'] / reps:.3f} | **{out['clustered'] / reps:.3f}** | {out['fp plain'] / reps:.3f} "
            f"| **{out['fp clustered'] / reps:.3f}** |"
        )
    print(
        f"\nWorst cell (new): compare FPR {worst_fp:.3f} (target ≤ 0.06), coverage {worst_cover:.3f} (target ≥ 0.93); "
        f"{time.monotonic() - started:.0f} s with {options.workers} workers."
    )


if __name__ == "__main__":
    main()
