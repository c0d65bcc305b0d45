"""Small-sample inference against independent references (scipy, statsmodels) and hand-computed cases.

The references are computed here, in the test, from the same data; worktrial's own code uses neither library.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sp
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from worktrial.analysis import stats
from worktrial.analysis.leaderboard import Contender, build_leaderboard
from worktrial.analysis.metrics import TaskInfo, build_report, pass_at_k
from worktrial.model.envelope import Envelope, RunInfo, WorkspaceInfo
from worktrial.model.records import AttemptRecord


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 9, 10, 19, 29, 49, 99, 500, 4999, 20000])
@pytest.mark.parametrize("q", [0.6, 0.8, 0.9, 0.975, 0.995, 0.1, 0.025])
def test_t_quantile_matches_scipy(df: int, q: float) -> None:
    assert stats.t_quantile(q, df) == pytest.approx(sp.t.ppf(q, df), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("x", "n"), [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (20, 20), (17, 50), (0, 200)])
def test_wilson_matches_statsmodels(x: int, n: int) -> None:
    assert stats.wilson(x, n) == pytest.approx(proportion_confint(x, n, alpha=0.05, method="wilson"), abs=1e-12)
    # the issue's example: 20 of 20 is [0.84, 1.00], never [1, 1]
    if (x, n) == (20, 20):
        assert round(stats.wilson(x, n)[0], 2) == 0.84


@pytest.mark.parametrize(("b", "c"), [(4, 0), (0, 4), (3, 1), (5, 5), (10, 2), (0, 0), (1, 9), (25, 12)])
def test_exact_mcnemar_matches_statsmodels(b: int, c: int) -> None:
    reference = mcnemar([[10, b], [c, 7]], exact=True).pvalue
    assert stats.binomial_two_sided(b, b + c) == pytest.approx(reference)


def test_mcnemar_on_the_issues_example() -> None:
    """10 tasks, 1 attempt, 4 discordant tasks all one way: the exact p is 0.125 (the old normal p was 0.014)."""
    a = [0.0] * 4 + [1.0] * 3 + [0.0] * 3
    b = [1.0] * 4 + [1.0] * 3 + [0.0] * 3
    d = stats.paired_difference(a, b, binary=True)
    assert d.p_value == pytest.approx(0.125) and d.test == "exact McNemar"
    # the sign-flip permutation test is the same test on pass/fail data
    assert stats.sign_flip_p([y - x for x, y in zip(a, b, strict=True)])[0] == pytest.approx(0.125)


def _brute_force_sign_flip(diffs: list[float]) -> float:
    observed = abs(math.fsum(diffs))
    hits = 0
    for signs in itertools.product((1, -1), repeat=len(diffs)):
        hits += abs(math.fsum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed - 1e-12
    return hits / (1 << len(diffs))


@pytest.mark.parametrize("seed", range(6))
def test_sign_flip_exact_matches_brute_force_and_scipy(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 14)
    diffs = [rng.choice([-1, -2 / 3, -1 / 3, 0, 1 / 3, 2 / 3, 1]) + rng.choice([0, 0.25]) for _ in range(n)]
    p, method, error = stats.sign_flip_p(diffs)
    assert method == "sign-flip permutation (exact)" and error is None
    assert p == pytest.approx(_brute_force_sign_flip(diffs))
    reference = sp.permutation_test(
        (np.array(diffs),), np.sum, permutation_type="samples", alternative="two-sided", n_resamples=np.inf
    ).pvalue
    assert p == pytest.approx(reference, abs=1e-9)


@pytest.mark.slow
def test_sign_flip_large_suites_exact_by_dynamic_programming_or_seeded_monte_carlo() -> None:
    rng = random.Random(7)
    # 60 tasks x 3 attempts: differences are multiples of 1/3, few distinct sums -> exact by dynamic programming
    diffs = [rng.choice([-1, -2 / 3, -1 / 3, 0, 0, 1 / 3, 2 / 3, 1]) for _ in range(60)]
    p, method, _ = stats.sign_flip_p(diffs)
    assert method == "sign-flip permutation (exact)"
    # independent check: 100,000 random sign patterns drawn by numpy (standard error 0.0014)
    d = np.array(diffs)
    signs = np.random.default_rng(1).choice([-1.0, 1.0], size=(100_000, len(diffs)))
    reference = float((np.abs(signs @ d) >= abs(d.sum()) - 1e-9).mean())
    assert p == pytest.approx(reference, abs=0.006)
    # arbitrary real differences: Monte Carlo, reproducible, with its error
    reals = [rng.gauss(0.05, 0.3) for _ in range(40)]
    first, second = stats.sign_flip_p(reals), stats.sign_flip_p(reals)
    assert first == second and "Monte Carlo" in first[1] and first[2] is not None
    z = math.fsum(reals) / math.sqrt(math.fsum(d * d for d in reals))
    assert first[0] == pytest.approx(stats.two_sided_p(z), abs=5 * first[2] + 0.01)


@pytest.mark.slow
def test_cluster_robust_se_hand_computed_and_against_statsmodels() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    clusters: list[str | None] = ["a", "a", "b", "b", "c", "c"]
    # mean 0.5833; residual sums per cluster: a: 1 - 2m, b: 2 - 2m, c: 0.5 - 2m
    m = sum(values) / 6
    sums = [1 - 2 * m, 2 - 2 * m, 0.5 - 2 * m]
    expected = math.sqrt(3 / 2 * sum(s * s for s in sums)) / 6
    assert stats.cluster_robust_se(values, clusters) == pytest.approx(expected)
    assert stats.cluster_count(clusters) == 3 and stats.cluster_count(["a", None, "a"]) == 2
    assert stats.cluster_count([None, None]) is None
    small = [v / 10 for v in values]
    d = stats.paired_difference([0.0] * 6, small, clusters=clusters)
    # equal clusters: CR2 is CR1 and its degrees of freedom are G - 1
    assert d.clusters == 3 and d.df == pytest.approx(2) and d.stderr == pytest.approx(expected / 10)
    # 3 clusters: the sign-flip test over clusters cannot reject anything, so its interval is everything
    # cluster sums of the differences .1, .2, .05 are all positive: 2 of 8 sign patterns reach their total
    assert d.ci95 == (-1.0, 1.0) and d.p_value == pytest.approx(0.25) and (d.test or "").endswith("over 3 clusters")
    import statsmodels.api as sm

    groups = np.array([0, 0, 1, 1, 2, 2])
    fit = sm.OLS(np.array(values), np.ones((6, 1))).fit(cov_type="cluster", cov_kwds={"groups": groups})
    # statsmodels' default small-sample factor is G/(G-1) x (N-1)/(N-K); with K = 1 the (N-1)/(N-1) cancels
    assert stats.cluster_robust_se(values, clusters) == pytest.approx(float(fit.bse[0]))
    # a task without a cluster is its own cluster; all singleton clusters give the ordinary SE
    assert stats.cluster_robust_se(values, [None] * 6) == pytest.approx(stats.standard_error(values))


def test_holm_matches_statsmodels() -> None:
    ps = [0.01, 0.04, 0.03, 0.2, 0.0001]
    assert stats.holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]))
    assert stats.holm([0.02, None, 0.5]) == pytest.approx([0.04, None, 0.5])


def test_p_values_do_not_underflow() -> None:
    assert stats.two_sided_p(8.3) > 0
    assert stats.two_sided_p(30) == pytest.approx(sp.norm.sf(30) * 2, rel=1e-9)


def test_relative_tolerance_treats_rounding_noise_as_no_spread() -> None:
    """3 tasks that each gain 1 of 3 passes: float SE 2.3e-17 used to give p = 0 and CI [+0.333, +0.333]."""
    d = stats.paired_difference([0.0, 1 / 3, 1 / 3], [1 / 3, 2 / 3, 2 / 3])
    assert d.stderr == 0.0
    assert d.p_value == pytest.approx(0.25)  # 2 of the 8 sign patterns reach |sum| = 1
    # no spread and p >= 0.05: the binomial bound over 3 tasks for (d + 1) / 2 = 2/3, in difference units
    lo, hi = proportion_confint(2, 3, alpha=0.05, method="beta")
    assert d.ci95 == pytest.approx((2 * lo - 1, 2 * hi - 1)) and d.interval is not None and "no spread" in d.interval


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10), st.integers(0, 10)), min_size=1, max_size=40), st.integers(1, 10))
def test_rate_intervals_are_never_zero_width_and_contain_the_estimate(counts: list[tuple[int, int]], k: int) -> None:
    tasks = []
    records = []
    n = max(n for n, _ in counts)
    k = min(k, n)
    for i, (_, c) in enumerate(counts):
        tasks.append(TaskInfo(f"t{i}", f"t{i}", "capability", f"g{i % 3}" if i % 2 else None))
        records += [
            AttemptRecord(
                task_id=f"t{i}",
                attempt=j + 1,
                outcome="pass" if j < min(c, n) else "fail",
                claimed=True,
                verified=j < min(c, n),
                duration_secs=1.0,
                agent_secs=1.0,
                verify_secs=0.1,
            )
            for j in range(n)
        ]
    overall = build_report("s", "S", tasks, records, k).overall
    for value, interval in (
        (overall.pass_at_k, overall.ci95.pass_at_k),
        (overall.pass_power_k, overall.ci95.pass_power_k),
    ):
        if len(counts) == 1 and overall.interval != "clopper-pearson":
            continue  # one task and no binary reading: there is nothing to estimate a spread from
        assert value is not None and interval is not None
        lo, hi = interval
        assert 0.0 <= lo < hi <= 1.0
        assert lo - 1e-12 <= value <= hi + 1e-12


def test_pass_at_k_via_log1p_matches_the_binomial_formula() -> None:
    for n in range(1, 30):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-13, abs=1e-15)
    # tiny values keep their relative precision
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001, rel=1e-15)
    assert pass_at_k(1000, 1, 2) == pytest.approx(1 - math.comb(999, 2) / math.comb(1000, 2), rel=1e-13)


# --- leaderboard --------------------------------------------------------------------------------------------


def _envelope(
    passes: list[int], attempts: int, run_id: str, *, outcome_fail: str = "fail", category: str | None = None
) -> Envelope:
    tasks = [TaskInfo(f"t{i}", f"t{i}", "capability") for i in range(len(passes))]
    records = [
        AttemptRecord(
            task_id=f"t{i}",
            attempt=j + 1,
            outcome="pass" if j < c else outcome_fail,
            claimed=j < c,
            verified=j < c if outcome_fail == "fail" else None,
            duration_secs=1.0,
            agent_secs=1.0,
            verify_secs=0.1,
            error_category=category if j >= c else None,
            reason="HTTP 401" if category else None,
        )
        for i, c in enumerate(passes)
        for j in range(attempts)
    ]
    return Envelope(
        harness_version="0.1.0",
        provider=None,
        model=None,
        agent={"name": run_id},
        suite_path="suite.json",
        suite_sha256="a" * 64,
        run=RunInfo(
            id=run_id,
            started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:01:00Z",
            complete=True,
            workspace=WorkspaceInfo(path="/repo", base_commit="b" * 40, dirty=False),
            attempts=attempts,
            k=attempts,
            jobs=1,
        ),
        report=build_report("suite", "Suite", tasks, records, attempts),
    )


def test_leaderboard_ranks_at_a_common_k_and_marks_broken_runs() -> None:
    # "many" has 5 attempts per task: at its own k = 5, pass@5 would flatter it; the board measures all at k = 2
    many = _envelope([1] * 12, 5, "many")  # pass@2 = 1 - C(4,2)/C(5,2) = 0.4 per task
    few = _envelope([1] * 6 + [2] * 6, 2, "few")  # pass@2 = 1 per task
    broken = _envelope([0] * 12, 2, "broken", outcome_fail="error", category="provider_auth")
    board = build_leaderboard([Contender(e.run.id, None, "complete", e) for e in (many, broken, few)])
    assert board.k == 2
    ranked = [r for r in board.rows if r.rank is not None]
    assert [r.run_id for r in ranked] == ["few", "many"]
    assert ranked[0].pass_at_k == pytest.approx(1.0)
    assert ranked[1].pass_at_k == pytest.approx(0.4)
    assert any("common k = 2" in note for note in board.notes)
    unranked = [r for r in board.rows if r.rank is None]
    assert [r.run_id for r in unranked] == ["broken"]
    assert unranked[0].broken is not None and "authentication" in unranked[0].broken
    from worktrial.render.leaderboard_markdown import render_leaderboard_markdown

    text = render_leaderboard_markdown(board)
    assert "every row at k = 2" in text and "**broken**" in text


@pytest.mark.slow
def test_five_identical_agents_rarely_show_a_row_behind_the_leader() -> None:
    """Holm over exact paired tests: the family-wise false-positive rate stays below alpha (seeded, 200 boards)."""
    rng = random.Random(3)
    flagged = 0
    for board_no in range(200):
        difficulty = [rng.random() for _ in range(20)]
        envelopes = [
            _envelope([sum(rng.random() < p for _ in range(3)) for p in difficulty], 3, f"r{board_no}-{i}")
            for i in range(5)
        ]
        board = build_leaderboard([Contender(e.run.id, None, "complete", e) for e in envelopes])
        flagged += any(r.rank and r.rank > 1 and r.tied_with is None for r in board.rows)
    # the old overlap rule flagged 29-32% of such boards; Holm keeps it at most alpha (+ Monte Carlo slack)
    assert flagged / 200 <= 0.08


# --- robust input and output ---------------------------------------------------------------------------------


def test_nan_and_infinity_in_an_envelope_are_refused(cli, tmp_path: Path) -> None:
    good = _envelope([1, 2, 0], 2, "a")
    text = good.to_json()
    a = tmp_path / "a.json"
    a.write_text(text)
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        data = json.loads(text)
        data["report"]["overall"]["pass_at_k"] = "__X__"
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data).replace('"__X__"', bad))
        result = cli(["compare", str(a), str(path), "--format", "json"], cwd=tmp_path)
        assert result.exit_code == 2, (bad, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert str(path) in lines[0]
    result = cli(["compare", str(a), str(a), "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in compare's JSON"))


@pytest.mark.slow
def test_the_demo_report_has_no_zero_width_interval(cli, repo: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    result = cli(
        ["eval", "--suite", str(root / "suites/smoke-workspace-basics.json"), "--agent", "oracle", "--trust"], cwd=repo
    )
    assert result.exit_code == 0, result.output
    intervals = [
        (float(a), float(b)) for a, b in __import__("re").findall(r"\[(\d\.\d{3}), (\d\.\d{3})\]", result.stdout)
    ]
    assert intervals, result.stdout
    assert all(lo < hi for lo, hi in intervals), result.stdout
    assert "[1.000, 1.000]" not in result.stdout


# --- clusters end to end, and the audit of an envelope that predates named intervals ---------------------------


def test_clusters_flow_from_the_suite_to_report_compare_and_audit(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    from tests.conftest import task

    tasks = [task(f"t{i}", cluster=f"repo-{i % 2}") for i in range(4)] + [task("lone")]
    tasks[1]["solution"] = [{"sh": "echo nope > other.txt"}]  # the oracle fails t1: the numbers have spread
    suite = write_suite(tasks, attempts=2)
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "-q"], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    overall = envelope["report"]["overall"]
    # repo-0, repo-1 and the task without a cluster (its own): 3 clusters
    assert overall["clusters"] == 3 and "cluster-robust" in overall["interval"]
    assert [t["cluster"] for t in envelope["report"]["tasks"]] == ["repo-0", "repo-1", "repo-0", "repo-1", None]
    path = tmp_path / "clustered.json"
    path.write_text(json.dumps(envelope))
    audit = cli(["audit", str(path), "--suite", str(suite), "--no-traces"], cwd=repo)
    assert audit.exit_code == 0, audit.output
    compared = cli(["compare", str(path), str(path), "--format", "json"], cwd=repo)
    assert compared.exit_code == 0, compared.output
    at1 = json.loads(compared.stdout)["pairs"][0]["overall"]["pass_at_1"]
    assert at1["clusters"] == 3 and at1["test"].endswith("over 3 clusters")

    # An envelope written before intervals were named published 1.96-SE intervals and no interval/cluster keys:
    # the audit recomputes it with that rule and finds nothing wrong; a tampered interval is still caught.
    legacy = json.loads(json.dumps(envelope))
    for metrics in [legacy["report"]["overall"], *legacy["report"]["categories"].values()]:
        del metrics["interval"], metrics["clusters"], metrics["tasks_measured"]
        values = [t["pass_at_k"] for t in legacy["report"]["tasks"]]
        se = stats.standard_error(values)
        metrics["stderr"] = {
            "pass_at_k": se,
            "pass_power_k": stats.standard_error([t["pass_power_k"] for t in legacy["report"]["tasks"]]),
        }
        metrics["ci95"] = {
            "pass_at_k": list(stats.normal_interval(metrics["pass_at_k"], se) or ()),
            "pass_power_k": list(
                stats.normal_interval(metrics["pass_power_k"], metrics["stderr"]["pass_power_k"]) or ()
            ),
        }
    for t in legacy["report"]["tasks"]:
        del t["cluster"]
    old = tmp_path / "legacy.json"
    old.write_text(json.dumps(legacy))
    audit = cli(["audit", str(old), "--suite", str(suite), "--no-traces"], cwd=repo)
    assert audit.exit_code == 0, audit.output
    legacy["report"]["overall"]["ci95"]["pass_at_k"] = [0.0, 1.0]
    old.write_text(json.dumps(legacy))
    audit = cli(["audit", str(old), "--suite", str(suite), "--no-traces"], cwd=repo)
    assert audit.exit_code == 1 and "report.overall.ci95.pass_at_k" in audit.stdout, audit.output


def test_compare_never_prints_a_zero_width_interval_for_identical_differences() -> None:
    """Tasks that each gain 1 of 3 passes: the old report said p < 0.001 and CI [+0.333, +0.333]."""
    from worktrial.analysis.compare import LoadedEnvelope, compare_runs
    from worktrial.render.compare_markdown import render_comparison_markdown

    a, b = _envelope([0, 1, 2], 3, "a"), _envelope([1, 2, 3], 3, "b")
    comparison = compare_runs([LoadedEnvelope("a", "a.json", a), LoadedEnvelope("b", "b.json", b)])
    at1 = comparison.pairs[0].overall.pass_at_1
    assert at1.difference == pytest.approx(1 / 3) and at1.p_value == pytest.approx(0.25)
    assert at1.minimum_detectable is None
    # p >= 0.05: the interval holds 0 and falls back to the binomial bound over the 3 tasks, never a point
    assert at1.ci95 is not None and at1.ci95[0] < 0.0 < 1 / 3 < at1.ci95[1]
    text = render_comparison_markdown(comparison)
    assert "| +0.333 | 0.000 | [" in text and "| 0.250 | primary | sign-flip |" in text
    assert "[+0.333, +0.333]" not in text
    # 6 tasks that all gained 1/3: p = 2/64 < 0.05, and there is no spread to put an interval on
    a, b = _envelope([0, 1, 2] * 2, 3, "a"), _envelope([1, 2, 3] * 2, 3, "b")
    six = compare_runs([LoadedEnvelope("a", "a.json", a), LoadedEnvelope("b", "b.json", b)]).pairs[0]
    assert six.overall.pass_at_1.p_value == pytest.approx(2 / 64)
    assert six.overall.pass_at_1.ci95 is None and six.overall.pass_at_1.ci_note is not None
    assert "| +0.333 | 0.000 | — (no spread) | 0.031 | primary | sign-flip |" in render_comparison_markdown(
        compare_runs([LoadedEnvelope("a", "a.json", a), LoadedEnvelope("b", "b.json", b)])
    )


def test_the_cluster_field_is_an_optional_non_empty_string() -> None:
    from tests.conftest import task
    from worktrial.errors import SuiteError
    from worktrial.model.suite import parse_suite

    suite = parse_suite({"id": "s", "tasks": [task("a", cluster="repo-x"), task("b")]})
    assert [t.cluster for t in suite.tasks] == ["repo-x", None]
    for bad in ("", "   ", 3, "x" * 201):
        with pytest.raises(SuiteError, match="cluster"):
            parse_suite({"id": "s", "tasks": [task("a", cluster=bad)]})
