"""Compare runs task by task: paired differences with standard errors, CIs, p-values and power.

Following Miller (arXiv 2411.00640), two runs of the same suite are compared through per-task paired
differences (run B minus run A) of pass@1 and of the headline pass@k / pass^k, never through attempts pooled
across tasks. Each CI is tied to the exact test behind its p-value (its end nearest 0 inverts that test), so a CI
excludes 0 exactly when p < 0.05.

One comparison is the pair's primary test: overall pass@1, the rate every run has and ``worktrial power`` plans
for. Every other row (pass@k, pass^k, each category) is secondary: its p-value and CI are for that row alone,
and ``p_value_holm`` adjusts the secondary p-values of the pair together (Holm), so reading many rows does not
manufacture a finding. Everything here is pure; loading envelope files and stored runs is
``worktrial.state.history.resolve_envelope``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from worktrial.analysis import planning, stats
from worktrial.analysis.metrics import efficiency_figures, pass_at_k, pass_power_k
from worktrial.analysis.power import small_suite_note
from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope, Selection, TaskReport
from worktrial.model.suite import CATEGORIES


@dataclass(frozen=True)
class LoadedEnvelope:
    """An envelope with the name the user gave it (a file path or a run id)."""

    label: str
    source: str
    envelope: Envelope


class Difference(BaseModel):
    """One metric of two runs over the same tasks: both means and their paired difference (B - A)."""

    tasks: int
    a: float | None
    b: float | None
    difference: float | None
    stderr: float | None
    ci95: tuple[float, float] | None
    p_value: float | None
    minimum_detectable: float | None
    test: str | None = None
    """Which test gave ``p_value``: exact McNemar, sign-flip permutation (exact or Monte Carlo), over clusters."""
    monte_carlo_error: float | None = None
    clusters: int | None = None
    """Clusters the SE, CI and test are computed over; None when tasks are the independent units."""
    ci_note: str | None = None
    """Why ``ci95`` is None (or everything) although there are tasks to compare."""
    interval: str | None = None
    """How ``ci95`` inverts the test behind ``p_value``."""
    role: Literal["primary", "secondary"] = "secondary"
    """primary: the pair's one pre-declared test (overall pass@1); secondary: every other row."""
    p_value_holm: float | None = None
    """Secondary rows: ``p_value`` Holm-adjusted over all secondary rows of the pair (None for the primary)."""


class GroupComparison(BaseModel):
    group: str
    tasks: int
    pass_at_1: Difference
    pass_at_k: Difference
    pass_power_k: Difference


class Flip(BaseModel):
    """A task solved at least once by one run and never by the other."""

    task_id: str
    category: str
    solved_by: Literal["a", "b"]
    a_passed: int
    a_total: int
    b_passed: int
    b_total: int


class Efficiency(BaseModel):
    cost_usd: float | None
    unpriced_runs: int
    cost_per_solve: float | None
    mean_cost_per_attempt: float | None
    mean_tokens_per_attempt: float | None
    mean_turns_per_attempt: float | None


class RunSummary(BaseModel):
    label: str
    source: str
    run_id: str
    agent: str
    model: str | None
    suite_id: str
    suite_sha256: str
    tasks: int
    attempts: int
    k: int


class PairComparison(BaseModel):
    a: str
    b: str
    k: int
    overall: GroupComparison
    categories: list[GroupComparison]
    flips: list[Flip]
    efficiency_a: Efficiency
    efficiency_b: Efficiency
    efficiency_difference: dict[str, float | None]
    notes: list[str]


class Comparison(BaseModel):
    """Every pair of the given runs; differences are always second minus first."""

    runs: list[RunSummary]
    same_suite: bool
    pairs: list[PairComparison]


def summarize(loaded: LoadedEnvelope) -> RunSummary:
    env = loaded.envelope
    model = f"{env.provider}/{env.model}" if env.provider else env.model
    return RunSummary(
        label=loaded.label,
        source=loaded.source,
        run_id=env.run.id,
        agent=str(env.agent.get("name", "?")),
        model=model,
        suite_id=env.report.suite_id,
        suite_sha256=env.bundle_digest,
        tasks=len(env.report.tasks),
        attempts=env.run.attempts,
        k=env.report.k,
    )


def difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    binary: bool = False,
    clusters: Sequence[str | None] | None = None,
    attempts: int | None = None,
) -> Difference:
    """Means, paired difference and the minimum difference detectable at 80% power with these tasks.

    The detectable difference is the one ``worktrial power`` would plan for: the exact sign-flip test's power at
    the observed per-task variance (N x SE^2, cluster-robust when tasks are clustered), with ``attempts`` per task
    setting the test's step (see ``worktrial.analysis.planning``).
    """
    paired = stats.paired_difference(a, b, binary=binary, clusters=clusters)
    # Identical differences on every task give SE 0, which would claim any difference is detectable: the
    # variance is not estimable from such data, so neither is the minimum detectable difference.
    mde = None
    if paired.stderr and paired.df is not None:
        mde = planning.minimum_detectable_difference(
            len(a) * paired.stderr**2,
            len(a),
            attempts=attempts,
            df=paired.df if paired.clusters is not None else None,
            units=paired.clusters,
        )
    ci_note = None
    if paired.ci95 is None and len(a) > 1:
        ci_note = "no interval: every task changed by the same amount, so the spread is not estimable"
        if paired.clusters is not None and paired.clusters < 2:
            ci_note = "no interval: all tasks are in one cluster"
    elif len(a) > 1 and min(len(a), paired.clusters or len(a)) < planning.fewest_tasks():
        units = f"{paired.clusters} clusters" if paired.clusters is not None else f"{len(a)} tasks"
        ci_note = f"with {units} the exact test cannot reject any difference at 5%, whatever the data"
    return Difference(
        tasks=len(a),
        a=stats.mean(a) if a else None,
        b=stats.mean(b) if b else None,
        difference=paired.mean,
        stderr=paired.stderr,
        ci95=paired.ci95,
        p_value=paired.p_value,
        minimum_detectable=mde,
        test=paired.test,
        monte_carlo_error=paired.monte_carlo_error,
        clusters=paired.clusters,
        ci_note=ci_note,
        interval=paired.interval,
    )


def _values(tasks: Sequence[TaskReport], metric: Callable[[int, int], float]) -> list[float]:
    return [metric(t.total_runs, t.passed_runs) for t in tasks]


def compare_group(name: str, pairs: Sequence[tuple[TaskReport, TaskReport]], k: int) -> GroupComparison:
    """pass@1, pass@k and pass^k recomputed from each task's counts, so the curves are never trusted blindly."""
    a = [x for x, _ in pairs]
    b = [y for _, y in pairs]

    def at(j: int) -> Callable[[int, int], float]:
        return lambda n, c: pass_at_k(n, c, j)

    def power(j: int) -> Callable[[int, int], float]:
        return lambda n, c: pass_power_k(n, c, j)

    def binary(j: int) -> bool:
        """Each task's value is one pass/fail when it has exactly j attempts in both runs."""
        return all(t.total_runs == j for t in (*a, *b))

    clusters = [x.cluster for x in a]
    counts = {t.total_runs for t in (*a, *b)}
    attempts = counts.pop() if len(counts) == 1 else None
    at_1 = difference(_values(a, at(1)), _values(b, at(1)), binary=binary(1), clusters=clusters, attempts=attempts)
    if k == 1:  # pass@1, pass@1 and pass^1 are one number: one test
        return GroupComparison(group=name, tasks=len(pairs), pass_at_1=at_1, pass_at_k=at_1, pass_power_k=at_1)
    return GroupComparison(
        group=name,
        tasks=len(pairs),
        pass_at_1=at_1,
        pass_at_k=difference(_values(a, at(k)), _values(b, at(k)), binary=binary(k), clusters=clusters),
        pass_power_k=difference(_values(a, power(k)), _values(b, power(k)), binary=binary(k), clusters=clusters),
    )


def mark_primary_and_holm(overall: GroupComparison, categories: Sequence[GroupComparison]) -> None:
    """Overall pass@1 is the primary test; Holm-adjust every other distinct test of the pair together.

    A category holding every compared task repeats the overall rows and a k of 1 makes pass@k and pass^k the
    pass@1 test: such repeats share the row they repeat and are not counted twice in the family.
    """
    groups = [overall] + [g for g in categories if g.tasks != overall.tasks]
    secondary: list[Difference] = []
    for g in groups:
        for d in (g.pass_at_1, g.pass_at_k, g.pass_power_k):
            if d is not overall.pass_at_1 and all(d is not s for s in secondary):
                secondary.append(d)
    overall.pass_at_1.role = "primary"
    for d, p in zip(secondary, stats.holm([d.p_value for d in secondary]), strict=True):
        d.role, d.p_value_holm = "secondary", p
    for g in categories:
        if g.tasks == overall.tasks:
            for field in ("pass_at_1", "pass_at_k", "pass_power_k"):
                setattr(g, field, getattr(overall, field))


def _efficiency(tasks: Sequence[TaskReport]) -> Efficiency:
    return Efficiency.model_validate(efficiency_figures([r for t in tasks for r in t.attempts]))


def compare_pair(first: LoadedEnvelope, second: LoadedEnvelope) -> PairComparison:
    """Paired comparison of two runs over the task ids both ran (B = ``second`` minus A = ``first``)."""
    ra, rb = first.envelope.report, second.envelope.report
    notes: list[str] = []
    tasks_b = {t.task_id: t for t in rb.tasks}
    ids_a = {t.task_id for t in ra.tasks}
    only_a = [t.task_id for t in ra.tasks if t.task_id not in tasks_b]
    only_b = [t.task_id for t in rb.tasks if t.task_id not in ids_a]
    if only_a or only_b:
        notes.append(
            f"compared only the task ids both runs contain; left out: {len(only_a)} only in A, {len(only_b)} only in B"
            + (f" ({', '.join((only_a + only_b)[:8])}{', ...' if len(only_a) + len(only_b) > 8 else ''})")
        )
    sel_a, sel_b = first.envelope.run.selection, second.envelope.run.selection
    if (sel_a.task_ids if sel_a else None) != (sel_b.task_ids if sel_b else None):

        def described(selection: Selection | None) -> str:
            return "every task" if selection is None else f"{len(selection.task_ids)} of {selection.suite_tasks} tasks"

        notes.append(
            f"the runs cover different selections of the suite (--task/--category/--limit): "
            f"A {described(sel_a)}, B {described(sel_b)}"
        )
    shared = [(t, tasks_b[t.task_id]) for t in ra.tasks if t.task_id in tasks_b]
    unran = [x.task_id for x, y in shared if x.total_runs == 0 or y.total_runs == 0]
    if unran:
        notes.append(f"left out {len(unran)} task(s) that one run never attempted: {', '.join(unran[:8])}")
    pairs = [(x, y) for x, y in shared if x.total_runs > 0 and y.total_runs > 0]
    if not pairs:
        raise BadInputError(f"{first.label} and {second.label} have no attempted task in common; nothing to compare")
    k = min(ra.k, rb.k, *(min(x.total_runs, y.total_runs) for x, y in pairs))
    if k != ra.k or k != rb.k:
        notes.append(f"headline k = {k}: the largest k both runs reach on every compared task (A: {ra.k}, B: {rb.k})")
    box_a, box_b = first.envelope.run.sandbox, second.envelope.run.sandbox
    if box_a is not None and box_b is not None and box_a.summary() != box_b.summary():
        notes.append(f"the runs used different sandboxes: A {box_a.summary()}; B {box_b.summary()}")
    recategorized = [x.task_id for x, y in pairs if x.category != y.category]
    if recategorized:
        notes.append(f"categories follow A; these tasks have another category in B: {', '.join(recategorized[:8])}")
    categories = [
        compare_group(cat, [(x, y) for x, y in pairs if x.category == cat], k)
        for cat in CATEGORIES
        if any(x.category == cat for x, _ in pairs)
    ]
    flips = [
        Flip(
            task_id=x.task_id,
            category=x.category,
            solved_by="a" if x.passed_runs else "b",
            a_passed=x.passed_runs,
            a_total=x.total_runs,
            b_passed=y.passed_runs,
            b_total=y.total_runs,
        )
        for x, y in pairs
        if (x.passed_runs > 0) != (y.passed_runs > 0)
    ]
    eff_a = _efficiency([x for x, _ in pairs])
    eff_b = _efficiency([y for _, y in pairs])
    delta: dict[str, float | None] = {}
    for key in ("cost_usd", "cost_per_solve", "mean_cost_per_attempt", "mean_tokens_per_attempt"):
        va, vb = getattr(eff_a, key), getattr(eff_b, key)
        delta[key] = None if va is None or vb is None else vb - va
    delta["mean_turns_per_attempt"] = (
        None
        if eff_a.mean_turns_per_attempt is None or eff_b.mean_turns_per_attempt is None
        else eff_b.mean_turns_per_attempt - eff_a.mean_turns_per_attempt
    )
    overall = compare_group("overall", pairs, k)
    mark_primary_and_holm(overall, categories)
    return PairComparison(
        a=first.label,
        b=second.label,
        k=k,
        overall=overall,
        categories=categories,
        flips=flips,
        efficiency_a=eff_a,
        efficiency_b=eff_b,
        efficiency_difference=delta,
        notes=notes,
    )


def made_from_note(a: Envelope, b: Envelope) -> str | None:
    """What a pair means when one run was made from the other's attempts (``regrade``, ``eval --reuse``)."""
    for first, second, name in ((a, b, "B"), (b, a, "A")):
        reuse = second.run.reuse
        if reuse is None or reuse.source != first.run.id:
            continue
        other = "A" if name == "B" else "B"
        if reuse.mode == "regrade":
            return (
                f"{name} is {other} regraded: the same agent runs judged by another verifier (suite digest "
                f"{reuse.source_suite_digest[:12]} -> {second.bundle_digest[:12]}), so the difference is the "
                "verifier's, not the agent's"
            )
        return (
            f"{name} reused {reuse.reused + reuse.regraded} attempt(s) of {other}: those are the same agent runs in "
            "both (regraded ones judged again), so they agree by construction, not as independent samples"
        )
    return None


def _made_from_one_another(runs: Sequence[LoadedEnvelope]) -> bool:
    """Two runs of different suites where one was made from the other's attempts: comparing them is the point."""
    ids = {r.envelope.run.id for r in runs}
    return len(runs) == 2 and any(r.envelope.run.reuse is not None and r.envelope.run.reuse.source in ids for r in runs)


def compare_runs(runs: Sequence[LoadedEnvelope], *, allow_different_suites: bool = False) -> Comparison:
    """Every pair of runs, in the order given; refuses runs of different suite files unless allowed."""
    if len(runs) < 2:
        raise BadInputError("compare needs at least two envelopes or run ids")
    digests = {r.envelope.bundle_digest for r in runs}
    made = _made_from_one_another(runs)
    if len(digests) > 1 and not allow_different_suites and not made:
        listing = "\n".join(
            f"{r.label}: suite {r.envelope.suite_path} bundle sha256 {r.envelope.bundle_digest[:12]}" for r in runs
        )
        raise BadInputError(
            "these runs used different suite files, so their numbers are not comparable:\n"
            f"{listing}\npass --allow-different-suites to compare only the task ids they share"
        )
    pairs = [compare_pair(a, b) for a, b in itertools.combinations(runs, 2)]
    for pair in pairs:
        clusters = pair.overall.pass_at_1.clusters
        if (small := small_suite_note(pair.overall.tasks, pair.k, clusters=clusters)) is not None:
            pair.notes.append(small)
    if len(digests) > 1 and not made:
        for pair in pairs:
            pair.notes.insert(0, "the suites differ (--allow-different-suites): only shared task ids are compared")
    for pair, (a, b) in zip(pairs, itertools.combinations(runs, 2), strict=True):
        if (note := made_from_note(a.envelope, b.envelope)) is not None:
            pair.notes.insert(0, note)
    return Comparison(runs=[summarize(r) for r in runs], same_suite=len(digests) == 1, pairs=pairs)
