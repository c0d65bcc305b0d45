"""Markdown for ``worktrial check``: a per-task table, then every problem and lint with its fix."""

from __future__ import annotations

import re

from worktrial.analysis.check_report import (
    DETECTION,
    FLAKE_RATE,
    CheckReport,
    TaskCheck,
    default_repeats,
    detection_probability,
)
from worktrial.analysis.lint import Lint
from worktrial.render.format import grouped
from worktrial.safe_text import for_markdown, markdown_code
from worktrial.util import plural

SHOWN_PLACES = 3
_FIELD = re.compile(r"\.([a-z_]+)\[\d+\]$")


def _count(group: list[Lint]) -> str:
    """``4 verify commands`` when every place is an entry of one kind of field, else ``4 places``."""
    fields = {match.group(1) if (match := _FIELD.search(lint.where)) else None for lint in group}
    field = fields.pop() if len(fields) == 1 else None
    return f"{len(group)} {field.replace('_', ' ')}" if field and field.endswith("commands") else f"{len(group)} places"


def render_lints(lints: list[Lint]) -> list[str]:
    """The "Lints" section: ``check``'s report and ``validate`` print it. Findings that say the same thing are one
    line with their count and places (the first few); what a kind of finding risks (``Lint.note``) is said once,
    under the list."""
    lines = ["## Lints", ""]
    groups = grouped(lints, lambda lint: (lint.severity, lint.message, lint.suggestion, lint.note))
    for group in groups:
        lint = group[0]
        label = "**warning** " if lint.severity == "warning" else ""
        places = ", ".join(markdown_code(g.where) for g in group[:SHOWN_PLACES])
        if len(group) > SHOWN_PLACES:
            places += f" and {len(group) - SHOWN_PLACES} more"
        where = places if len(group) == 1 else f"{_count(group)} ({places})"
        line = f"- {label}{where}: {for_markdown(lint.message)}"
        if lint.suggestion:
            line += f" — write it as {markdown_code(lint.suggestion)}"
        lines.append(line)
    for note in dict.fromkeys(lint.note for lint in lints if lint.note):
        lines += ["", for_markdown(note)]
    return lines


def _verify_cell(task: TaskCheck) -> str:
    if task.verify_passes is None:
        return "—"
    return f"{task.verify_passes}/{task.verify_runs} pass"


def _status(task: TaskCheck) -> str:
    issues = len(task.problems) + task.lints
    return "ok" if issues == 0 else f"**{issues} problem{'s' if issues != 1 else ''}**"


def _flake_guidance(report: CheckReport) -> list[str]:
    """What a clean verifier result is worth: the rule-of-three bound, and whether the repeats were enough."""
    verdicts = report.repeats + 1
    bound = report.flake_upper_bound
    caught = report.detects_10pct_flake
    if bound is None or caught is None:
        return []
    text = (
        f'**What "stable" means:** a verifier that agreed with itself in all {verdicts} verifications is flaky at '
        f"most {bound:.0%} of the time (95% upper bound, about 3/{verdicts} by the rule of three). "
        f"A verifier that is wrong {FLAKE_RATE:.0%} of the time shows a disagreement with probability {caught:.0%} "
        "per task at this setting"
    )
    if caught < DETECTION:
        wanted = default_repeats()
        chance = detection_probability(FLAKE_RATE, wanted + 1)
        text += f", so it may well have been missed: `--repeats {wanted}` catches it with {chance:.0%}."
    else:
        text += "."
    return [text]


def render_check_markdown(report: CheckReport) -> str:
    lines = [
        f"# worktrial check: {markdown_code(report.suite_id)}",
        "",
        f"- suite: {markdown_code(report.suite_path)} · "
        f"suite file sha256 {markdown_code(report.suite_sha256[:16] + '…')}",
        f"- base commit {markdown_code(report.base_commit[:12])} · verifier re-runs per task: {report.repeats} "
        "(plus the oracle's own verification)",
        "",
        "| task | solution | oracle | nop | verifier on oracle result | status |",
        "|---|---|---|---|---|---|",
    ]
    for t in report.tasks:
        lines.append(
            f"| {for_markdown(t.task_id)} | {'yes' if t.has_solution else 'none'} | {t.oracle or '—'} | {t.nop} "
            f"| {_verify_cell(t)} | {_status(t)} |"
        )
    found = [(t.task_id, p) for t in report.tasks for p in t.problems]
    if found:
        lines += ["", "## Problems", ""]
        lines += [f"- {markdown_code(task_id)}: {for_markdown(problem)}" for task_id, problem in found]
    if report.lints:
        lines += ["", *render_lints(report.lints)]
    if report.without_solution:
        lines += [
            "",
            "Tasks without a `solution` (the oracle cannot check them; add one to prove they are solvable): "
            + ", ".join(markdown_code(t) for t in report.without_solution),
        ]
    lines += ["", *_flake_guidance(report)]
    verdict = "**No problems found.**" if report.ok else f"**{report.problems} problem(s) found.**"
    if report.warnings:
        verdict += f" {plural(report.warnings, 'warning')} (see Lints)."
    lines += ["", verdict]
    return "\n".join(lines) + "\n"
