"""``worktrial view``: one self-contained HTML page of one or more runs (inline CSS, JS and SVG; no network).

The page is rendered by jinja2 from a template shipped as package data, with autoescaping on: everything an
agent produced (output, patches, reasons) is text, never markup. Charts are SVG drawn in Python (``svg.py``).
It needs only envelopes; artifacts, when a run kept them, add logs and diffs per attempt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from worktrial.analysis.compare import Comparison, LoadedEnvelope, compare_runs
from worktrial.analysis.leaderboard import Contender, Leaderboard, build_leaderboard
from worktrial.errors import BadInputError
from worktrial.model.artifacts import AttemptArtifacts, last_lines
from worktrial.model.envelope import Envelope, Metrics, TaskReport
from worktrial.model.records import OUTCOMES
from worktrial.render.format import ci, num, usd
from worktrial.render.svg import PALETTE, Bar, Series, bars_chart, curves_chart

# What one page shows of each text: enough to see why, small enough that a big run still opens quickly.
MAX_DIFF_LINES = 3000
MAX_LOG_LINES = 400


@dataclass(frozen=True)
class ViewRun:
    """One run to show: its envelope, the name the user gave it and, optionally, its stored artifacts."""

    label: str
    envelope: Envelope
    artifacts: Mapping[tuple[str, int], AttemptArtifacts] = field(default_factory=dict)


def diff_lines(diff: str, limit: int = MAX_DIFF_LINES) -> list[tuple[str, str]]:
    """(css class, text) per line of a unified diff, for colouring without parsing it in the browser."""
    out: list[tuple[str, str]] = []
    lines = diff.splitlines()
    for line in lines[:limit]:
        if line.startswith(("diff --git", "index ", "+++", "---", "new file", "deleted file", "Binary files")):
            kind = "meta"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line))
    if len(lines) > limit:
        out.append(("meta", f"… {len(lines) - limit} more lines (worktrial show has them all)"))
    return out


def _model(envelope: Envelope) -> str:
    return f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or "—")


def _metrics_rows(envelope: Envelope) -> list[dict[str, Any]]:
    groups: list[tuple[str, Metrics]] = [("overall", envelope.report.overall), *envelope.report.categories.items()]
    return [
        {
            "name": name,
            "tasks": m.tasks,
            "passed": f"{m.passed_runs}/{m.total_runs}",
            "at": num(m.pass_at_k),
            "at_ci": ci(m.ci95.pass_at_k),
            "power": num(m.pass_power_k),
            "power_ci": ci(m.ci95.pass_power_k),
        }
        for name, m in groups
    ]


def _task_row(task: TaskReport, artifacts: Mapping[tuple[str, int], AttemptArtifacts]) -> dict[str, Any]:
    counts = Counter(a.outcome for a in task.attempts)
    durations = [a.duration_secs for a in task.attempts]
    attempts = []
    for record in task.attempts:
        extra = artifacts.get((task.task_id, record.attempt))
        failing = extra.first_failure() if extra else None
        attempts.append(
            {
                "record": record,
                "tokens": record.tokens.total(),
                "cost": usd(record.cost_usd),
                "artifacts": extra,
                "failing": failing,
                "failing_tail": last_lines(failing.output_tail, 60) if failing else "",
                "diff": diff_lines(extra.patch.diff) if extra and extra.patch else [],
                "stdout": last_lines(extra.agent_stdout.text, MAX_LOG_LINES) if extra and extra.agent_stdout else "",
                "stderr": last_lines(extra.agent_stderr.text, MAX_LOG_LINES) if extra and extra.agent_stderr else "",
            }
        )
    return {
        "task": task,
        "outcomes": " · ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]) or "not run",
        "status": "pass"
        if task.total_runs and task.passed_runs == task.total_runs
        else ("none" if not task.total_runs else ("fail" if task.passed_runs == 0 else "flaky")),
        "mean_secs": sum(durations) / len(durations) if durations else None,
        "attempts": attempts,
    }


def _curves(runs: Sequence[ViewRun]) -> str:
    series = []
    for i, run in enumerate(runs):
        colour = PALETTE[i % len(PALETTE)]
        curves = run.envelope.report.overall.curves
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        series.append(Series(f"{prefix}pass@k", {int(k): v for k, v in curves.pass_at.items()}, colour))
        series.append(Series(f"{prefix}pass^k", {int(k): v for k, v in curves.pass_power.items()}, colour, True))
    return curves_chart(series)


def _group_bars(run: ViewRun) -> str:
    k = run.envelope.report.k
    groups: list[tuple[str, Metrics]] = [("overall", run.envelope.report.overall)]
    groups += list(run.envelope.report.categories.items())
    bars = []
    for name, m in groups:
        bars.append(Bar(f"{name} @{k}", m.pass_at_k, m.ci95.pass_at_k, PALETTE[0]))
        bars.append(Bar(f"{name} ^{k}", m.pass_power_k, m.ci95.pass_power_k, PALETTE[1]))
    return bars_chart(bars, f"pass@{k} and pass^{k} per group with 95% CI")


def _comparison(runs: Sequence[ViewRun]) -> tuple[Comparison | None, Leaderboard | None, list[str]]:
    if len(runs) < 2:
        return None, None, []
    loaded = [LoadedEnvelope(r.label, r.envelope.run.id, r.envelope) for r in runs]
    notes: list[str] = []
    try:
        comparison: Comparison | None = compare_runs(loaded, allow_different_suites=True)
    except BadInputError as exc:
        comparison, notes = None, [str(exc)]
    contenders = [
        Contender(
            agent=r.label,
            model=None,
            status="complete" if r.envelope.run.complete else "interrupted",
            envelope=r.envelope,
        )
        for r in runs
    ]
    return comparison, build_leaderboard(contenders), notes


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("worktrial", "data/templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = num
    env.filters["ci"] = ci
    env.filters["usd"] = usd
    env.filters["secs"] = lambda v: "—" if v is None else f"{v:.1f}s"
    return env


def render_html(runs: Sequence[ViewRun], *, title: str | None = None) -> str:
    """The page for one run (details) or several (each run's details plus comparison and leaderboard)."""
    if not runs:
        raise BadInputError("view needs at least one run id or envelope file")
    comparison, leaderboard, notes = _comparison(runs)
    views = []
    for index, run in enumerate(runs):
        env = run.envelope
        views.append(
            {
                "index": index,
                "label": run.label,
                "env": env,
                "model": _model(env),
                "metrics": _metrics_rows(env),
                "bars": Markup(_group_bars(run)),
                "tasks": [_task_row(t, run.artifacts) for t in env.report.tasks],
                "has_artifacts": bool(run.artifacts),
            }
        )
    first = runs[0].envelope
    page_title = title or (
        f"worktrial: {first.report.suite_name}" + (f" — {len(runs)} runs" if len(runs) > 1 else f" — {runs[0].label}")
    )
    template = _environment().get_template("view.html.j2")
    return template.render(
        title=page_title,
        runs=views,
        curves=Markup(_curves(runs)),
        comparison=comparison,
        leaderboard=leaderboard,
        comparison_notes=notes,
        outcomes=OUTCOMES,
    )
