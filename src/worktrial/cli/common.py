"""Pieces every CLI module shares: how a message reaches the user, and the trust prompt.

What a piece needs beyond click is imported when it is used: every command imports this module, also
``worktrial --help``, which needs none of it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from worktrial.safe_text import for_terminal
from worktrial.util import atomic_write_text

if TYPE_CHECKING:
    from worktrial.model.suite import LoadedSuite


def err(message: str) -> None:
    """A line on stderr: stdout carries only the report. Messages name paths, task ids and agent text, so their
    control characters are shown escaped (``\\x1b``), never sent to the terminal raw."""
    click.echo(for_terminal(message, multiline=True), err=True)


def _confirm(question: str) -> bool:
    """A yes/no question on the terminal; it quotes the suite's commands, so their control characters are shown
    escaped: a ``\\r`` cannot paint an innocent command over the one that would run."""
    return click.confirm(for_terminal(question, multiline=True), default=False, err=True)


def print_table(headers: list[str], cells: list[list[str]], fmt: str) -> None:
    """Rows as a terminal table when ``fmt`` is ``table`` on a terminal, else as markdown (pipes, files, docs).

    Cells are printed without rich markup escaping so that commands in them copy-paste exactly as shown.
    """
    from worktrial.render.terminal import markdown_table, rich_table

    if fmt == "table" and sys.stdout.isatty():
        from rich.console import Console

        Console(highlight=False).print(rich_table(headers, cells))
    else:
        click.echo(markdown_table(headers, cells), nl=False)


def emit(text: str, output: Path | None, *, quiet: bool = False, what: str = "report", fmt: str = "") -> None:
    """A report to ``output`` (atomically: a reader never sees half of it) or to stdout.

    With ``fmt="auto"`` a markdown report on a terminal is drawn by rich (tables, headings); piped, or with
    ``--format markdown``, it stays markdown text that can be pasted anywhere. The renderers escape what came from
    input (``safe_text``); no control character reaches a terminal or a report file even if one did not.
    """
    text = for_terminal(text, multiline=True)
    if output:
        atomic_write_text(output, text)
        if not quiet:
            err(f"worktrial: {what} written to {output}")
    elif fmt == "auto" and sys.stdout.isatty():
        from rich.console import Console

        from worktrial.render.terminal import ReportMarkdown

        Console(highlight=False).print(ReportMarkdown(text))
    else:
        click.echo(text, nl=False)


def ensure_trust(loaded: LoadedSuite, workspace: Path | None, trust: bool, trust_project: bool | None) -> None:
    """Trust per workspace and suite digest (asks on a terminal, refuses with instructions elsewhere), then the
    workspace's own worktrial.toml, which ``--trust`` never covers (``ensure_project_trust``); ``trust_project``
    None is for commands that run no agent or provider the project could name (``check``: oracle and nop)."""
    from worktrial.isolation.workspace import find_workspace
    from worktrial.state.trust import ensure_trusted

    trust_root = workspace.resolve() if workspace else None
    if loaded.suite.workspace is None or not loaded.suite.workspace.repo:
        trust_root = find_workspace(workspace)
    ensure_trusted(
        loaded,
        trust_root or Path.cwd().resolve(),
        assume_yes=trust,
        interactive=sys.stdin.isatty() and sys.stderr.isatty(),
        confirm=_confirm,
    )
    if trust_project is not None:
        ensure_project_trust(workspace, trust_project)


def ensure_project_trust(workspace: Path | None, trust_project: bool) -> bool:
    """The workspace's worktrial.toml: its settings that run programs or route credentials count only when trusted
    explicitly; else they are skipped with one warning. Whether the file counts in full."""
    from worktrial.state.project import ensure_project_trusted
    from worktrial.state.roots import state_root

    return ensure_project_trusted(
        state_root(workspace),
        trust_project=trust_project,
        interactive=sys.stdin.isatty() and sys.stderr.isatty(),
        confirm=_confirm,
        warn=err,
    )
