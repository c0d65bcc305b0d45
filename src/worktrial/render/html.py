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
from worktrial.model.artifacts import AttemptArtifacts, collapsed_line, display_patch, last_lines
from worktrial.model.envelope import Envelope, Metrics, TaskReport
from worktrial.model.records import OUTCOMES
from worktrial.model.trajectory import Trajectory
from worktrial.render.format import budget_summary, ci, infrastructure_summary, num, p_value, provenance_line, usd
from worktrial.render.naming import model_name, run_names
from worktrial.render.svg import PALETTE, Bar, Series, bars_chart, curves_chart
from worktrial.render.trajectory import is_error, shorten, shown_calls, step_facts

# What one page shows of each text: enough to see why, small enough that a big run still opens quickly.
MAX_DIFF_LINES = 3000
MAX_LOG_LINES = 400
MAX_TRAJECTORY_STEPS = 400
VIEW_MESSAGE_CHARS = 3000
FAILING_TAIL_LINES = 60


@dataclass(frozen=True)
class ViewRun:
    """One run to show: its envelope, how the user referred to it (run id or file) and, optionally, its artifacts."""

    label: str
    envelope: Envelope
    artifacts: Mapping[tuple[str, int], AttemptArtifacts] = field(default_factory=dict)
    trajectories: Mapping[tuple[str, int], Trajectory] = field(default_factory=dict)
    """Each attempt's stored trajectory (``--trajectories``), when the run kept them and they check out."""


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


def _sandbox_facts(envelope: Envelope) -> list[tuple[str, str]]:
    """(term, text) rows saying what contained the run's attempts, from ``run.sandbox`` and ``run.sandboxes``."""
    run = envelope.run
    summary = envelope.sandbox_summary()
    if summary is None:
        return [("sandbox", "not recorded (the run was stored before worktrial recorded its sandbox)")]
    rows = [("sandbox", summary)]
    if run.sandbox is not None:
        details = [run.sandbox.network_detail, run.sandbox.uid and f"processes as {run.sandbox.uid}"]
        if any(details):
            rows.append(("containment", " · ".join(d for d in details if d)))
        if run.sandbox.shown is not None:
            rows.append(("shown to attempts", "; ".join(run.sandbox.shown)))
    if run.sandboxes and len(run.sandboxes) > 1:
        listing = "; ".join(f"{i + 1}. {box.summary()}" for i, box in enumerate(run.sandboxes))
        rows.append(("sessions", f"the run's sessions used {len(run.sandboxes)} containments: {listing}"))
    return rows


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


def trajectory_rows(trajectory: Trajectory) -> dict[str, Any]:
    """What the page shows of a trajectory: its conversations, each step shortened (``worktrial show`` has more)."""

    def steps(document: Trajectory) -> dict[str, Any]:
        shown = [
            {
                "id": step.step_id,
                "source": step.source,
                "error": is_error(step),
                "facts": step_facts(step),
                "message": shorten(step.message, VIEW_MESSAGE_CHARS, 60),
                "reasoning": shorten(step.reasoning_content or "", 1000, 12),
                "calls": list(shown_calls(step)),
            }
            for step in document.steps[:MAX_TRAJECTORY_STEPS]
        ]
        more = max(0, len(document.steps) - MAX_TRAJECTORY_STEPS)
        return {"id": document.trajectory_id, "steps": shown, "more": more}

    return {
        "agent": trajectory.agent,
        "notes": trajectory.notes,
        "main": steps(trajectory),
        "sides": [steps(sub) for sub in trajectory.subagent_trajectories or []],
        "count": sum(1 for _ in trajectory.all_steps()),
    }


def _patch_parts(extra: AttemptArtifacts | None) -> dict[str, Any]:
    """The patch as the page shows it: what the agent wrote, and its ignored build files folded into one line that
    opens to show them."""
    if extra is None or extra.patch is None:
        return {"diff": [], "collapsed_line": "", "collapsed_diff": []}
    shown = display_patch(extra.patch)
    return {
        "diff": diff_lines(shown.diff),
        "collapsed_line": collapsed_line(shown.collapsed) if shown.collapsed else "",
        "collapsed_diff": diff_lines(shown.collapsed_diff),
    }


def _task_row(
    task: TaskReport,
    artifacts: Mapping[tuple[str, int], AttemptArtifacts],
    trajectories: Mapping[tuple[str, int], Trajectory] | None = None,
) -> dict[str, Any]:
    counts = Counter(a.outcome for a in task.attempts)
    durations = [a.duration_secs for a in task.attempts]
    attempts = []
    first_with: dict[tuple[object, ...], int] = {}  # a failure block already shown, by what it shows
    for record in task.attempts:
        extra = artifacts.get((task.task_id, record.attempt))
        trajectory = (trajectories or {}).get((task.task_id, record.attempt))
        failing = extra.first_failure() if extra else None
        tail = last_lines(failing.output_tail, FAILING_TAIL_LINES) if failing else ""
        same_as = None
        if failing is not None:
            key = (failing.phase, failing.index, failing.command, failing.timed_out, failing.exit_code, tail)
            same_as = first_with.setdefault(key, record.attempt)
        attempts.append(
            {
                "record": record,
                "tokens": record.tokens.total(),
                "cost": usd(record.cost_usd),
                "artifacts": extra,
                "failing": failing,
                "failing_tail": tail,
                "failing_same_as": same_as if same_as != record.attempt else None,
                **_patch_parts(extra),
                "stdout": last_lines(extra.agent_stdout.text, MAX_LOG_LINES) if extra and extra.agent_stdout else "",
                "stderr": last_lines(extra.agent_stderr.text, MAX_LOG_LINES) if extra and extra.agent_stderr else "",
                "trajectory": trajectory_rows(trajectory) if trajectory is not None else None,
                "provenance": provenance_line(record),
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


def _curves(runs: Sequence[ViewRun], names: Sequence[str]) -> str:
    series = []
    for i, (run, name) in enumerate(zip(runs, names, strict=True)):
        colour = PALETTE[i % len(PALETTE)]
        curves = run.envelope.report.overall.curves
        prefix = f"{name}: " if len(runs) > 1 else ""
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


def _comparison(
    runs: Sequence[ViewRun], names: Sequence[str]
) -> tuple[Comparison | None, Leaderboard | None, list[str]]:
    if len(runs) < 2:
        return None, None, []
    loaded = [LoadedEnvelope(name, r.label, r.envelope) for r, name in zip(runs, names, strict=True)]
    notes: list[str] = []
    try:
        comparison: Comparison | None = compare_runs(loaded, allow_different_suites=True)
    except BadInputError as exc:
        comparison, notes = None, [str(exc)]
    contenders = [
        Contender(
            agent=name,
            model=None,
            status="complete" if r.envelope.run.complete else "interrupted",
            envelope=r.envelope,
        )
        for r, name in zip(runs, names, strict=True)
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
    env.filters["pvalue"] = p_value
    env.filters["secs"] = lambda v: "—" if v is None else f"{v:.1f}s"
    return env


def render_html(runs: Sequence[ViewRun], *, title: str | None = None) -> str:
    """The page for one run (details) or several (each run's details plus comparison and leaderboard)."""
    if not runs:
        raise BadInputError("view needs at least one run id or envelope file")
    names = run_names([r.envelope for r in runs])
    comparison, leaderboard, notes = _comparison(runs, names)
    views = []
    for index, (run, name) in enumerate(zip(runs, names, strict=True)):
        env = run.envelope
        views.append(
            {
                "index": index,
                "name": name,
                "source": run.label if run.label != env.run.id else None,
                "fragment": "" if index == 0 else f"run-{index}/",
                "env": env,
                "model": model_name(env) or "—",
                "sandbox": _sandbox_facts(env),
                "reuse": env.reuse_summary(),
                "budget": budget_summary(env.run.budget),
                "infrastructure": infrastructure_summary(env.report),
                "metrics": _metrics_rows(env),
                "bars": Markup(_group_bars(run)),
                "tasks": [_task_row(t, run.artifacts, run.trajectories) for t in env.report.tasks],
                "has_artifacts": bool(run.artifacts),
            }
        )
    first = runs[0].envelope
    page_title = title or (
        f"worktrial: {first.report.suite_name}" + (f" — {len(runs)} runs" if len(runs) > 1 else f" — {names[0]}")
    )
    template = _environment().get_template("view.html.j2")
    return template.render(
        title=page_title,
        runs=views,
        curves=Markup(_curves(runs, names)),
        comparison=comparison,
        leaderboard=leaderboard,
        comparison_notes=notes,
        outcomes=OUTCOMES,
    )
