"""``worktrial export RUN --format harbor``: a stored run as a Harbor job directory for the Terminal-Bench
leaderboard (docs/environments.md)."""

from __future__ import annotations

from pathlib import Path

import click

from worktrial.cli.common import err
from worktrial.cli.options import workspace_option
from worktrial.state.harbor_export import LeaderboardMetadata, LeaderboardModel, export_harbor
from worktrial.state.roots import state_root


@click.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["harbor"]), required=True, help="harbor: Harbor's job layout.")
@click.option("--output", "-o", type=click.Path(path_type=Path), required=True, help="A new directory to write.")
@click.option("--agent-url", help="metadata.yaml: a link to the agent's repository or docs (the leaderboard's).")
@click.option("--agent-display-name", help="metadata.yaml: the agent's name on the leaderboard (default: its name).")
@click.option("--agent-org", help="metadata.yaml: the organization that made the agent.")
@click.option("--model-display-name", help="metadata.yaml: the model's name on the leaderboard (default: its id).")
@click.option("--model-org", help="metadata.yaml: the organization that made the model (default: its provider).")
@click.option(
    "--unchecked",
    is_flag=True,
    help="Write the directory even where the run breaks the leaderboard's rules (5 trials per task, no timeout or "
    "resource overrides): for Harbor's viewer, not as a submission.",
)
@workspace_option()
def export_cmd(
    run_id: str,
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
    """Write a stored run in another tool's layout: Harbor's job directory plus the leaderboard's metadata.yaml."""
    from worktrial.state.history import stored_envelope

    root = state_root(workspace)
    envelope = stored_envelope(root, run_id)
    agent = str(envelope.agent.get("name") or "agent")
    models: tuple[LeaderboardModel, ...] = ()
    if envelope.model is not None:
        provider = envelope.provider or ""
        models = (
            LeaderboardModel(
                model_name=envelope.model,
                model_provider=provider,
                model_display_name=model_display_name or envelope.model,
                model_org_display_name=model_org or provider,
            ),
        )
    metadata = None
    if agent_url and agent_org:
        metadata = LeaderboardMetadata(agent_url, agent_display_name or agent, agent_org, models)
    elif not unchecked:
        raise click.UsageError("--agent-url and --agent-org are required for the leaderboard's metadata.yaml")
    exported = export_harbor(root, envelope.run.id, output, metadata, unchecked=unchecked)
    for problem in exported.problems:
        err(f"worktrial: warning: not a leaderboard submission: {problem}")
    err(f"worktrial: {exported.trials} trial(s) written to {exported.job_dir}")
