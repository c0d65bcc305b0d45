"""The markdown report: headline numbers with error bars, per-category and per-task tables, problems."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from worktrial.model.artifacts import AttemptArtifacts, CommandLog, last_lines
from worktrial.model.envelope import Envelope, Metrics, Report, TaskReport
from worktrial.model.records import OUTCOMES
from worktrial.render.format import (
    attempts_label,
    budget_summary,
    ci,
    grouped,
    infrastructure_summary,
    interval_note,
    missing_note,
    num,
    rate,
    setup_time,
    usd,
)
from worktrial.safe_text import for_markdown, markdown_block, markdown_code
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
    """For failed attempts with artifacts: the first failing verify command and the last lines of its output, once
    per task for attempts that failed the same way (same command, status and output)."""
    lines: list[str] = []
    shown = 0
    for task in envelope.report.tasks:
        failed: list[tuple[int, CommandLog]] = []
        for record in task.attempts:
            extra = artifacts.get((task.task_id, record.attempt)) if record.outcome == "fail" else None
            if extra is not None and (failing := extra.first_failing_verify()) is not None:
                failed.append((record.attempt, failing))
        for group in grouped(failed, lambda item: _failure_key(item[1])):
            if shown == MAX_FAILURES_SHOWN:
                command = markdown_code(f"worktrial show {envelope.run.id} TASK ATTEMPT")
                return ["", "## Failed verification", "", *lines, f"- … more failed attempts: {command}"]
            shown += 1
            failing = group[0][1]
            status = "timed out" if failing.timed_out else f"exited {failing.exit_code}"
            same = " (the same output each time)" if len(group) > 1 else ""
            lines += [
                f"**{markdown_code(task.task_id)} {attempts_label(n for n, _ in group)}**: verify {failing.index} "
                f"{markdown_code(failing.command)} {status}{same}",
                "",
                *markdown_block(last_lines(failing.output_tail, FAILURE_TAIL_LINES) or "(no output)"),
                "",
            ]
    return ["", "## Failed verification", "", *lines] if lines else []


def _failure_key(failing: CommandLog) -> tuple[object, ...]:
    """What makes two failure blocks the same block: the command, how it ended and the output shown."""
    tail = last_lines(failing.output_tail, FAILURE_TAIL_LINES)
    return (failing.index, failing.command, failing.timed_out, failing.exit_code, tail)


def _problem_lines(report: Report) -> list[str]:
    """Errors and timeouts, one line per task and outcome and reason (``attempts 1–3``) rather than per attempt."""
    lines = []
    for task in report.tasks:
        problems = [a for a in task.attempts if a.outcome in ("error", "timeout")]
        for group in grouped(problems, lambda a: (a.outcome, a.reason)):
            a = group[0]
            lines.append(
                f"- {markdown_code(task.task_id)} {attempts_label(r.attempt for r in group)}: **{a.outcome}** — "
                f"{for_markdown(a.reason or 'no reason')}"
            )
    return lines


def render_markdown(envelope: Envelope, artifacts: Mapping[tuple[str, int], AttemptArtifacts] | None = None) -> str:
    report, run = envelope.report, envelope.run
    k = report.k
    model = f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or "—")
    dirty = " (workspace had uncommitted changes, not part of the base)" if run.workspace.dirty else ""
    lines = [
        f"# worktrial: {for_markdown(report.suite_name)} ({markdown_code(report.suite_id)})",
        "",
        f"- agent: {markdown_code(str(envelope.agent.get('name', '?')))} · model: {markdown_code(model)}",
        f"- base commit: {markdown_code(run.workspace.base_commit[:12])}{dirty}",
        f"- attempts per task: {run.attempts} · headline k = {k} · run {markdown_code(run.id)}",
        f"- suite file sha256: {markdown_code(envelope.suite_sha256[:16] + '…')}" + _bundle_digest(envelope),
    ]
    if (containment := envelope.sandbox_summary()) is not None:
        lines.append(f"- sandbox: {for_markdown(containment)}")
    if (containers := envelope.containers_summary()) is not None:
        lines.append(f"- containers: {for_markdown(containers)}")
    if (reused := envelope.reuse_summary()) is not None:
        lines.append(f"- made from another run: {for_markdown(reused)}")
    if not run.complete:
        why = "interrupted before every attempt finished"
        if run.reuse is not None and run.reuse.mode == "regrade" and run.reuse.not_regraded:
            why = "attempts that could not be regraded are left out (`worktrial resume` runs the agent for them)"
        lines.append(f"- **incomplete run**: {why}; numbers cover what ran")
    lines += [
        "",
        f"| group | tasks | passed/total | pass@{k} | 95% CI | pass^{k} | 95% CI |",
        "|---|---:|---:|---:|---|---:|---|",
        _group_row("**overall**", report.overall),
    ]
    lines += [_group_row(for_markdown(cat), m) for cat, m in report.categories.items()]
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
            f"| {for_markdown(t.task_id)} | {for_markdown(t.category)} | {t.passed_runs}/{t.total_runs} "
            f"| {num(t.pass_at_k)} | {num(t.pass_power_k)} | {outcome_summary(t)} | {mean_secs} |"
        )
    lines += ["", _efficiency_line(envelope), "", _honesty_line(envelope)]
    if (setup := setup_time(report.setup_secs, report.mean_setup_secs_per_attempt)) is not None:
        lines += ["", f"**Setup:** {setup}"]
    if (retries := _retry_line(envelope)) is not None:
        lines += ["", retries]
    if (timeouts := _timeout_line(envelope)) is not None:
        lines += ["", timeouts]
    if (budget := _budget_line(envelope)) is not None:
        lines += ["", budget]
    if (infrastructure := infrastructure_summary(report)) is not None:
        lines += ["", f"**Infrastructure errors:** {infrastructure}"]
    if problems := _problem_lines(report):
        lines += ["", "## Errors and timeouts", "", *problems]
    lines += _failures(envelope, artifacts or {})
    kept = [a.worktree for t in report.tasks for a in t.attempts if a.worktree]
    if kept:
        lines += ["", "## Kept worktrees", ""] + [f"- {markdown_code(w)}" for w in kept]
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


def _timeout_line(envelope: Envelope) -> str | None:
    """How many timed-out attempts had in fact solved the task (they were verified: on_timeout or --verify-always)."""
    r = envelope.report
    verified = [a for t in r.tasks for a in t.attempts if a.outcome == "timeout" and a.verified is not None]
    if not verified:
        return None
    return (
        f"**Timeouts:** {r.timeouts_verified} of {plural(len(verified), 'timed-out attempt')} verified had solved the "
        f"task when the deadline came; pass@{r.k} counts only passes"
    )


def _bundle_digest(envelope: Envelope) -> str:
    """The bundle digest, named apart from the file's, when the suite declares files (else the two are equal)."""
    if envelope.bundle_digest == envelope.suite_sha256:
        return ""
    files = plural(len(envelope.suite_files), "declared file")
    return f" · suite bundle sha256 (with {files}): `{envelope.bundle_digest[:16]}…`"


def _budget_line(envelope: Envelope) -> str | None:
    summary = budget_summary(envelope.run.budget)
    return None if summary is None else f"**Budget:** {for_markdown(summary)}"


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
