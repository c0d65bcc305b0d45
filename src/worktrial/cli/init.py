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
@click.option(
    "--container", is_flag=True, help="Run the suite's commands in a container built from a Dockerfile written too."
)
@click.option(
    "--base-image",
    default="debian:bookworm-slim",
    show_default=True,
    help="With --container: the image the Dockerfile starts FROM.",
)
def init_cmd(directory: Path | None, workspace: Path | None, force: bool, container: bool, base_image: str) -> None:
    """Write a starter suite (two tasks, hidden tests, solutions, a detected environment) that check passes."""
    repo = find_workspace(workspace)
    from worktrial.scaffold.container import write_container_starter
    from worktrial.scaffold.starter import write_starter

    target = directory.resolve() if directory else None
    if container:
        result = write_container_starter(repo, target, force=force, base_image=base_image)
    else:
        result = write_starter(repo, target, force=force)
    suite = result.directory / "suite.json"
    try:
        shown = suite.relative_to(Path.cwd())
    except ValueError:
        shown = suite
    details = f" ({result.project.details()})" if result.project.details() else ""
    kind = f"container (FROM {base_image})" if container else result.kind
    click.echo(f"wrote a {kind} starter suite{details}: {len(result.files)} files in {result.directory}")
    click.echo(f"next: worktrial check {shown} --trust   (oracle passes every task, nop fails every task)")


COMMANDS = (init_cmd,)
