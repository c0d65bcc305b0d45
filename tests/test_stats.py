"""Statistics against hand-computed cases and against Miller's published sample-size example."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from worktrial.analysis import distributions, planning, stats
from worktrial.analysis.compare import compare_group
from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.analysis.power import VarianceModel, estimate_from_one, estimate_from_pair, plan
from worktrial.analysis.signflip import sign_flip
from worktrial.model.envelope import Curves, Report, TaskReport
from worktrial.model.records import AttemptRecord


def test_standard_error_hand_computed() -> None:
    # values 0, 1, 1, 1: mean 0.75, sample variance 0.25, SE = sqrt(0.25 / 4) = 0.25
    assert stats.standard_error([0.0, 1.0, 1.0, 1.0]) == pytest.approx(0.25)
    assert stats.sample_variance([2.0, 4.0, 6.0]) == pytest.approx(4.0)
    assert stats.standard_error([1.0]) is None


def test_paired_difference_hand_computed() -> None:
    a = [1.0, 0.0, 0.5, 1.0, 0.0]
    b = [1.0, 1.0, 1.0, 1.0, 0.5]
    # diffs 0, 1, 0.5, 0, 0.5: mean 0.4; squared deviations .16 .36 .01 .16 .01 = 0.7; var 0.175
    d = stats.paired_difference(a, b)
    se = math.sqrt(0.175 / 5)
    assert d.n == 5
    assert d.mean == pytest.approx(0.4)
    assert d.stderr == pytest.approx(se)
    # sign flips of the non-zero differences 1, .5, .5: sums 2, 1, 1, 0, 0, -1, -1, -2; |S| >= 2 in 2 of 8
    assert d.p_value == pytest.approx(0.25)
    assert d.test == "sign-flip permutation (exact)"
    # 5 tasks: the smallest p any sign pattern gives is 2/32 > 0.05, so the test rejects no difference at all and
    # the interval that inverts it is every difference there is
    assert d.ci95 == (-1.0, 1.0)


def test_the_interval_inverts_the_exact_test_hand_computed() -> None:
    """6 tasks, differences 0, 1, .5, 0, .5, .5: a value mu is kept while 2 x (subsets S, the empty one included,
    with sum_S (d - mu) <= 0) / 64 >= 0.05, i.e. while some task's difference lies at or below mu (and likewise
    above): the exact interval runs from the smallest difference to the largest (Hartigan 1969)."""
    diffs = [0.0, 1.0, 0.5, 0.0, 0.5, 0.5]
    exact = sign_flip(diffs)
    # at 0: subsets of the two zero tasks, 4 of 64 patterns, twice: p = 0.125
    assert exact.p_value == pytest.approx(0.125)
    assert exact.ci95 == pytest.approx((0.0, 1.0), abs=1e-8)
    d = stats.paired_difference([0.0] * 6, diffs)
    assert d.p_value == exact.p_value
    assert d.ci95 is not None and d.ci95[0] <= 0.0 <= d.ci95[1]  # p >= 0.05, so 0 is inside


def test_paired_difference_is_antisymmetric_and_degenerate_cases() -> None:
    a, b = [0.2, 0.4, 0.9], [0.3, 0.1, 1.0]
    ab, ba = stats.paired_difference(a, b), stats.paired_difference(b, a)
    assert ab.mean == pytest.approx(-(ba.mean or 0.0))
    assert ab.p_value == pytest.approx(ba.p_value)
    assert stats.paired_difference([0.5, 0.5], [0.5, 0.5]).p_value == 1.0
    same = stats.paired_difference([0.0, 0.0], [1.0, 1.0])
    # two tasks that both moved by 1: the exact p is 2/4, and no zero-width interval is claimed; the interval
    # falls back to the binomial bound over the 2 tasks (values in [0, 1] vary at most like a pass/fail)
    assert same.p_value == 0.5 and same.stderr == 0.0
    assert same.ci95 is not None and same.ci95[0] < 0.0 and same.ci95[1] == 1.0
    assert stats.paired_difference([0.0], [1.0]).stderr is None
    with pytest.raises(ValueError):
        stats.paired_difference([1.0], [1.0, 0.0])


def test_pairing_removes_shared_task_difficulty() -> None:
    """Tasks differ a lot in difficulty, both runs alike: unpaired SEs are large, the paired SE is small."""
    a = [0.0, 0.1, 0.5, 0.9, 1.0, 0.3]
    b = [0.1, 0.2, 0.6, 0.9, 1.0, 0.5]
    unpaired = math.sqrt((stats.standard_error(a) or 0) ** 2 + (stats.standard_error(b) or 0) ** 2)
    paired = stats.paired_difference(a, b).stderr or 0
    assert paired < unpaired / 5


def test_miller_sample_size_example() -> None:
    """Miller (arXiv 2411.00640): delta 0.03, omega^2 = 1/9, 80% power, alpha 0.05 -> about 969 questions."""
    variance = planning.difference_variance(1 / 9, 0.0, 0.0, 1, 1)
    assert math.ceil(stats.z_for() ** 2 * variance / 0.03**2) == 969  # Miller's normal formula
    # The sign-flip test compare runs is scaled by the differences' second moment (v + delta^2): 977 tasks. With
    # one pass/fail per task it is exact McNemar, whose steps cost more: 1042 (its exact power there is 0.806,
    # at 977 only 0.779 -- scipy's binomial distribution, summed over the discordant counts).
    assert planning.required_tasks(variance, 0.03) == 977
    assert planning.required_tasks(variance, 0.03, attempts=1) == 1042
    assert stats.z_for() == pytest.approx(1.959964 + 0.841621, abs=1e-6)


def test_minimum_detectable_difference_inverts_required_tasks() -> None:
    variance = planning.difference_variance(0.05, 0.2, 0.15, 4, 2)
    assert variance == pytest.approx(0.05 + 0.05 + 0.075)
    n = planning.required_tasks(variance, 0.1, attempts=4)
    assert planning.minimum_detectable_difference(variance, n, attempts=4) <= 0.1  # type: ignore[operator]
    assert planning.minimum_detectable_difference(variance, n - 1, attempts=4) > 0.1  # type: ignore[operator]
    # fewer than 6 tasks: no sign pattern of the exact test reaches p < 0.05, so nothing is detectable
    assert planning.fewest_tasks() == 6
    assert planning.minimum_detectable_difference(variance, 5) is None
    # a huge difference with no spread: sqrt(N) must pass t_{0.975, N-1} (2.57 at N = 6, 2.45 at N = 7)
    assert planning.required_tasks(1e-9, 0.5) == 7


def test_required_attempts() -> None:
    plan = planning.required_attempts(0.01, 0.25, 0.25, tasks=400, delta=0.1)
    assert plan is not None
    # the attempts found are the fewest whose variance lets 400 tasks detect 0.1
    for k, enough in ((plan, True), (plan - 1, False)):
        variance = planning.difference_variance(0.01, 0.25, 0.25, k, k)
        assert (planning.required_tasks(variance, 0.1, attempts=k) <= 400) is enough
    # omega^2 alone already exceeds what 20 tasks can resolve: attempts cannot help
    assert planning.required_attempts(0.2, 0.25, 0.25, tasks=20, delta=0.1) is None
    assert planning.required_attempts(0.0, 0.0, 0.0, tasks=20, delta=0.1) == 1


def test_within_and_between_task_variance() -> None:
    # 2 of 4 passed: outcomes 1,1,0,0 -> sample variance (4 * 0.25) / 3 = 1/3
    assert stats.within_task_variance(2, 4) == pytest.approx(1 / 3)
    assert stats.within_task_variance(1, 1) is None
    assert stats.mean_within_variance([(2, 4), (0, 4), (1, 1)]) == pytest.approx(1 / 6)
    # observed variance of rates 0.5, 0 is 0.125; remove the attempt noise 1/6 / 4
    assert stats.between_task_variance([0.5, 0.0], 1 / 6, 4) == pytest.approx(0.125 - 1 / 24)
    assert stats.between_task_variance([0.5, 0.5], 1 / 6, 4) == 0.0


def _report(counts: list[tuple[int, int]]) -> Report:
    tasks = [TaskInfo(f"t{i}", f"t{i}", "capability") for i in range(len(counts))]
    records = [
        AttemptRecord(
            task_id=f"t{i}",
            attempt=j + 1,
            outcome="pass" if j < c else "fail",
            claimed=True,
            verified=j < c,
            duration_secs=1.0,
            agent_secs=1.0,
            verify_secs=0.0,
        )
        for i, (c, n) in enumerate(counts)
        for j in range(n)
    ]
    return build_report("s", "s", tasks, records, k=min(n for _, n in counts))


def test_variance_estimates_from_envelopes() -> None:
    a = _report([(4, 4), (2, 4), (0, 4), (1, 4)])
    b = _report([(4, 4), (4, 4), (1, 4), (1, 4)])
    # within variances: a: (0 + 1/3 + 0 + 1/4) / 4; b: (0 + 0 + 1/4 + 1/4) / 4
    pair = estimate_from_pair(a, b, "a and b")
    assert pair.sigma2_a == pytest.approx((1 / 3 + 1 / 4) / 4)
    assert pair.sigma2_b == pytest.approx(0.5 / 4)
    diffs = [0.0, 0.5, 0.25, 0.0]
    observed = stats.sample_variance(diffs) or 0.0
    # not clipped at 0: at the runs' own 4 attempts the plan's variance is then exactly the observed one
    assert pair.omega2 == pytest.approx(observed - pair.sigma2_a / 4 - pair.sigma2_b / 4)
    assert pair.per_task(4) == pytest.approx(observed)
    one = estimate_from_one(a, "a")
    rates = [1.0, 0.5, 0.0, 0.25]
    assert one.omega2 == pytest.approx(2 * ((stats.sample_variance(rates) or 0) - one.sigma2_a / 4))


def test_plan_answers_every_question_it_can() -> None:
    model = VarianceModel(omega2=1 / 9, sigma2_a=0.0, sigma2_b=0.0, source="test")
    result = plan(model, tasks=1042, attempts=1, delta=0.03)
    assert result.tasks_needed == 1042
    assert result.minimum_detectable_difference == pytest.approx(0.03, abs=1e-4)
    assert result.attempts_needed == 1
    assert plan(model, tasks=None, attempts=1, delta=None).minimum_detectable_difference is None


def test_task_report_type_is_what_compare_reads() -> None:
    """compare recomputes from counts; a curve that disagrees with the counts must not leak through."""
    t = TaskReport(
        task_id="x",
        name="x",
        category="capability",
        passed_runs=1,
        total_runs=2,
        pass_at_k=0.5,
        pass_power_k=0.5,
        curves=Curves(pass_at={"1": 0.9}),
        attempts=[],
    )
    g = compare_group("overall", [(t, t)], 1)
    assert g.pass_at_1.a == pytest.approx(0.5)


# --- intervals that hold where readers look (issue 30) --------------------------------------------------------


@pytest.mark.parametrize(("x", "n"), [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (20, 20), (17, 50), (0, 200)])
def test_clopper_pearson_matches_statsmodels(x: int, n: int) -> None:
    from statsmodels.stats.proportion import proportion_confint

    assert distributions.clopper_pearson(x, n) == pytest.approx(
        proportion_confint(x, n, alpha=0.05, method="beta"), abs=1e-12
    )


def test_the_default_headline_interval_covers_at_every_rate() -> None:
    """At k = attempts each task is one pass/fail: the exact coverage of Clopper–Pearson over tasks, summed over the
    binomial distribution, is at least 95% at every true rate (Wilson's fell to 0.84 near 0 and 1)."""
    for n in (5, 10, 20, 50):
        intervals = [distributions.clopper_pearson(x, n) for x in range(n + 1)]
        for i in range(1, 200):
            rate = i / 200
            covered = sum(
                math.comb(n, x) * rate**x * (1 - rate) ** (n - x)
                for x, (lo, hi) in enumerate(intervals)
                if lo <= rate <= hi
            )
            assert covered >= 0.95 - 1e-12, (n, rate, covered)
    wilson = [stats.wilson(x, 10) for x in range(11)]
    worst_wilson = min(
        sum(math.comb(10, x) * r**x * (1 - r) ** (10 - x) for x in range(11) if _in(wilson[x], r))
        for r in (i / 200 for i in range(1, 200))
    )
    assert worst_wilson < 0.87  # 0.86: the rule before


def _in(interval: tuple[float, float], value: float) -> bool:
    return interval[0] <= value <= interval[1]


def test_no_spread_falls_back_to_tasks_never_to_tasks_times_attempts() -> None:
    """10 tasks x 10 attempts, none ever solved: pass@1 and pass@10 get the same bound over the 10 tasks."""
    at1 = stats.rate_interval([0.0] * 10, binary=False, cap=100)
    at10 = stats.rate_interval([0.0] * 10, binary=True, cap=10)
    assert at1.ci95 == at10.ci95 == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)))  # [0, 0.308], not [0, 0.036]
    # every task at 5 of 10: no spread, still the binomial bound over tasks
    half = stats.rate_interval([0.5] * 10, binary=False, cap=100)
    assert half.ci95 == pytest.approx(distributions.clopper_pearson(5, 10)) and "no spread" in (half.method or "")


def test_cr2_and_its_degrees_of_freedom_against_the_matrix_formulas() -> None:
    """The closed forms of ``cluster_robust`` against Bell & McCaffrey's CR2 and Imbens & Kolesár's degrees of
    freedom computed with matrices (numpy), for one big cluster among small ones."""
    import numpy as np

    values = [1.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0]
    clusters: list[str | None] = [*(["big"] * 5), "a", "a", "b", None]
    se, df = stats.cluster_robust(values, clusters) or (0.0, 0.0)
    n = len(values)
    x = np.ones((n, 1))
    hat = x @ x.T / n
    residual = np.array(values) - np.mean(values)
    groups = [[0, 1, 2, 3, 4], [5, 6], [7], [8]]
    meat = np.zeros((1, 1))
    columns = []
    for g in groups:
        block = np.eye(len(g)) - hat[np.ix_(g, g)]
        w, v = np.linalg.eigh(block)
        adjust = v @ np.diag(w**-0.5) @ v.T
        meat += x[g].T @ adjust @ np.outer(residual[g], residual[g]) @ adjust @ x[g]
        column = np.zeros(n)
        column += (np.eye(n) - hat)[:, g] @ adjust @ x[g][:, 0] / n
        columns.append(column)
    assert se == pytest.approx(math.sqrt(meat[0, 0]) / n)
    gram = np.array(columns) @ np.array(columns).T
    eigen = np.linalg.eigvalsh(gram)
    assert df == pytest.approx(eigen.sum() ** 2 / (eigen**2).sum())
    assert df < 3  # fewer than G - 1 = 3: the big cluster counts for less than three independent ones


def test_a_big_cluster_is_not_trusted_like_many_small_ones() -> None:
    """Seeded: 40 tasks, 20 of them in one cluster with a strong shared effect. The report's interval covers the
    true rate at least 93% of the time; CR1 with G - 1 degrees of freedom (the rule before) covered far less."""
    rng = random.Random(30)
    labels: list[str | None] = [*(["big"] * 20), *(f"c{i // 2}" for i in range(20))]
    names = sorted({str(g) for g in labels})
    truth_rng = random.Random(1)
    draws = [1 / (1 + math.exp(-(truth_rng.gauss(0, 1.5) + truth_rng.gauss(0, 0.5)))) for _ in range(100_000)]
    truth = sum(draws) / len(draws)
    covered = old = 0
    reps = 300
    for _ in range(reps):
        effect = {g: rng.gauss(0, 1.5) for g in names}
        rates = [1 / (1 + math.exp(-(effect[str(g)] + rng.gauss(0, 0.5)))) for g in labels]
        values = [sum(rng.random() < p for _ in range(3)) / 3 for p in rates]
        covered += _in(stats.rate_interval(values, binary=False, cap=120, clusters=labels).ci95 or (2, 2), truth)
        before = stats.rate_interval(values, binary=False, cap=120, clusters=labels, rule="wilson").ci95
        old += _in(before or (2, 2), truth)
    assert covered / reps >= 0.93
    assert old / reps < 0.9


def test_a_hard_suite_pass_at_1_interval_covers() -> None:
    """Seeded: 85% of tasks unsolvable, 10 tasks x 10 attempts. The issue measured 0.73 coverage for pass@1 here."""
    rng = random.Random(7)
    truth = 0.15 * 0.5
    reps, covered = 400, 0
    for _ in range(reps):
        rates = [0.0 if rng.random() < 0.85 else rng.random() for _ in range(10)]
        values = [sum(rng.random() < p for _ in range(10)) / 10 for p in rates]
        covered += _in(stats.rate_interval(values, binary=False, cap=100).ci95 or (2, 2), truth)
    assert covered / reps >= 0.93


def kept_by_the_exact_test(sums: list[float], sizes: list[int] | None = None) -> tuple[float, float]:
    """The exact sign-flip test's interval by brute force: the (size-weighted) subset means at which both one-sided
    tails, counting the empty subset, hold at least 2.5% of the 2^N sign patterns (Hartigan 1969)."""
    sizes = sizes or [1] * len(sums)
    means = sorted(
        sum(sums[i] for i in s) / sum(sizes[i] for i in s)
        for r in range(1, len(sums) + 1)
        for s in itertools.combinations(range(len(sums)), r)
    )
    need = 0.05 * 2 ** (len(sums) - 1)
    low = next(m for m in means if 1 + sum(x <= m + 1e-12 for x in means) >= need)
    high = next(m for m in reversed(means) if 1 + sum(x >= m - 1e-12 for x in means) >= need)
    return low, high


def test_the_exact_interval_matches_brute_force_and_agrees_with_the_p_value() -> None:
    """Hartigan's interval by enumerating every subset mean, for tasks and for unequal clusters; and over random
    data of every size the CI excludes 0 exactly when p < 0.05."""
    rng = random.Random(11)
    for trial in range(12):
        units = rng.randint(6, 9)
        sums = [
            rng.choice([-1.0, -2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3, 1.0]) + rng.choice([0.0, 0.1]) for _ in range(units)
        ]
        sizes = [rng.randint(1, 3) for _ in range(units)] if trial % 2 else [1] * units
        result = sign_flip(sums, sizes, bounds=(-2.0, 2.0))
        assert result.ci95 == pytest.approx(kept_by_the_exact_test(sums, sizes), abs=1e-7)
    for _ in range(300):
        n, k = rng.choice([3, 6, 9, 15, 22, 23, 40, 120]), rng.choice([1, 2, 3, 10])
        rates = [rng.random() ** rng.choice([0.3, 1.0, 3.0]) for _ in range(n)]
        shift = rng.choice([0.0, 0.0, 0.1, 0.3])
        a = [sum(rng.random() < p for _ in range(k)) / k for p in rates]
        b = [sum(rng.random() < min(1.0, p + shift) for _ in range(k)) / k for p in rates]
        clusters = [f"g{rng.randint(0, n // 3)}" for _ in range(n)] if rng.random() < 0.3 else None
        d = stats.paired_difference(a, b, binary=k == 1, clusters=clusters)
        if d.ci95 is not None and d.p_value is not None:
            assert (d.ci95[0] <= 0.0 <= d.ci95[1]) is (d.p_value >= 0.05)


def test_the_issues_compare_example_is_consistent() -> None:
    """10 tasks, 4 improved and none got worse: exact McNemar p = 0.125, so the CI must hold 0 (it used to be
    [+0.012, +0.488] from a t interval beside that p-value)."""
    a = [0.0] * 4 + [1.0] * 3 + [0.0] * 3
    b = [1.0] * 4 + [1.0] * 3 + [0.0] * 3
    d = stats.paired_difference(a, b, binary=True)
    assert d.p_value == pytest.approx(0.125) and d.ci95 is not None and d.ci95[0] <= 0.0 < 0.4 <= d.ci95[1]


def test_planned_tasks_deliver_the_power() -> None:
    """Seeded: plan a comparison from the true variances (tasks with p ~ Beta(0.6, 0.4), run B solving each with
    min(1, p + 0.2), 3 attempts) and run the exact test at the planned N: it rejects at least 78% of the time."""
    rng = random.Random(5)
    pairs = [(p, min(1.0, p + 0.2)) for p in (rng.betavariate(0.6, 0.4) for _ in range(50_000))]
    delta = stats.mean([b - a for a, b in pairs])
    model = VarianceModel.from_true_rates(pairs)
    planned = plan(model, tasks=None, attempts=3, delta=delta).tasks_needed
    assert planned is not None
    reps, hits = 300, 0
    for _ in range(reps):
        rates = [rng.betavariate(0.6, 0.4) for _ in range(planned)]
        a = [sum(rng.random() < p for _ in range(3)) / 3 for p in rates]
        b = [sum(rng.random() < min(1.0, p + 0.2) for _ in range(3)) / 3 for p in rates]
        hits += (stats.paired_difference(a, b, interval=False).p_value or 1.0) < 0.05
    assert hits / reps >= 0.78
