"""Rich renderables for the terminal: ``worktrial show`` (a run, a task, an attempt) and tables on a terminal.

These are the human views; markdown stays the format for files and pipes. Text from agents, suites and envelopes
reaches rich only through ``safe_text.terminal_text``: a ``Text`` (never markup, so a log that contains ``[bold]``
prints literally) with its control characters shown as ``\\x1b``, never sent to the terminal raw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown, MarkdownElement, TableElement
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from worktrial.model.artifacts import AttemptArtifacts, PatchDisplay, StreamTail, collapsed_line, display_patch
from worktrial.model.envelope import Envelope, TaskReport
from worktrial.model.records import AttemptRecord
from worktrial.render.format import ci, infrastructure_summary, missing_note, num, provenance_line, setup_time, usd
from worktrial.render.markdown import outcome_summary
from worktrial.safe_text import for_markdown_listing, for_terminal, terminal_text
from worktrial.util import plural

STYLE = {"pass": "green", "fail": "red", "timeout": "yellow", "error": "magenta"}
SHOW_LOG_LINES = 200


def _outcome(outcome: str) -> Text:
    return Text(outcome, style=f"bold {STYLE.get(outcome, '')}")


def run_summary(envelope: Envelope, has_artifacts: bool) -> RenderableType:
    """Header facts, group metrics and the task table of one run."""
    report, run = envelope.report, envelope.run
    k = report.k
    model = f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or "—")
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("suite", terminal_text(f"{report.suite_name} ({report.suite_id}) · {envelope.suite_path}"))
    facts.add_row("suite file sha256", terminal_text(f"{envelope.suite_sha256[:16]}…"))
    if envelope.bundle_digest != envelope.suite_sha256:
        files = plural(len(envelope.suite_files), "declared file")
        facts.add_row("suite bundle sha256", terminal_text(f"{envelope.bundle_digest[:16]}… (with {files})"))
    facts.add_row("agent", terminal_text(f"{envelope.agent.get('name', '?')} · model {model}"))
    facts.add_row("run", terminal_text(f"{run.id}" + (f" · {run.label}" if run.label else "") + f" · {run.started_at}"))
    facts.add_row(
        "base commit",
        terminal_text(run.workspace.base_commit[:12] + (" (dirty workspace)" if run.workspace.dirty else "")),
    )
    facts.add_row(
        "attempts",
        Text(f"{plural(run.attempts, 'attempt')} per task · k = {k}" + ("" if run.complete else " · incomplete")),
    )
    facts.add_row("cost", Text(f"{usd(report.cost_usd)} · per solve {usd(report.cost_per_solve)}"))
    if (setup := setup_time(report.setup_secs, report.mean_setup_secs_per_attempt)) is not None:
        facts.add_row("setup", Text(setup))
    if (infrastructure := infrastructure_summary(report)) is not None:
        facts.add_row("infrastructure errors", Text(infrastructure))
    if (containment := envelope.sandbox_summary()) is not None:
        facts.add_row("sandbox", terminal_text(containment))
    if (containers := envelope.containers_summary()) is not None:
        facts.add_row("containers", terminal_text(containers))
    if (reused := envelope.reuse_summary()) is not None:
        facts.add_row("made from", terminal_text(reused))
    groups = Table(title=None, show_edge=False, header_style="bold")
    for column in ("group", "tasks", "passed/total", f"pass@{k}", "95% CI", f"pass^{k}", "95% CI "):
        groups.add_column(column, justify="right" if column not in ("group", "95% CI", "95% CI ") else "left")
    for name, m in [("overall", report.overall), *report.categories.items()]:
        groups.add_row(
            terminal_text(name),
            str(m.tasks),
            f"{m.passed_runs}/{m.total_runs}",
            num(m.pass_at_k),
            ci(m.ci95.pass_at_k),
            num(m.pass_power_k),
            ci(m.ci95.pass_power_k),
        )
    missing = missing_note(report.overall, k, run.attempts)
    tasks = Table(show_edge=False, header_style="bold")
    for column in ("task", "category", "passed/total", "outcomes", "first problem"):
        tasks.add_column(column, overflow="fold")
    for task in report.tasks:
        problem = next((a for a in task.attempts if a.outcome != "pass"), None)
        why = terminal_text(f"#{problem.attempt} {problem.reason or problem.outcome}") if problem else Text("")
        tasks.add_row(
            terminal_text(task.task_id),
            terminal_text(task.category),
            f"{task.passed_runs}/{task.total_runs}",
            outcome_summary(task),
            why,
        )
    hint = (
        "worktrial show RUN TASK [ATTEMPT] shows an attempt's logs and patch"
        if has_artifacts
        else "no artifacts stored for this run (--no-artifacts, or an envelope from elsewhere)"
    )
    notes = [Text(f"missing attempts: {missing}", style="dim")] if missing else []
    return Group(facts, Text(""), groups, *notes, Text(""), tasks, Text(""), Text(hint, style="dim"))


def task_view(task: TaskReport, artifacts: Mapping[tuple[str, int], AttemptArtifacts]) -> RenderableType:
    table = Table(show_edge=False, header_style="bold", title=terminal_text(f"{task.task_id} · {task.category}"))
    for column in ("#", "outcome", "claimed", "verified", "time", "tokens", "cost", "reason / first failing command"):
        table.add_column(column, overflow="fold")
    for record in task.attempts:
        extra = artifacts.get((task.task_id, record.attempt))
        failing = extra.first_failure() if extra else None
        why = record.reason or ""
        if failing is not None:
            why += f"\n{failing.phase} {failing.index}: {failing.command} → " + (
                "timed out" if failing.timed_out else f"exit {failing.exit_code}"
            )
        tokens = record.tokens.total()
        table.add_row(
            str(record.attempt),
            _outcome(record.outcome),
            _yes_no(record.claimed),
            _yes_no(record.verified),
            f"{record.duration_secs:.1f}s",
            "—" if tokens is None else f"{tokens:,}",
            usd(record.cost_usd),
            terminal_text(why, multiline=True),
        )
    return table


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _tail(title: str, stream: StreamTail | None) -> RenderableType | None:
    if stream is None or not stream.text:
        return None
    lines = stream.text.rstrip("\n").splitlines()
    shown = "\n".join(lines[-SHOW_LOG_LINES:])
    note = f" (last {min(len(lines), SHOW_LOG_LINES)} lines of {stream.total_bytes:,} bytes)"
    return Panel(terminal_text(shown, multiline=True), title=title + note, title_align="left", border_style="dim")


def attempt_view(
    record: AttemptRecord, artifacts: AttemptArtifacts | None, *, full_patch: bool = False
) -> RenderableType:
    """Everything about one attempt: facts, setup/verify commands with output, agent output, patch (ignored build
    files collapsed into one line unless ``full_patch``)."""
    head = Text.assemble(terminal_text(f"{record.task_id} #{record.attempt}: "), _outcome(record.outcome))
    if record.reason:
        head.append(terminal_text(f" — {record.reason}", multiline=True))
    facts = Text(
        f"claimed {_yes_no(record.claimed)} · verified {_yes_no(record.verified)} · total {record.duration_secs:.1f}s"
        f" · agent {record.agent_secs:.1f}s · verify {record.verify_secs:.1f}s · cost {usd(record.cost_usd)}"
        + ("" if record.setup_secs is None else f" · setup before it {record.setup_secs:.1f}s"),
        style="dim",
    )
    parts: list[RenderableType] = [head, facts]
    if (origin := provenance_line(record)) is not None:
        parts.append(terminal_text(origin))
    if artifacts is None:
        parts.append(Text("no artifacts stored for this attempt", style="dim"))
        return Group(*parts, *_trajectory_hint(record))
    for command in artifacts.commands:
        status = "timed out" if command.timed_out else f"exit {command.exit_code}"
        style = "green" if command.ok else "red"
        title = f"{command.phase} {command.index}: {command.command} → {status} ({command.duration_secs:.1f}s)"
        body = "\n".join(command.output_tail.rstrip("\n").splitlines()[-SHOW_LOG_LINES:]) or "(no output)"
        parts.append(
            Panel(
                terminal_text(body, multiline=True), title=terminal_text(title), title_align="left", border_style=style
            )
        )
    for title, stream in (("agent stdout", artifacts.agent_stdout), ("agent stderr", artifacts.agent_stderr)):
        panel = _tail(title, stream)
        if panel is not None:
            parts.append(panel)
    patch = artifacts.patch
    if patch is None:
        parts.append(Text("no patch recorded (the agent never ran)", style="dim"))
    elif not patch.diff:
        parts.append(Text("the agent changed nothing", style="dim"))
    else:
        shown = display_patch(patch) if not full_patch else PatchDisplay(patch.diff, [])
        title = f"patch: {plural(len(patch.files), 'file')}" + (" (truncated)" if patch.truncated else "")
        if shown.diff:
            parts.append(
                Panel(
                    Syntax(for_terminal(shown.diff, multiline=True), "diff", theme="ansi_dark", word_wrap=True),
                    title=title,
                    title_align="left",
                )
            )
        if shown.collapsed:
            line = collapsed_line(shown.collapsed) + " (not shown; --full-patch shows them)"
            parts.append(terminal_text(line if shown.diff else f"{title}: {line}", style="dim"))
    if artifacts.redactions:
        parts.append(Text(f"{plural(artifacts.redactions, 'secret value')} redacted", style="dim"))
    return Group(*parts, *_trajectory_hint(record))


def _trajectory_hint(record: AttemptRecord) -> list[RenderableType]:
    if record.trajectory is None:
        return []
    steps = plural(record.trajectory.steps, "step")
    return [Text(f"trajectory: {steps} (add --trajectory to see them)", style="dim")]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table for pipes and files (cells escaped)."""

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(for_markdown_listing(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def rich_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(terminal_text(c) for c in row))
    return table


class _WrappingTable(TableElement):
    """A markdown table whose cells wrap instead of ending in ``…``: at 80 columns a task id cut to ``fix-pipe-ce…``
    could be any of several tasks."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for part in super().__rich_console__(console, options):
            if isinstance(part, Table):
                for column in part.columns:
                    column.overflow = "fold"
            yield part


class ReportMarkdown(Markdown):
    """A markdown report drawn on a terminal, its tables wrapped rather than cut."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {**Markdown.elements, "table_open": _WrappingTable}
