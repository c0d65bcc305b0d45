"""``worktrial gc``: parse the flags, call ``state.gc``, print what went (or would go) and what stayed."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click

from worktrial.cli.options import runtime_option, workspace_option
from worktrial.errors import BadInputError
from worktrial.safe_text import for_terminal
from worktrial.state.dirs import cache_dir
from worktrial.state.gc import GcOptions, Item, collect
from worktrial.state.roots import state_root


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - the loop returns at GB


def _line(item: Item) -> str:
    detail = f" ({item.detail})" if item.detail else ""
    size = f" · {human_bytes(item.size)}" if item.size is not None else ""
    why = f": {item.why_kept}" if item.why_kept else ""
    return for_terminal(f"  {item.kind} {item.name}{detail}{size}{why}")


@click.command("gc")
@click.option(
    "--older-than",
    "older_than",
    type=click.FloatRange(min=0),
    metavar="DAYS",
    help="Remove runs that started more than DAYS days ago.",
)
@click.option("--keep", type=click.IntRange(min=0), metavar="N", help="Remove all runs of each suite but the newest N.")
@click.option("--cache", is_flag=True, help="Remove the environment cache (environment.setup results).")
@click.option(
    "--images",
    is_flag=True,
    help="Remove worktrial's own container images (localhost/worktrial-env:*), its tools volume and containers "
    "a killed worktrial left.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed, with sizes; remove nothing.")
@runtime_option
@workspace_option()
def gc_cmd(
    older_than: float | None,
    keep: int | None,
    cache: bool,
    images: bool,
    dry_run: bool,
    container_runtime: Literal["auto", "docker", "podman"],
    workspace: Path | None,
) -> None:
    """Remove old runs, the environment cache and worktrial's leftover container images.

    A run still running (its lock held) is never removed; nothing is followed through a symlink.
    """
    options = GcOptions(
        older_than_days=older_than,
        keep=keep,
        cache=cache,
        images=images,
        runtime=container_runtime,
        dry_run=dry_run,
    )
    try:
        root: Path | None = state_root(workspace) if options.older_than_days is not None or keep is not None else None
    except BadInputError:
        root = None
    report = collect(root, cache_dir(), options)
    verb = "would remove" if dry_run else "removed"
    if report.removed:
        click.echo(f"{verb}:")
        for item in report.removed:
            click.echo(_line(item))
    if report.kept:
        click.echo("kept:")
        for item in report.kept:
            click.echo(_line(item))
    for note in report.notes:
        click.echo(for_terminal(f"note: {note}"))
    if not report.removed:
        click.echo("nothing to remove")
    elif dry_run:
        click.echo(f"would free {human_bytes(report.size)}; run it again without --dry-run to remove it")
    else:
        click.echo(f"freed {human_bytes(report.size)}")
