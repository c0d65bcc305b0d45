"""Calibration of worktrial's error bars: do its 95% intervals cover, does `compare` reject 5% under the null, and
does `worktrial power` deliver the power it promises?

Simulates evals from task populations whose true values are known and runs worktrial's own functions on each
simulated run: the report's interval (`headline_interval`), compare's paired test and interval
(`stats.paired_difference`, what `worktrial compare` prints) and the planner (`power.plan`, what
`worktrial power` prints). The grid:

  populations  easy      p ~ Beta(4, 0.4): mostly easy, mean 0.91 -- pass@k near 1
               mixed     p ~ Beta(0.6, 0.4): many tasks near 0 or 1, mean 0.6 -- typical of agent evals
               rare      85% of tasks never solvable (p = 0), the rest p ~ Uniform(0, 1): a hard suite
               u-shaped  p ~ Beta(0.2, 0.2): nearly every task always or never solved
               clusters  one cluster holds half the tasks, the rest come in pairs; logit p = 0.3 + cluster effect
                         (sd 1.5) + task effect (sd 0.5) + the run's own luck per cluster (sd 0.8); `cluster` declared
  tasks        5, 10, 20, 50, 100, 200
  attempts     1, 3, 5, 10
  k            every k from 1 to attempts (the report's headline k, default = attempts, can be any of them)

Per cell: the coverage of the report's 95% CI of pass@k and pass^k at every k; compare's false-positive rate at
alpha = 0.05 for its primary test (pass@1) and for the headline pass@k at k = attempts (two runs of the same
agent); its power and the coverage of its 95% CI of B - A when B solves each task with probability
min(1, p + 0.15). Then the planner: for each population and attempt count, the tasks `worktrial power` asks for
(from the true variances) and the power the exact test achieves at that N; and from two 30-task pilot runs
(`--from A --from B`), the ratio of the estimated to the true per-task variance. "old" columns apply the rules
worktrial used before: Wilson intervals with CR1 cluster errors; the t interval of a paired difference; Miller's
normal sample size with t quantiles; the across-task variance of a pair of runs clipped at 0.

Seeded, so every run prints the same tables; the Monte Carlo error of a rate r over R replications is
sqrt(r (1 - r) / R), printed with every worst cell.

    .venv/bin/python benchmarks/calibration.py            # the full grid, 2,000 replications per cell
    .venv/bin/python benchmarks/calibration.py --quick    # 10 and 50 tasks x 3 and 10 attempts, 300 replications
    .venv/bin/python benchmarks/calibration.py --reps 400 # the full grid, fewer replications
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from worktrial.analysis import stats
from worktrial.analysis.metrics import headline_interval, pass_at_k, pass_power_k
from worktrial.analysis.power import VarianceModel, estimate_from_pair, plan
from worktrial.model.envelope import Curves, Report, TaskReport

TASKS = (5, 10, 20, 50, 100, 200)
ATTEMPTS = (1, 3, 5, 10)
QUICK_TASKS = (10, 50)
QUICK_ATTEMPTS = (3, 10)
SHIFT = 0.15
"""The alternative: run B solves each task with probability min(1, p + SHIFT)."""
PLAN_SHIFT = 0.2
PLAN_ATTEMPTS = (1, 3, 10)
PILOT_TASKS = 30
TRUTH_DRAWS = 400_000
Component = tuple[float, str, tuple[float, float]]
POPULATIONS: dict[str, list[Component]] = {
    "easy": [(1.0, "beta", (4.0, 0.4))],
    "mixed": [(1.0, "beta", (0.6, 0.4))],
    "rare": [(0.85, "point", (0.0, 0.0)), (0.15, "beta", (1.0, 1.0))],
    "u-shaped": [(1.0, "beta", (0.2, 0.2))],
}
CLUSTERS = "clusters"
MU, CLUSTER_SD, TASK_SD, LUCK_SD = 0.3, 1.5, 0.5, 0.8
TARGET_FPR, TARGET_COVERAGE, TARGET_POWER = 0.06, 0.93, 0.78
POWER_ROW = "achieved power at the planned N"


def draw_p(rng: random.Random, population: list[Component]) -> float:
    u = rng.random()
    for weight, kind, (a, b) in population:
        if u < weight or (weight, kind, (a, b)) == population[-1]:
            return a if kind == "point" else rng.betavariate(a, b)
        u -= weight
    raise AssertionError("unreachable")


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def cluster_labels(tasks: int) -> list[str]:
    """One cluster of half the tasks, the rest in pairs (the last alone when the count is odd)."""
    big = max(2, tasks // 2)
    return ["big"] * big + [f"c{i // 2}" for i in range(tasks - big)]


@dataclass(frozen=True)
class Draw:
    """One replication's true per-task probabilities for run A, its null twin B and the better run S."""

    a: list[float]
    b: list[float]
    s: list[float]
    labels: list[str] | None


def draw(rng: random.Random, population: str, tasks: int) -> Draw:
    if population == CLUSTERS:
        labels = cluster_labels(tasks)
        names = sorted(set(labels))
        effect = {g: rng.gauss(0, CLUSTER_SD) for g in names}
        base = [MU + effect[g] + rng.gauss(0, TASK_SD) for g in labels]

        def run() -> list[float]:
            luck = {g: rng.gauss(0, LUCK_SD) for g in names}
            return [logistic(x + luck[g]) for x, g in zip(base, labels, strict=True)]

        a, b = run(), run()
        return Draw(a, b, [min(1.0, p + SHIFT) for p in run()], labels)
    p = [draw_p(rng, POPULATIONS[population]) for _ in range(tasks)]
    return Draw(p, p, [min(1.0, x + SHIFT) for x in p], None)


def truths(population: str, attempts: Sequence[int]) -> dict[str, float]:
    """True pass@k, pass^k (the n -> infinity estimands 1 - E[(1-p)^k], E[p^k]) and B - A, by seeded integration."""
    rng = random.Random(1)
    ks = range(1, max(attempts) + 1)
    sums: defaultdict[str, float] = defaultdict(float)
    for _ in range(TRUTH_DRAWS):
        if population == CLUSTERS:
            sd = math.sqrt(CLUSTER_SD**2 + TASK_SD**2 + LUCK_SD**2)
            p = logistic(MU + rng.gauss(0, sd))
        else:
            p = draw_p(rng, POPULATIONS[population])
        for k in ks:
            sums[f"at{k}"] += 1 - (1 - p) ** k
            sums[f"pow{k}"] += p**k
        sums["shift"] += min(1.0, p + SHIFT) - p
    return {key: value / TRUTH_DRAWS for key, value in sums.items()}


def task(n: int, c: int, cluster: str | None = None, task_id: str = "t") -> TaskReport:
    """Only what the statistics read: model_construct skips validation for speed."""
    return TaskReport.model_construct(
        task_id=task_id,
        name=task_id,
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


def covers(interval: tuple[float, float] | None, truth: float) -> bool:
    return interval is not None and interval[0] - 1e-12 <= truth <= interval[1] + 1e-12


Job = tuple[str, int, int, int, int, tuple[int, ...], dict[str, float]]


def simulate_cell(job: Job) -> tuple[str, int, int, int, Counter[str]]:
    """Counts of covered intervals and rejections over ``reps`` replications of one cell."""
    population, tasks, attempts, reps, seed, ks, truth = job
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    at = {k: [pass_at_k(attempts, c, k) for c in range(attempts + 1)] for k in ks}
    power = {k: [pass_power_k(attempts, c, k) for c in range(attempts + 1)] for k in ks}
    for _ in range(reps):
        d = draw(rng, population, tasks)
        ca = [binomial(rng, attempts, p) for p in d.a]
        cb = [binomial(rng, attempts, p) for p in d.b]
        cs = [binomial(rng, attempts, p) for p in d.s]
        labels: Sequence[str | None] = d.labels or [None] * tasks
        reports = [task(attempts, c, g) for c, g in zip(ca, labels, strict=True)]
        for k in ks:
            for name, table in (("at", at[k]), ("pow", power[k])):
                if name == "pow" and k == 1:
                    continue
                values = [table[c] for c in ca]
                kind = "at1" if k == 1 else f"{name}{'-n' if k == attempts else '-mid'}"
                new = headline_interval(reports, values, k)
                old = headline_interval(reports, values, k, rule="wilson")
                tally[f"{kind} {k} new"] += covers(new.ci95, truth[f"{name}{k}"])
                tally[f"{kind} {k} old"] += covers(old.ci95, truth[f"{name}{k}"])
        clusters = d.labels
        binary = attempts == 1
        ra, rb, rs = ([c / attempts for c in cs_] for cs_ in (ca, cb, cs))
        null = stats.paired_difference(ra, rb, binary=binary, clusters=clusters, interval=False)
        tally["fp pass@1"] += (null.p_value or 1.0) < stats.ALPHA
        solved_a, solved_b = ([1.0 if c else 0.0 for c in cs_] for cs_ in (ca, cb))
        headline = stats.paired_difference(solved_a, solved_b, binary=True, clusters=clusters, interval=False)
        tally["fp headline"] += (headline.p_value or 1.0) < stats.ALPHA
        alt = stats.paired_difference(ra, rs, binary=binary, clusters=clusters)
        tally["power"] += (alt.p_value or 1.0) < stats.ALPHA
        tally["compare-ci new"] += covers(alt.ci95, truth["shift"])
        tally["compare-ci old"] += covers(old_compare_interval(ra, rs, clusters), truth["shift"])
    return population, tasks, attempts, reps, tally


def old_compare_interval(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[str | None] | None
) -> tuple[float, float] | None:
    """The rule before: mean difference +- t x SE, with CR1 errors and G - 1 degrees of freedom for clusters."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    if clusters is None:
        se, df = stats.standard_error(diffs), len(diffs) - 1
    else:
        se, df = stats.cluster_robust_se(diffs, clusters), len(set(clusters)) - 1
    if not se or df < 1:
        return None
    m = stats.mean(diffs)
    return (m - stats.t95(df) * se, m + stats.t95(df) * se)


PlanJob = tuple[str, int, int, int]


@dataclass(frozen=True)
class PlanResult:
    population: str
    attempts: int
    delta: float
    planned: int
    achieved: float
    old_planned: int
    old_achieved: float
    reps: int
    pilot_ratio: float | None
    """Mean over pilots of the estimated / true per-task variance (None: one attempt cannot estimate it)."""
    old_pilot_ratio: float | None
    pilot_median: int


def old_required_tasks(variance: float, delta: float) -> int:
    """The rule before: Miller's normal formula, grown until its t-quantile version holds."""
    n = max(2, math.ceil(stats.z_for() ** 2 * variance / delta**2 - 1e-9))
    while stats.z_for(df=n - 1) ** 2 * variance / delta**2 > n + 1e-9:
        n += 1
    return n


def achieved_power(rng: random.Random, population: str, attempts: int, tasks: int, reps: int) -> float:
    hits = 0
    for _ in range(reps):
        p = [draw_p(rng, POPULATIONS[population]) for _ in range(tasks)]
        ra = [binomial(rng, attempts, x) / attempts for x in p]
        rb = [binomial(rng, attempts, min(1.0, x + PLAN_SHIFT)) / attempts for x in p]
        hits += (stats.paired_difference(ra, rb, binary=attempts == 1, interval=False).p_value or 1.0) < stats.ALPHA
    return hits / reps


def simulate_plan(job: PlanJob) -> PlanResult:
    """The planned N for PLAN_SHIFT from the true variances, and the power the exact test achieves there."""
    population, attempts, reps, seed = job
    rng = random.Random(seed)
    pairs = [(p, min(1.0, p + PLAN_SHIFT)) for p in (draw_p(rng, POPULATIONS[population]) for _ in range(200_000))]
    delta = stats.mean([b - a for a, b in pairs])
    model = VarianceModel.from_true_rates(pairs)
    planned = plan(model, tasks=None, attempts=attempts, delta=delta).tasks_needed
    assert planned is not None
    old_planned = old_required_tasks(model.per_task(attempts), delta)
    achieved = achieved_power(rng, population, attempts, planned, reps)
    old_achieved = achieved_power(rng, population, attempts, old_planned, reps)
    ratio = old_ratio = None
    pilot_n = 0
    if attempts > 1:  # one attempt per task cannot estimate the attempt noise (power asks for --sigma2)
        ratios, old_ratios, sizes = [], [], []
        for i in range(reps // 4):
            p = [draw_p(rng, POPULATIONS[population]) for _ in range(PILOT_TASKS)]
            a = [task(attempts, binomial(rng, attempts, x), task_id=f"t{j}") for j, x in enumerate(p)]
            b = [
                task(attempts, binomial(rng, attempts, min(1.0, x + PLAN_SHIFT)), task_id=f"t{j}")
                for j, x in enumerate(p)
            ]
            estimated = estimate_from_pair(_report(a), _report(b), f"pilot {i}")
            ratios.append(estimated.per_task(attempts) / model.per_task(attempts))
            clipped = estimated.model_copy(update={"omega2": max(0.0, estimated.omega2)})  # the estimate before
            old_ratios.append(clipped.per_task(attempts) / model.per_task(attempts))
            sizes.append(plan(estimated, tasks=None, attempts=attempts, delta=delta).tasks_needed or 0)
        ratio, old_ratio, pilot_n = stats.mean(ratios), stats.mean(old_ratios), sorted(sizes)[len(sizes) // 2]
    return PlanResult(
        population, attempts, delta, planned, achieved, old_planned, old_achieved, reps, ratio, old_ratio, pilot_n
    )


def _report(tasks: list[TaskReport]) -> Report:
    fields: dict[str, object] = {"suite_id": "s", "suite_name": "s", "k": 1, "tasks": tasks}
    return Report.model_construct(**fields)  # type: ignore[arg-type]


def mc(rate: float, reps: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-12) / reps)


@dataclass
class Worst:
    value: float
    cell: str
    reps: int


def _fmt(new: float, old: float | None = None) -> str:
    return f"**{new:.3f}**" + (f" (old {old:.3f})" if old is not None else "")


def report(results: Sequence[tuple[str, int, int, int, Counter[str]]], populations: Sequence[str]) -> dict[str, Worst]:
    """Markdown tables per population, and the worst cell of every interval and test."""
    worst: dict[str, Worst] = {}

    def note(name: str, value: float, cell: str, reps: int, low_is_bad: bool = True) -> None:
        w = worst.get(name)
        if w is None or (value < w.value if low_is_bad else value > w.value):
            worst[name] = Worst(value, cell, reps)

    labels = {
        "at1": "report pass@1",
        "at-mid": "report pass@k, 1 < k < attempts",
        "pow-mid": "report pass^k, 1 < k < attempts",
        "at-n": "report pass@k at k = attempts (default headline)",
        "pow-n": "report pass^k at k = attempts (default headline)",
    }
    for population in populations:
        print(f"\n#### Population `{population}`\n")
        print(
            "| tasks × attempts | pass@1 CI | pass@k CI, worst 1<k<n | pass^k CI, worst 1<k<n | pass@n CI | pass^n CI "
            "| compare FPR pass@1 / pass@n | power +0.15 | compare CI |"
        )
        print("|---|---|---|---|---|---|---|---:|---|")
        for pop, tasks, attempts, reps, t in results:
            if pop != population:
                continue
            cell = f"{population} {tasks}×{attempts}"
            cells = [f"{tasks} × {attempts}"]
            for kind in labels:
                keys = [key[: -len(" new")] for key in t if key.startswith(kind + " ") and key.endswith(" new")]
                if not keys:
                    cells.append("—")
                    continue
                pick = min(keys, key=lambda key: t[key + " new"])
                new, old = t[pick + " new"] / reps, t[pick + " old"] / reps
                note(labels[kind], new, f"{cell}, k = {pick.split()[-1]}", reps)
                note(labels[kind] + " (old rule)", old, f"{cell}, k = {pick.split()[-1]}", reps)
                cells.append(_fmt(new, old))
            fp1, fpn = t["fp pass@1"] / reps, t["fp headline"] / reps
            note("compare FPR, pass@1 (primary)", fp1, cell, reps, low_is_bad=False)
            note("compare FPR, pass@k at k = attempts", fpn, cell, reps, low_is_bad=False)
            ci_new, ci_old = t["compare-ci new"] / reps, t["compare-ci old"] / reps
            note("compare 95% CI of B − A (pass@1)", ci_new, cell, reps)
            note("compare 95% CI of B − A (pass@1) (old rule)", ci_old, cell, reps)
            cells += [f"{fp1:.3f} / {fpn:.3f}", f"{t['power'] / reps:.3f}", _fmt(ci_new, ci_old)]
            print("| " + " | ".join(cells) + " |")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, help="replications per cell (default 2000; 300 with --quick)")
    parser.add_argument("--quick", action="store_true", help="10 and 50 tasks x 3 and 10 attempts only")
    parser.add_argument("--seed", type=int, default=20241101)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()
    reps = options.reps or (300 if options.quick else 2000)
    tasks_grid, attempts_grid = (QUICK_TASKS, QUICK_ATTEMPTS) if options.quick else (TASKS, ATTEMPTS)
    populations = [*POPULATIONS, CLUSTERS]
    started, cpu_before = time.monotonic(), time.process_time()
    truth = {population: truths(population, attempts_grid) for population in populations}
    jobs: list[Job] = [
        (population, n, m, reps, options.seed + 100_000 * i + 100 * n + m, tuple(range(1, m + 1)), truth[population])
        for i, population in enumerate(populations)
        for n in tasks_grid
        for m in attempts_grid
    ]
    jobs.sort(key=lambda job: -job[1] * (job[2] + 4))  # the longest first, so the workers finish together
    plan_jobs: list[PlanJob] = [
        (population, m, reps, options.seed + 7 * i + m)
        for i, population in enumerate(POPULATIONS)
        for m in (PLAN_ATTEMPTS if not options.quick else (3,))
    ]
    with ProcessPoolExecutor(max_workers=options.workers) as pool:
        cells = list(pool.map(simulate_cell, jobs))
        plans = list(pool.map(simulate_plan, plan_jobs))
    cells.sort(key=lambda c: (populations.index(c[0]), c[1], c[2]))
    print(f"\n### Calibration: {reps} replications per cell, seed {options.seed}\n")
    print("Bold: worktrial now; in parentheses the rule it used before. CI columns: coverage of the 95% interval.")
    worst = report(cells, populations)
    print("\n#### `worktrial power`: planned tasks and the power the exact test achieves there\n")
    print(
        f"| population | attempts | true δ (B = p + {PLAN_SHIFT}) | planned tasks | achieved power (target ≥ 0.78) "
        f"| `--from` {PILOT_TASKS}-task pilots: estimated / true variance | median N planned from pilots |"
    )
    print("|---|---:|---:|---|---|---|---:|")
    for r in plans:
        pilot = (
            f"**{r.pilot_ratio:.3f}** (old {r.old_pilot_ratio:.3f})" if r.pilot_ratio is not None else "— (--sigma2)"
        )
        print(
            f"| {r.population} | {r.attempts} | {r.delta:.3f} | **{r.planned}** (old {r.old_planned}) "
            f"| **{r.achieved:.3f}** ± {mc(r.achieved, r.reps):.3f} (old {r.old_achieved:.3f}) | {pilot} "
            f"| {r.pilot_median or '—'} |"
        )
        for name, value in ((POWER_ROW, r.achieved), (POWER_ROW + " (old rule)", r.old_achieved)):
            lowest = worst.get(name)
            if lowest is None or value < lowest.value:
                worst[name] = Worst(value, f"{r.population}, {r.attempts} attempts", r.reps)
    print("\n#### Worst cell of every interval and test\n")
    print("| interval or test | worst cell | value ± Monte Carlo error | target | met |")
    print("|---|---|---:|---|---|")
    for name, w in worst.items():
        if "FPR" in name:
            target, met = f"≤ {TARGET_FPR}", w.value <= TARGET_FPR
        elif "power" in name:
            target, met = f"≥ {TARGET_POWER}", w.value >= TARGET_POWER
        else:
            target, met = f"≥ {TARGET_COVERAGE}", w.value >= TARGET_COVERAGE
        verdict = "—" if "(old rule)" in name else "yes" if met else "**no**"
        print(f"| {name} | {w.cell} | {w.value:.3f} ± {mc(w.value, w.reps):.3f} | {target} | {verdict} |")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu_before + children.ru_utime + children.ru_stime
    print(
        f"\n{len(jobs)} cells and {len(plan_jobs)} plans in {time.monotonic() - started:.0f} s wall, {cpu:.0f} s CPU, "
        f"{options.workers} workers."
    )


if __name__ == "__main__":
    main()
