"""pass@k / pass^k against hand-computed values and as properties; group aggregates and efficiency."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worktrial.analysis.metrics import TaskInfo, build_report, efficiency_figures, pass_at_k, pass_power_k
from worktrial.model.records import AttemptRecord, Tokens


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def exact_pass_power_k(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


@pytest.mark.parametrize(
    ("n", "c", "k", "at", "power"),
    [
        (3, 2, 1, 2 / 3, 2 / 3),
        (3, 2, 2, 1.0, 1 / 3),  # any 2 of 3 include a pass; only 1 of the 3 pairs is pass+pass
        (3, 2, 3, 1.0, 0.0),
        (5, 1, 2, 0.4, 0.0),  # 1 - C(4,2)/C(5,2) = 1 - 6/10
        (10, 3, 5, 1 - 21 / 252, 0.0),  # 1 - C(7,5)/C(10,5)
        (10, 7, 3, 1 - 1 / 120, 35 / 120),  # C(3,3)/C(10,3); C(7,3)/C(10,3)
        (4, 0, 2, 0.0, 0.0),
        (4, 4, 4, 1.0, 1.0),
    ],
)
def test_hand_computed(n: int, c: int, k: int, at: float, power: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12)
    assert pass_power_k(n, c, k) == pytest.approx(power, abs=1e-12)


def test_large_n_is_stable() -> None:
    # C(2000, 1000) overflows a float; the product form does not.
    assert pass_at_k(2000, 3, 1000) == pytest.approx(float(exact_pass_at_k(2000, 3, 1000)), rel=1e-9)
    assert pass_power_k(2000, 1990, 1000) == pytest.approx(float(exact_pass_power_k(2000, 1990, 1000)), rel=1e-6)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)])
def test_invalid_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_power_k(n, c, k)


nck = st.integers(min_value=1, max_value=40).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
)


@given(nck)
def test_matches_exact_binomials(args: tuple[int, int, int]) -> None:
    n, c, k = args
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12)
    assert pass_power_k(n, c, k) == pytest.approx(float(exact_pass_power_k(n, c, k)), abs=1e-12)


@given(nck)
def test_bounds_and_order(args: tuple[int, int, int]) -> None:
    n, c, k = args
    at, power = pass_at_k(n, c, k), pass_power_k(n, c, k)
    assert 0.0 <= power <= at + 1e-12 and at <= 1.0  # equal in exact arithmetic when c == n or c < k
    assert pass_at_k(n, c, 1) == pytest.approx(c / n) == pytest.approx(pass_power_k(n, c, 1))


@given(nck)
def test_monotone_in_k(args: tuple[int, int, int]) -> None:
    n, c, _ = args
    ats = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    powers = [pass_power_k(n, c, k) for k in range(1, n + 1)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(ats))
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(powers))


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n))))
def test_monotone_in_passes(args: tuple[int, int, int]) -> None:
    n, c, k = args
    assert pass_at_k(n, c + 1, k) >= pass_at_k(n, c, k)
    assert pass_power_k(n, c + 1, k) >= pass_power_k(n, c, k)


def record(task_id: str, attempt: int, outcome: str, cost: float | None = None, **kw: object) -> AttemptRecord:
    return AttemptRecord(
        task_id=task_id,
        attempt=attempt,
        outcome=outcome,
        claimed=True,
        verified=outcome == "pass",
        duration_secs=1.0,
        agent_secs=1.0,
        verify_secs=0.0,
        cost_usd=cost,
        **kw,
    )


def test_group_means_stderr_and_categories() -> None:
    tasks = [TaskInfo("a", "A", "capability"), TaskInfo("b", "B", "capability"), TaskInfo("r", "R", "regression")]
    outcomes = {"a": ["pass", "pass"], "b": ["pass", "fail"], "r": ["timeout", "error"]}
    records = [record(t, i + 1, o) for t, os_ in outcomes.items() for i, o in enumerate(os_)]
    report = build_report("s", "S", tasks, reversed(records), k=2)
    assert [t.task_id for t in report.tasks] == ["a", "b", "r"]
    assert [a.attempt for a in report.tasks[1].attempts] == [1, 2]
    overall = report.overall
    assert (overall.tasks, overall.passed_runs, overall.total_runs) == (3, 3, 6)
    # per task pass@2 = 1, 1, 0; pass^2 = 1, 0, 0
    assert overall.pass_at_k == pytest.approx(2 / 3)
    assert overall.pass_power_k == pytest.approx(1 / 3)
    # sample sd of (1,1,0) = sqrt(1/3); se = sqrt(1/3)/sqrt(3) = 1/3
    assert overall.stderr.pass_at_k == pytest.approx(1 / 3)
    lo, hi = overall.ci95.pass_at_k or (0, 0)
    # every task has k = n = 2 attempts, so each pass@2 is one pass/fail: Clopper–Pearson for 2 of 3
    assert overall.interval == "clopper-pearson"
    from statsmodels.stats.proportion import proportion_confint

    assert (lo, hi) == pytest.approx(proportion_confint(2, 3, alpha=0.05, method="beta"), abs=1e-9)
    assert overall.curves.pass_at == pytest.approx({"1": 0.5, "2": 2 / 3})
    cap = report.categories["capability"]
    assert cap.pass_at_k == 1.0 and cap.pass_power_k == pytest.approx(0.5)
    assert report.categories["regression"].pass_at_k == 0.0
    assert report.categories["regression"].stderr.pass_at_k is None  # one task: no error bar


def test_headline_counts_the_tasks_that_reach_k() -> None:
    """A missing attempt never blanks the headline: pass@k is over the tasks with at least k attempts."""
    tasks = [TaskInfo("a", "A", "capability"), TaskInfo("b", "B", "capability"), TaskInfo("c", "C", "capability")]
    records = [record("a", 1, "pass"), record("a", 2, "pass"), record("b", 1, "fail")]
    records += [record("c", 1, "fail"), record("c", 2, "pass")]
    report = build_report("s", "S", tasks, records, k=2)
    # b has one attempt of two: left out of pass@2 (a: 1, c: 1), counted in pass@1 (curves over every task)
    assert report.overall.pass_at_k == 1.0 and report.overall.tasks_measured == 2
    assert report.overall.pass_power_k == pytest.approx(0.5)
    assert report.overall.curves.pass_at == {"1": pytest.approx(0.5)}
    assert report.tasks[1].pass_at_k is None and report.tasks[0].pass_at_k == 1.0
    # k = 1 is reached by every task: nothing is left out
    assert build_report("s", "S", tasks, records, k=1).overall.tasks_measured == 3
    # the rule of envelopes written before (audit): no headline unless every task reached k
    legacy = build_report("s", "S", tasks, records, k=2, rule="wilson").overall
    assert legacy.pass_at_k is None and legacy.tasks_measured is None


def test_unknown_cost_is_never_free() -> None:
    tokens = Tokens(input=100, output=50)
    priced = [
        record("a", 1, "pass", 0.02, tokens=tokens, turns=3),
        record("a", 2, "fail", 0.04, tokens=tokens, turns=5),
    ]
    figures = efficiency_figures(priced)
    assert figures["cost_usd"] == pytest.approx(0.06)
    assert figures["cost_per_solve"] == pytest.approx(0.06)
    assert figures["mean_cost_per_attempt"] == pytest.approx(0.03)
    assert figures["mean_tokens_per_attempt"] == 150 and figures["mean_turns_per_attempt"] == 4
    mixed = [*priced, record("a", 3, "pass", None, tokens=tokens, turns=1)]
    figures = efficiency_figures(mixed)
    assert figures["cost_usd"] == pytest.approx(0.06) and figures["unpriced_runs"] == 1
    assert figures["cost_per_solve"] is None and figures["mean_cost_per_attempt"] is None
    # Token and turn figures do not depend on price: the unpriced attempt still has both.
    assert figures["mean_tokens_per_attempt"] == 150 and figures["mean_turns_per_attempt"] == 3
    unknown_turns = efficiency_figures([*priced, record("a", 3, "pass", 0.01, tokens=tokens, turns=None)])
    assert unknown_turns["mean_turns_per_attempt"] is None and unknown_turns["mean_tokens_per_attempt"] == 150
    unknown_tokens = efficiency_figures([*priced, record("a", 3, "pass", 0.01, tokens=Tokens(), turns=2)])
    assert unknown_tokens["mean_tokens_per_attempt"] is None and unknown_tokens[
        "mean_turns_per_attempt"
    ] == pytest.approx(10 / 3)
    no_solve = efficiency_figures([record("a", 1, "fail", 0.5)])
    assert no_solve["cost_per_solve"] is None and no_solve["mean_cost_per_attempt"] == 0.5


def test_a_report_with_missing_attempts_says_what_its_headline_counts() -> None:
    """20 tasks x 5 attempts with 5% of attempts missing: the headline is a number, and the report says why."""
    from worktrial.model.envelope import Envelope, RunInfo, WorkspaceInfo
    from worktrial.render.markdown import render_markdown

    tasks = [TaskInfo(f"t{i}", f"t{i}", "capability") for i in range(20)]
    missing = {(i, 5) for i in range(0, 20, 4)}  # the fifth attempt of 5 tasks never ran
    records = [
        record(f"t{i}", j, "pass" if (i + j) % 3 else "fail")
        for i in range(20)
        for j in range(1, 6)
        if (i, j) not in missing
    ]
    report = build_report("s", "S", tasks, records, k=5)
    assert report.overall.pass_at_k is not None and report.overall.ci95.pass_at_k is not None
    assert report.overall.tasks_measured == 15
    envelope = Envelope(
        harness_version="0.1.0",
        provider=None,
        model=None,
        agent={"name": "a"},
        suite_path="suite.json",
        suite_sha256="a" * 64,
        run=RunInfo(
            id="r",
            started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:01:00Z",
            complete=False,
            workspace=WorkspaceInfo(path="/repo", base_commit="b" * 40, dirty=False),
            attempts=5,
            k=5,
            jobs=1,
        ),
        report=report,
    )
    text = render_markdown(envelope)
    assert (
        "**Missing attempts:** 5 of 100 planned attempts are missing; pass@5 and pass^5 are over the 15 of 20 tasks "
        "with at least 5 attempts." in text
    )
    assert "| **overall** | 20 | " in text and "| — |" not in text.split("## Tasks")[0]
