"""``worktrial export``: a stored run in another tool's layout (the formats: ``worktrial.state.export``)."""

from __future__ import annotations

from pathlib import Path

import click

from worktrial.cli.options import workspace_option
from worktrial.safe_text import for_terminal
from worktrial.state.export import FORMATS, ExportOptions, load_source
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
@click.option("--agent-url", help="harbor's metadata.yaml: a link to the agent's repository or docs.")
@click.option("--agent-display-name", help="harbor's metadata.yaml: the agent's name on the leaderboard.")
@click.option("--agent-org", help="harbor's metadata.yaml: the organization that made the agent.")
@click.option("--model-display-name", help="harbor's metadata.yaml: the model's name (default: its id).")
@click.option("--model-org", help="harbor's metadata.yaml: the organization that made the model (default: provider).")
@click.option(
    "--unchecked",
    is_flag=True,
    help="harbor: write the directory even where the run breaks the leaderboard's rules (5 trials per task, no "
    "timeout or resource overrides): for Harbor's viewer, not as a submission.",
)
@workspace_option()
def export_cmd(
    run: str,
    fmt: str,
    output: Path,
    agent_url: str | None,
    agent_display_name: str | None,
    agent_org: str | None,
    model_display_name: str | None,
    model_org: str | None,
    unchecked: bool,
    workspace: Path | None,
) -> None:
    """Write a stored run in another tool's layout: harbor (Harbor's job directory and the Terminal-Bench
    leaderboard's metadata.yaml) or swe-bench (predictions, logs, trajectories, metadata).

    RUN is a stored run id or an envelope file; the envelope goes alongside. Trajectories are exported when the
    run was made with --trajectories.
    """
    source = load_source(run, lambda: state_root(workspace))
    options = ExportOptions(agent_url, agent_display_name, agent_org, model_display_name, model_org, unchecked)
    for line in FORMATS[fmt](source, output, options):
        click.echo(for_terminal(line))
