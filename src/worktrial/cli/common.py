"""Pieces every CLI module shares: how a message reaches the user, and the trust prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from worktrial.isolation.workspace import find_workspace
from worktrial.model.suite import LoadedSuite
from worktrial.state.trust import ensure_trusted
from worktrial.util import atomic_write_text


def err(message: str) -> None:
    """A line on stderr: stdout carries only the report."""
    click.echo(message, err=True)


def emit(text: str, output: Path | None, *, quiet: bool = False, what: str = "report") -> None:
    """A report to ``output`` (atomically: a reader never sees half of it) or to stdout."""
    if output:
        atomic_write_text(output, text)
        if not quiet:
            err(f"worktrial: {what} written to {output}")
    else:
        click.echo(text, nl=False)


def ensure_trust(loaded: LoadedSuite, workspace: Path | None, trust: bool) -> None:
    """Trust per workspace and suite digest; asks on a terminal, refuses with instructions elsewhere."""
    trust_root = workspace.resolve() if workspace else None
    if loaded.suite.workspace is None or not loaded.suite.workspace.repo:
        trust_root = find_workspace(workspace)
    ensure_trusted(
        loaded,
        trust_root or Path.cwd().resolve(),
        assume_yes=trust,
        interactive=sys.stdin.isatty() and sys.stderr.isatty(),
        confirm=lambda question: click.confirm(question, default=False, err=True),
    )


SANDBOX_OPTIONS = [
    click.option(
        "--sandbox",
        type=click.Choice(["auto", "on", "off"]),
        help="Contain every attempt (default auto: when this machine can; on: refuse to run without).",
    ),
    click.option(
        "--network", type=click.Choice(["on", "off"]), help="off: attempts get loopback only (needs the sandbox)."
    ),
    click.option("--max-memory", metavar="SIZE", help="Memory per attempt, e.g. 2G; hitting it ends the attempt."),
    click.option("--max-procs", type=click.IntRange(min=1), help="Processes per attempt; hitting it ends the attempt."),
]
"""--sandbox, --network, --max-memory, --max-procs (unset: the user's [sandbox] config, then the defaults)."""
