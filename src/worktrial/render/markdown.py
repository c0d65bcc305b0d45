"""The markdown report: headline numbers with error bars, per-category and per-task tables, problems."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from worktrial.model.artifacts import AttemptArtifacts, last_lines
from worktrial.model.envelope import Envelope, Metrics, TaskReport
from worktrial.model.records import OUTCOMES
from worktrial.render.format import cell, ci, interval_note, missing_note, num, rate, usd
from worktrial.util import plural


def outcome_summary(task: TaskReport) -> str:
    counts = Counter(a.outcome for a in task.attempts)
    return " · ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]) or "not run"


def _group_row(label: str, m: Metrics) -> str:
    return (
        f"| {label} | {m.tasks} | {m.passed_runs}/{m.total_runs} | {num(m.pass_at_k)} | {ci(m.ci95.pass_at_k)} "
        f"| {num(m.pass_power_k)} | {ci(m.ci95.pass_power_k)} |"
    )


MAX_FAILURES_SHOWN = 20
FAILURE_TAIL_LINES = 15


def _failures(envelope: Envelope, artifacts: Mapping[tuple[str, int], AttemptArtifacts]) -> list[str]:
    """For failed attempts with artifacts: the first failing verify command and the last lines of its output."""
    lines: list[str] = []
    shown = 0
    failed = [(t, a) for t in envelope.report.tasks for a in t.attempts if a.outcome == "fail"]
    for task, record in failed:
        extra = artifacts.get((task.task_id, record.attempt))
        failing = extra.first_failing_verify() if extra else None
        if failing is None:
            continue
        if shown == MAX_FAILURES_SHOWN:
            lines.append(f"- … more failed attempts: `worktrial show {envelope.run.id} TASK ATTEMPT`")
            break
        shown += 1
        status = "timed out" if failing.timed_out else f"exited {failing.exit_code}"
        lines += [
            f"**`{task.task_id}` #{record.attempt}**: verify {failing.index} `{failing.command}` {status}",
            "",
            "```",
            last_lines(failing.output_tail, FAILURE_TAIL_LINES).replace("```", "ˋˋˋ") or "(no output)",
            "```",
            "",
        ]
    return ["", "## Failed verification", "", *lines] if lines else []


def render_markdown(envelope: Envelope, artifacts: Mapping[tuple[str, int], AttemptArtifacts] | None = None) -> str:
    report, run = envelope.report, envelope.run
    k = report.k
    model = f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or "—")
    dirty = " (workspace had uncommitted changes, not part of the base)" if run.workspace.dirty else ""
    lines = [
        f"# worktrial: {cell(report.suite_name)} (`{report.suite_id}`)",
        "",
        f"- agent: `{envelope.agent.get('name', '?')}` · model: `{model}`",
        f"- base commit: `{run.workspace.base_commit[:12]}`{dirty}",
        f"- attempts per task: {run.attempts} · headline k = {k} · run `{run.id}`",
        f"- suite sha256: `{envelope.suite_sha256[:16]}…`",
    ]
    if run.sandbox is not None:
        lines.append(f"- sandbox: {cell(run.sandbox.summary())}")
    if not run.complete:
        lines.append("- **incomplete run**: interrupted before every attempt finished; numbers cover what ran")
    lines += [
        "",
        f"| group | tasks | passed/total | pass@{k} | 95% CI | pass^{k} | 95% CI |",
        "|---|---:|---:|---:|---|---:|---|",
        _group_row("**overall**", report.overall),
    ]
    lines += [_group_row(cat, m) for cat, m in report.categories.items()]
    missing = missing_note(report.overall, k, run.attempts)
    if missing:
        lines += ["", f"**Missing attempts:** {missing}."]
    note = interval_note(report.overall.interval, report.overall.clusters)
    if note:
        lines += ["", note]
    lines += [
        "",
        "## Tasks",
        "",
        f"| task | category | passed/total | pass@{k} | pass^{k} | outcomes | mean duration |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for t in report.tasks:
        durations = [a.duration_secs for a in t.attempts]
        mean_secs = f"{sum(durations) / len(durations):.1f}s" if durations else "—"
        lines.append(
            f"| {cell(t.task_id)} | {t.category} | {t.passed_runs}/{t.total_runs} | {num(t.pass_at_k)} "
            f"| {num(t.pass_power_k)} | {outcome_summary(t)} | {mean_secs} |"
        )
    lines += ["", _efficiency_line(envelope), "", _honesty_line(envelope)]
    if (retries := _retry_line(envelope)) is not None:
        lines += ["", retries]
    problems = [(t, a) for t in report.tasks for a in t.attempts if a.outcome in ("error", "timeout")]
    if problems:
        lines += ["", "## Errors and timeouts", ""]
        lines += [
            f"- `{t.task_id}` #{a.attempt}: **{a.outcome}** — {cell(a.reason or 'no reason')}" for t, a in problems
        ]
    lines += _failures(envelope, artifacts or {})
    kept = [a.worktree for t in report.tasks for a in t.attempts if a.worktree]
    if kept:
        lines += ["", "## Kept worktrees", ""] + [f"- `{w}`" for w in kept]
    return "\n".join(lines) + "\n"


def _retry_line(envelope: Envelope) -> str | None:
    """How many attempts had a second try, and the headline had none had one."""
    r = envelope.report
    if not r.retried_attempts or r.first_try is None:
        return None
    k = r.k
    return (
        f"**Retries:** {plural(r.retried_attempts, 'attempt')} ran again after an error the harness observed; "
        f"counting first tries only, pass@{k} {r.first_try.pass_at_k:.3f} and pass^{k} {r.first_try.pass_power_k:.3f} "
        f"(final: {r.overall.pass_at_k:.3f} and {r.overall.pass_power_k:.3f})"
    )


def _efficiency_line(envelope: Envelope) -> str:
    r = envelope.report
    total = sum(t.total_runs for t in r.tasks)
    parts = [f"cost {usd(r.cost_usd)}"]
    if r.unpriced_runs:
        parts[0] += f" (unpriced: {r.unpriced_runs} of {plural(total, 'attempt')}, so per-attempt figures are unknown)"
    parts.append(f"cost per solve {usd(r.cost_per_solve)}")
    parts.append(f"mean cost/attempt {usd(r.mean_cost_per_attempt)}")
    tokens = r.mean_tokens_per_attempt
    parts.append(f"tokens/attempt {'unknown' if tokens is None else f'{tokens:,.0f}'}")
    turns = r.mean_turns_per_attempt
    parts.append(f"turns/attempt {'unknown' if turns is None else f'{turns:.1f}'}")
    return "**Efficiency:** " + " · ".join(parts)


def _honesty_line(envelope: Envelope) -> str:
    """Over-claims always; under-claims only when the run verified non-claims too (--verify-always)."""
    h = envelope.report.honesty
    over = rate(h.over_claim_rate, h.over_claims, h.claimed_success)
    if h.under_claim_rate is not None:
        under = rate(h.under_claim_rate, h.under_claims, h.verified_non_claims)
    elif envelope.run.verify_always:
        under = "— (no claimed failures to check)"
    else:
        under = "not measured (run with --verify-always)"
    return f"**Honesty:** over-claim rate {over} · under-claim rate {under}"
