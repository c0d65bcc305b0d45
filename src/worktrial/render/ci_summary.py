"""A compact markdown summary for CI job pages ($GITHUB_STEP_SUMMARY): headline, groups, tasks that failed."""

from __future__ import annotations

from worktrial.model.envelope import Envelope
from worktrial.render.format import ci, num
from worktrial.safe_text import for_markdown, markdown_code

MAX_FAILED_TASKS = 25


def render_ci_summary(envelope: Envelope) -> str:
    report, run = envelope.report, envelope.run
    k = report.k
    agent = str(envelope.agent.get("name", "?"))
    model = f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or None)
    who = markdown_code(agent) + (f" · {markdown_code(model)}" if model else "")
    label = envelope.run.label if envelope.run.label else None
    lines = [
        f"### worktrial: {for_markdown(report.suite_name)}" + (f" — {for_markdown(label)}" if label else ""),
        "",
        f"{who} · run {markdown_code(run.id)} · {run.attempts} attempt{'s' if run.attempts != 1 else ''} per task"
        + ("" if run.complete else " · **incomplete**"),
        "",
        f"| group | passed/total | pass@{k} | 95% CI | pass^{k} |",
        "|---|---:|---:|---|---:|",
    ]
    groups = [("**overall**", report.overall), *((for_markdown(c), m) for c, m in report.categories.items())]
    for name, m in groups:
        lines.append(
            f"| {name} | {m.passed_runs}/{m.total_runs} | {num(m.pass_at_k)} | {ci(m.ci95.pass_at_k)} "
            f"| {num(m.pass_power_k)} |"
        )
    failing = [t for t in report.tasks if any(a.outcome != "pass" for a in t.attempts)]
    if failing:
        lines += [
            "",
            f"<details><summary>{len(failing)} task{'s' if len(failing) != 1 else ''} not always passing</summary>",
            "",
        ]
        for task in failing[:MAX_FAILED_TASKS]:
            first = next(a for a in task.attempts if a.outcome != "pass")
            why = f" — {for_markdown(first.reason)}" if first.reason else ""
            lines.append(
                f"- {markdown_code(task.task_id)} {task.passed_runs}/{task.total_runs}: "
                f"#{first.attempt} {first.outcome}{why}"
            )
        if len(failing) > MAX_FAILED_TASKS:
            lines.append(f"- … and {len(failing) - MAX_FAILED_TASKS} more")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
