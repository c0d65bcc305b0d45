"""Rank several runs of one suite (a model or agent matrix): pure functions of their envelopes.

Rows are sorted by the headline pass@k, then pass^k, then cost per solve (cheaper first). Two neighbouring rows
whose 95% confidence intervals of pass@k overlap are marked as tied: the data do not establish their order, and a
leaderboard that hides that invites the wrong conclusion. Each row also carries the paired per-task difference
from the top row (Miller 2024, the same computation as ``worktrial compare``), which is sharper than comparing
two intervals because the shared task difficulty cancels out.

Configurations that failed or were interrupted keep their place in the output, unranked, so nothing that ran is
silently dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from worktrial.analysis.compare import LoadedEnvelope, compare_pair
from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope

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
    """This row minus the top row in pass@k, task by task: mean, 95% CI and two-sided p-value."""

    difference: float | None
    ci95: tuple[float, float] | None
    p_value: float | None


class LeaderboardRow(BaseModel):
    rank: int | None
    """Position among the ranked rows (1 = best); None for failed or interrupted configurations."""
    tied_with: int | None
    """Rank of the row above when the two 95% CIs of pass@k overlap (their order is not established)."""
    label: str
    agent: str
    model: str | None
    status: Status
    error: str | None
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
    rows: list[LeaderboardRow]
    notes: list[str]


def intervals_overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    """Closed intervals overlap; an unknown interval (fewer than two tasks) cannot separate anything."""
    if a is None or b is None:
        return True
    return a[0] <= b[1] and b[0] <= a[1]


def _sort_key(c: Contender) -> tuple[float, float, float]:
    """Descending pass@k and pass^k, then ascending cost per solve; unknown values sort last."""
    env = c.envelope
    assert env is not None
    overall = env.report.overall
    at = overall.pass_at_k if overall.pass_at_k is not None else -1.0
    power = overall.pass_power_k if overall.pass_power_k is not None else -1.0
    cost = env.report.cost_per_solve if env.report.cost_per_solve is not None else float("inf")
    return (-at, -power, cost)


def _row(c: Contender, rank: int | None, tied_with: int | None, vs_best: VersusBest | None) -> LeaderboardRow:
    env = c.envelope
    if env is None:
        return LeaderboardRow.model_validate(
            {
                **dict.fromkeys(LeaderboardRow.model_fields),
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
        tied_with=tied_with,
        label=c.label,
        agent=c.agent,
        model=c.model,
        status=c.status,
        error=c.error or (MEASURED_NOTHING if measured_nothing(env) else None),
        run_id=env.run.id,
        tasks=len(r.tasks),
        attempts=env.run.attempts,
        k=r.k,
        passed_runs=o.passed_runs,
        total_runs=o.total_runs,
        pass_at_k=o.pass_at_k,
        pass_at_k_ci95=o.ci95.pass_at_k,
        pass_power_k=o.pass_power_k,
        pass_power_k_ci95=o.ci95.pass_power_k,
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


def _versus(best: Contender, other: Contender) -> VersusBest | None:
    """The paired pass@k difference (other - best) on the tasks both ran; None when there is nothing to pair."""
    assert best.envelope is not None and other.envelope is not None
    if best.envelope.bundle_digest != other.envelope.bundle_digest:
        return None
    try:
        pair = compare_pair(
            LoadedEnvelope(best.label, best.envelope.run.id, best.envelope),
            LoadedEnvelope(other.label, other.envelope.run.id, other.envelope),
        )
    except BadInputError:
        return None
    d = pair.overall.pass_at_k
    return VersusBest(difference=d.difference, ci95=d.ci95, p_value=d.p_value)


MEASURED_NOTHING = "measured nothing: every attempt ended in error (a broken configuration, not a bad agent)"


def measured_nothing(envelope: Envelope) -> bool:
    """Every attempt that ran ended in ``error``: the run says nothing about the agent's ability."""
    attempts = [a for t in envelope.report.tasks for a in t.attempts]
    return bool(attempts) and all(a.outcome == "error" for a in attempts)


def _rankable(c: Contender) -> bool:
    return (
        c.status == "complete"
        and c.envelope is not None
        and c.envelope.report.overall.pass_at_k is not None
        and not measured_nothing(c.envelope)
    )


def _notes(envelopes: Sequence[Envelope]) -> list[str]:
    notes = []
    for what, values in (
        ("suite files (sha256)", {e.bundle_digest[:12] for e in envelopes}),
        ("base commits", {e.run.workspace.base_commit[:12] for e in envelopes}),
        ("attempts per task", {str(e.run.attempts) for e in envelopes}),
        ("headline k", {str(e.report.k) for e in envelopes}),
    ):
        if len(values) > 1:
            notes.append(f"the runs differ in {what}: {', '.join(sorted(values))}; their numbers are not comparable")
    return notes


def build_leaderboard(contenders: Sequence[Contender]) -> Leaderboard:
    """Ranked rows first (best first, ties marked), then unranked failed or interrupted configurations."""
    ranked = sorted((c for c in contenders if _rankable(c)), key=_sort_key)
    rows: list[LeaderboardRow] = []
    for position, contender in enumerate(ranked, start=1):
        env = contender.envelope
        assert env is not None
        tied_with = None
        if position > 1:
            above = ranked[position - 2].envelope
            assert above is not None
            if intervals_overlap(above.report.overall.ci95.pass_at_k, env.report.overall.ci95.pass_at_k):
                tied_with = position - 1
        vs_best = _versus(ranked[0], contender) if position > 1 else None
        rows.append(_row(contender, position, tied_with, vs_best))
    rows += [_row(c, None, None, None) for c in contenders if not _rankable(c)]
    envelopes = [c.envelope for c in contenders if c.envelope is not None]
    first = ranked[0].envelope if ranked else (envelopes[0] if envelopes else None)
    return Leaderboard(
        suite_id=first.report.suite_id if first else None,
        suite_name=first.report.suite_name if first else None,
        suite_sha256=first.bundle_digest if first else None,
        base_commit=first.run.workspace.base_commit if first else None,
        attempts=first.run.attempts if first else None,
        k=first.report.k if first else None,
        rows=rows,
        notes=_notes(envelopes),
    )
