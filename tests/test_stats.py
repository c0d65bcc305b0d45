"""Statistics against hand-computed cases and against Miller's published sample-size example."""

from __future__ import annotations

import math

import pytest

from worktrial.analysis import stats
from worktrial.analysis.compare import compare_group
from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.analysis.power import VarianceModel, estimate_from_one, estimate_from_pair, plan
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
    t4 = 2.7764451051977987  # t_{0.975, 4}
    assert d.ci95 == pytest.approx((0.4 - t4 * se, 0.4 + t4 * se))
    # sign flips of the non-zero differences 1, .5, .5: sums 2, 1, 1, 0, 0, -1, -1, -2; |S| >= 2 in 2 of 8
    assert d.p_value == pytest.approx(0.25)
    assert d.test == "sign-flip permutation (exact)"


def test_paired_difference_is_antisymmetric_and_degenerate_cases() -> None:
    a, b = [0.2, 0.4, 0.9], [0.3, 0.1, 1.0]
    ab, ba = stats.paired_difference(a, b), stats.paired_difference(b, a)
    assert ab.mean == pytest.approx(-(ba.mean or 0.0))
    assert ab.p_value == pytest.approx(ba.p_value)
    assert stats.paired_difference([0.5, 0.5], [0.5, 0.5]).p_value == 1.0
    same = stats.paired_difference([0.0, 0.0], [1.0, 1.0])
    # two tasks that both moved by 1: the exact p is 2/4, and no zero-width interval is claimed
    assert same.p_value == 0.5 and same.ci95 is None and same.stderr == 0.0
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
    variance = stats.difference_variance(1 / 9, 0.0, 0.0, 1, 1)
    assert math.ceil(stats.z_for() ** 2 * variance / 0.03**2) == 969  # Miller's normal formula
    # with t quantiles at N - 1 degrees of freedom (what a test on N tasks actually has) it takes two more
    assert stats.required_tasks(variance, 0.03) == 971
    assert stats.z_for() == pytest.approx(1.959964 + 0.841621, abs=1e-6)


def test_minimum_detectable_difference_inverts_required_tasks() -> None:
    variance = stats.difference_variance(0.05, 0.2, 0.15, 4, 2)
    assert variance == pytest.approx(0.05 + 0.05 + 0.075)
    n = stats.required_tasks(variance, 0.1)
    assert stats.minimum_detectable_difference(variance, n, df=n - 1) <= 0.1  # type: ignore[operator]
    assert stats.minimum_detectable_difference(variance, n - 1, df=n - 2) > 0.1  # type: ignore[operator]


def test_required_attempts() -> None:
    # budget = 400 * 0.01 / z^2 - 0.01; noise 0.5 -> K = ceil(0.5 / budget)
    z2 = stats.z_for(df=399) ** 2
    expected = math.ceil(0.5 / (400 * 0.01 / z2 - 0.01))
    assert stats.required_attempts(0.01, 0.25, 0.25, tasks=400, delta=0.1) == expected
    # omega^2 alone already exceeds what 20 tasks can resolve: attempts cannot help
    assert stats.required_attempts(0.2, 0.25, 0.25, tasks=20, delta=0.1) is None
    assert stats.required_attempts(0.0, 0.0, 0.0, tasks=20, delta=0.1) == 1


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
    assert pair.omega2 == pytest.approx(max(0.0, observed - pair.sigma2_a / 4 - pair.sigma2_b / 4))
    one = estimate_from_one(a, "a")
    rates = [1.0, 0.5, 0.0, 0.25]
    assert one.omega2 == pytest.approx(2 * ((stats.sample_variance(rates) or 0) - one.sigma2_a / 4))


def test_plan_answers_every_question_it_can() -> None:
    model = VarianceModel(omega2=1 / 9, sigma2_a=0.0, sigma2_b=0.0, source="test")
    result = plan(model, tasks=971, attempts=1, delta=0.03)
    assert result.tasks_needed == 971
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
