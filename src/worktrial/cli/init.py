"""``worktrial init``: write a starter suite for the current repository."""

from __future__ import annotations

from pathlib import Path

import click

from worktrial.cli.options import workspace_option
from worktrial.isolation.workspace import find_workspace


@click.command("init")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where to write the suite (default: evals/ in the repository).",
)
@workspace_option()
@click.option("--force", is_flag=True, help="Overwrite an existing suite.json there.")
def init_cmd(directory: Path | None, workspace: Path | None, force: bool) -> None:
    """Write a starter suite (two tasks, hidden tests, solutions, a detected environment) that check passes."""
    repo = find_workspace(workspace)
    from worktrial.engine.starter import write_starter

    result = write_starter(repo, directory.resolve() if directory else None, force=force)
    suite = result.directory / "suite.json"
    try:
        shown = suite.relative_to(Path.cwd())
    except ValueError:
        shown = suite
    details = f" ({result.project.details()})" if result.project.details() else ""
    click.echo(f"wrote a {result.kind} starter suite{details}: {len(result.files)} files in {result.directory}")
    click.echo(f"next: worktrial check {shown} --trust   (oracle passes every task, nop fails every task)")


COMMANDS = (init_cmd,)
