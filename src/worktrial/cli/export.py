"""``worktrial export``: a stored run in another tool's layout (the formats: ``worktrial.state.export``)."""

from __future__ import annotations

from pathlib import Path

import click

from worktrial.cli.options import workspace_option
from worktrial.safe_text import for_terminal
from worktrial.state.export import FORMATS, load_source
from worktrial.state.roots import state_root


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), required=True, help="The layout to write.")
@click.option(
    "--output",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="A new (or empty) directory to write it to.",
)
@workspace_option()
def export_cmd(run: str, fmt: str, output: Path, workspace: Path | None) -> None:
    """Write a stored run in another tool's layout: swe-bench (predictions, logs, trajectories, metadata).

    RUN is a stored run id or an envelope file; the envelope goes alongside. Trajectories are exported when the
    run was made with --trajectories.
    """
    source = load_source(run, lambda: state_root(workspace))
    for line in FORMATS[fmt](source, output):
        click.echo(for_terminal(line))
