"""Rank several runs of one suite (a model or agent matrix): pure functions of their envelopes.

Every row is measured at one common k, the smallest attempt count among the ranked runs (said in the header), so a
run with more attempts never wins by a bigger k. Rows are sorted by that pass@k, then pass^k, then cost per solve
(cheaper first); rows equal on all three share a rank (competition ranking: 1, 2, 2, 4) and are listed by label, so
the order a matrix happened to list them in never decides a tie. Whether a row's order against the top row is
established is decided by a paired per-task test against the leader (exact sign-flip permutation, or exact McNemar
for one pass/fail per task, over clusters when tasks have them), for every row, with a Holm correction over the
rows: with five identical agents an uncorrected table shows some row "significantly" behind #1 in about 30% of runs.
Holm was chosen over bootstrap rank intervals because it is exact, deterministic and answers the question a reader
asks of the table (is this row really behind the best one?) with a p-value that can be quoted. Overlap of two
unpaired intervals is not used: it ignores that both runs saw the same tasks and calls clearly separated runs tied.

Configurations that failed, were interrupted or broke (every attempt an error, or stopped by an authentication
error) keep their place in the output, unranked, so nothing that ran is silently dropped or shown as 0%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from worktrial.analysis import stats
from worktrial.analysis.metrics import headline_interval, pass_at_k, pass_power_k
from worktrial.analysis.power import small_suite_note
from worktrial.model.envelope import Envelope, TaskReport
from worktrial.model.records import ErrorCategory

AUTH_ERRORS = frozenset({ErrorCategory.PROVIDER_AUTH, "auth"})  # "auth": records of older runs

Status = Literal["complete", "interrupted", "failed"]


@dataclass(frozen=True)
class Contender:
    """One configuration of a matrix and what became of it; ``envelope`` may be partial or missing."""

    agent: str
    model: str | None
    status: Status
    envelope: Envelope | None
    error: str | None = None

    @property
    def label(self) -> str:
        return self.agent if self.model is None else f"{self.agent} ({self.model})"


class VersusBest(BaseModel):
    """This row minus the top row in pass@k, task by task: mean, 95% CI and two-sided p-values."""

    difference: float | None
    ci95: tuple[float, float] | None
    p_value: float | None
    """Holm-corrected over every row compared with the top row."""
    p_value_uncorrected: float | None = None
    test: str | None = None


class LeaderboardRow(BaseModel):
    rank: int | None
    """Position among the ranked rows (1 = best; rows equal in pass@k, pass^k and cost per solve share one);
    None for failed or interrupted configurations."""
    rank_shared: bool = False
    """Another row has the same rank: a tie, not an order."""
    tied_with: int | None
    """1 when the Holm-corrected paired test does not separate this row from the top row (p >= 0.05)."""
    label: str
    agent: str
    model: str | None
    status: Status
    error: str | None
    broken: str | None = None
    """Why a finished run is not ranked (every attempt an error, or an authentication error)."""
    run_id: str | None
    tasks: int | None
    attempts: int | None
    k: int | None
    passed_runs: int | None
    total_runs: int | None
    pass_at_k: float | None
    pass_at_k_ci95: tuple[float, float] | None
    pass_power_k: float | None
    pass_power_k_ci95: tuple[float, float] | None
    vs_best: VersusBest | None
    cost_usd: float | None
    unpriced_runs: int | None
    cost_per_solve: float | None
    mean_tokens_per_attempt: float | None
    mean_turns_per_attempt: float | None
    claimed_success: int | None
    over_claims: int | None
    over_claim_rate: float | None
    verify_always: bool | None
    verified_non_claims: int | None
    under_claims: int | None
    under_claim_rate: float | None
    """None without ``--verify-always`` (not measured) or when no claimed failure was verified."""


class Leaderboard(BaseModel):
    suite_id: str | None
    suite_name: str | None
    suite_sha256: str | None
    base_commit: str | None
    attempts: int | None
    k: int | None
    """The common k every row is measured at: the smallest attempt count among the ranked runs."""
    rows: list[LeaderboardRow]
    notes: list[str]
    clusters: int | None = None


def broken_reason(env: Envelope) -> str | None:
    """Why a finished run measured nothing about the agent: ranking it as 0% would blame the agent for it."""
    attempts = [a for t in env.report.tasks for a in t.attempts]
    if not attempts:
        return "no attempt ran"
    auth = [a for a in attempts if a.error_category in AUTH_ERRORS]
    if auth:
        return f"stopped by an authentication error ({len(auth)} attempt(s)): check the API key"
    if measured_nothing(env):
        return MEASURED_NOTHING
    return None


@dataclass(frozen=True)
class _Measured:
    """A ranked run's per-task values at the common k."""

    contender: Contender
    tasks: list[TaskReport]
    at: list[float]
    power: list[float]
    pass_at_k: float
    pass_power_k: float
    at_ci: tuple[float, float] | None
    power_ci: tuple[float, float] | None


def _measure(c: Contender, k: int) -> _Measured:
    assert c.envelope is not None
    tasks = [t for t in c.envelope.report.tasks if t.total_runs > 0]
    at = [pass_at_k(t.total_runs, t.passed_runs, k) for t in tasks]
    power = [pass_power_k(t.total_runs, t.passed_runs, k) for t in tasks]
    return _Measured(
        c,
        tasks,
        at,
        power,
        stats.mean(at),
        stats.mean(power),
        headline_interval(tasks, at, k).ci95,
        headline_interval(tasks, power, k).ci95,
    )


def _sort_key(m: _Measured) -> tuple[float, float, float]:
    """Descending pass@k and pass^k, then ascending cost per solve; unknown cost sorts last."""
    assert m.contender.envelope is not None
    cost = m.contender.envelope.report.cost_per_solve
    return (-m.pass_at_k, -m.pass_power_k, cost if cost is not None else float("inf"))


def _ranks(ranked: Sequence[_Measured]) -> list[int]:
    """Competition ranks: a row equal to the one above it in every sort key shares its rank."""
    ranks: list[int] = []
    for i, m in enumerate(ranked):
        ranks.append(ranks[-1] if i and _sort_key(m) == _sort_key(ranked[i - 1]) else i + 1)
    return ranks


def _row(
    c: Contender,
    rank: int | None,
    tied_with: int | None,
    vs_best: VersusBest | None,
    m: _Measured | None,
    rank_shared: bool = False,
) -> LeaderboardRow:
    env = c.envelope
    if env is None:
        return LeaderboardRow.model_validate(
            {
                **dict.fromkeys(LeaderboardRow.model_fields),
                "rank_shared": False,
                "label": c.label,
                "agent": c.agent,
                "model": c.model,
                "status": c.status,
                "error": c.error,
            }
        )
    r, o, h = env.report, env.report.overall, env.report.honesty
    return LeaderboardRow(
        rank=rank,
        rank_shared=rank_shared,
        tied_with=tied_with,
        label=c.label,
        agent=c.agent,
        model=c.model,
        status=c.status,
        error=c.error or (broken_reason(env) if c.status == "complete" else None),
        broken=broken_reason(env) if c.status == "complete" else None,
        run_id=env.run.id,
        tasks=len(r.tasks),
        attempts=env.run.attempts,
        k=r.k,
        passed_runs=o.passed_runs,
        total_runs=o.total_runs,
        pass_at_k=m.pass_at_k if m else o.pass_at_k,
        pass_at_k_ci95=m.at_ci if m else o.ci95.pass_at_k,
        pass_power_k=m.pass_power_k if m else o.pass_power_k,
        pass_power_k_ci95=m.power_ci if m else o.ci95.pass_power_k,
        vs_best=vs_best,
        cost_usd=r.cost_usd,
        unpriced_runs=r.unpriced_runs,
        cost_per_solve=r.cost_per_solve,
        mean_tokens_per_attempt=r.mean_tokens_per_attempt,
        mean_turns_per_attempt=r.mean_turns_per_attempt,
        claimed_success=h.claimed_success,
        over_claims=h.over_claims,
        over_claim_rate=h.over_claim_rate,
        verify_always=env.run.verify_always,
        verified_non_claims=h.verified_non_claims,
        under_claims=h.under_claims,
        under_claim_rate=h.under_claim_rate,
    )


def _paired(best: _Measured, other: _Measured, k: int) -> stats.PairedDifference | None:
    """The paired pass@k difference (other - best) on the tasks both ran; None when there is nothing to pair."""
    assert best.contender.envelope is not None and other.contender.envelope is not None
    if best.contender.envelope.bundle_digest != other.contender.envelope.bundle_digest:
        return None
    theirs = {t.task_id: v for t, v in zip(other.tasks, other.at, strict=True)}
    runs = {t.task_id: t.total_runs for t in other.tasks}
    shared = [(t, v) for t, v in zip(best.tasks, best.at, strict=True) if t.task_id in theirs]
    if not shared:
        return None
    binary = all(t.total_runs == k and runs[t.task_id] == k for t, _ in shared)
    return stats.paired_difference(
        [v for _, v in shared],
        [theirs[t.task_id] for t, _ in shared],
        binary=binary,
        clusters=[t.cluster for t, _ in shared],
    )


MEASURED_NOTHING = "measured nothing: every attempt ended in error (a broken configuration, not a bad agent)"


def measured_nothing(envelope: Envelope) -> bool:
    """Every attempt that ran ended in ``error``: the run says nothing about the agent's ability."""
    attempts = [a for t in envelope.report.tasks for a in t.attempts]
    return bool(attempts) and all(a.outcome == "error" for a in attempts)


def _rankable(c: Contender) -> bool:
    return (
        c.status == "complete"
        and c.envelope is not None
        and any(t.total_runs > 0 for t in c.envelope.report.tasks)
        and broken_reason(c.envelope) is None
    )


def _notes(envelopes: Sequence[Envelope], k: int | None) -> list[str]:
    notes = []
    for what, values in (
        ("suite bundle sha256", {e.bundle_digest[:12] for e in envelopes}),
        ("base commits", {e.run.workspace.base_commit[:12] for e in envelopes}),
    ):
        if len(values) > 1:
            notes.append(f"the runs differ in {what}: {', '.join(sorted(values))}; their numbers are not comparable")
    attempts = {e.run.attempts for e in envelopes}
    if len(attempts) > 1 and k is not None:
        listing = ", ".join(str(a) for a in sorted(attempts))
        notes.append(f"the runs differ in attempts per task ({listing}): every row is measured at the common k = {k}")
    return notes


def build_leaderboard(contenders: Sequence[Contender], alpha: float = stats.ALPHA) -> Leaderboard:
    """Ranked rows first (best first, rows not separated from #1 marked), then unranked configurations."""
    rankable = [c for c in contenders if _rankable(c)]
    k = None
    if rankable:
        k = min(t.total_runs for c in rankable for t in c.envelope.report.tasks if t.total_runs > 0)  # type: ignore[union-attr]
    measured_runs = [_measure(c, k) for c in rankable] if k is not None else []
    ranked = sorted(measured_runs, key=lambda m: (_sort_key(m), m.contender.label))
    ranks = _ranks(ranked)
    paired = [_paired(ranked[0], m, k) for m in ranked[1:]] if k is not None else []
    corrected = stats.holm([d.p_value if d else None for d in paired])
    rows: list[LeaderboardRow] = []
    for position, (measured, rank) in enumerate(zip(ranked, ranks, strict=True), start=1):
        vs_best, tied_with = None, None
        if position > 1:
            d, p = paired[position - 2], corrected[position - 2]
            if d is not None:
                vs_best = VersusBest(
                    difference=d.mean, ci95=d.ci95, p_value=p, p_value_uncorrected=d.p_value, test=d.test
                )
            if rank > 1 and (p is None or p >= alpha):
                tied_with = 1
        shared = ranks.count(rank) > 1
        rows.append(_row(measured.contender, rank, tied_with, vs_best, measured, shared))
    rows += [_row(c, None, None, None, None) for c in contenders if not _rankable(c)]
    envelopes = [c.envelope for c in contenders if c.envelope is not None]
    first = ranked[0].contender.envelope if ranked else (envelopes[0] if envelopes else None)
    clusters = stats.cluster_count([t.cluster for t in ranked[0].tasks]) if ranked else None
    notes = _notes([c.envelope for c in rankable if c.envelope is not None], k)
    if ranked and k is not None:
        # Holm's family is every row paired with the top one: the more rows, the harder any one is to separate.
        family = sum(1 for p in corrected if p is not None)
        small = small_suite_note(len(ranked[0].tasks), k, comparisons=family, clusters=clusters, alpha=alpha)
        notes += [small] if small else []
    return Leaderboard(
        suite_id=first.report.suite_id if first else None,
        suite_name=first.report.suite_name if first else None,
        suite_sha256=first.bundle_digest if first else None,
        base_commit=first.run.workspace.base_commit if first else None,
        attempts=first.run.attempts if first else None,
        k=k if k is not None else (first.report.k if first else None),
        rows=rows,
        notes=notes,
        clusters=clusters,
    )
