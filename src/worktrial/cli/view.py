"""``worktrial show`` and ``worktrial view``: look at stored runs in the terminal or in a browser page.

Only parses flags, loads envelopes (and their artifacts, when the run kept them) and prints or writes.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click
from rich.console import Console

from worktrial.analysis.compare import LoadedEnvelope
from worktrial.cli.common import err
from worktrial.cli.options import workspace_option
from worktrial.errors import BadInputError
from worktrial.model.records import AttemptRecord
from worktrial.model.trajectory import Trajectory
from worktrial.render.html import ViewRun, render_html
from worktrial.render.terminal import attempt_view, run_summary, task_view
from worktrial.render.trajectory import trajectory_view
from worktrial.safe_text import for_terminal
from worktrial.state.artifacts import artifacts_for_envelope, run_dir_of
from worktrial.state.history import list_runs, resolve_envelope
from worktrial.state.roots import state_root
from worktrial.state.store import checked_run_id
from worktrial.state.trajectories import read_trajectory
from worktrial.util import atomic_write_text


def _latest_run_id(workspace: Path | None) -> str:
    rows = [r for r in list_runs(state_root(workspace)) if r.problem in (None, "key missing")]
    if not rows:
        raise BadInputError("no runs yet; `worktrial eval --suite SUITE ...` stores one")
    return rows[-1].id


def _load(ref: str, workspace: Path | None) -> tuple[LoadedEnvelope, ViewRun]:
    loaded = resolve_envelope(ref, lambda: state_root(workspace))
    env = loaded.envelope
    keys = [(t.task_id, a.attempt) for t in env.report.tasks for a in t.attempts]
    artifacts = artifacts_for_envelope(loaded.source, keys)
    trajectories = {}
    run_dir = run_dir_of(loaded.source)
    if run_dir is not None:
        for task in env.report.tasks:
            for record in task.attempts:
                found, _ = read_trajectory(run_dir, record.task_id, record.attempt, record.trajectory)
                if found is not None:
                    trajectories[(record.task_id, record.attempt)] = found
    return loaded, ViewRun(label=ref, envelope=env, artifacts=artifacts, trajectories=trajectories)


@click.command("show")
@click.argument("run", required=False)
@click.argument("task", required=False)
@click.argument("attempt", required=False, type=int)
@workspace_option()
@click.option(
    "--trajectory",
    "show_trajectory",
    is_flag=True,
    help="With TASK and ATTEMPT: the attempt's conversation with its model (runs made with --trajectories).",
)
@click.option(
    "--full-patch", is_flag=True, help="Show every file of an attempt's patch, ignored build files (__pycache__) too."
)
def show_cmd(
    run: str | None,
    task: str | None,
    attempt: int | None,
    workspace: Path | None,
    show_trajectory: bool,
    full_patch: bool,
) -> None:
    """Show a run (default: the latest), one task's attempts, or one attempt's logs and patch.

    RUN is a stored run id or an envelope file; TASK a task id; ATTEMPT the attempt number. Files of the patch the
    repository ignores (build output such as __pycache__) are collapsed into one line unless --full-patch.
    """
    if show_trajectory and attempt is None:
        raise BadInputError("--trajectory shows one attempt's: give RUN TASK ATTEMPT")
    loaded, view = _load(run or _latest_run_id(workspace), workspace)
    console = Console(highlight=False, soft_wrap=False)
    report = view.envelope.report
    if task is None:
        console.print(run_summary(view.envelope, bool(view.artifacts)))
        return
    found = next((t for t in report.tasks if t.task_id == task), None)
    if found is None:
        known = ", ".join(t.task_id for t in report.tasks[:10])
        raise BadInputError(f"run {view.envelope.run.id} has no task {task!r} (tasks: {known})")
    if attempt is None:
        console.print(task_view(found, view.artifacts))
        return
    record = next((a for a in found.attempts if a.attempt == attempt), None)
    if record is None:
        numbers = ", ".join(str(a.attempt) for a in found.attempts) or "none ran"
        raise BadInputError(f"task {task!r} has no attempt {attempt} in this run (attempts: {numbers})")
    if show_trajectory:
        console.print(trajectory_view(_trajectory(loaded.source, record), f"{task} #{attempt}"))
        return
    console.print(attempt_view(record, view.artifacts.get((task, attempt)), full_patch=full_patch))


def _trajectory(source: str, record: AttemptRecord) -> Trajectory:
    """The attempt's stored trajectory, or one line saying why there is none."""
    where = f"{record.task_id} #{record.attempt}"
    if record.trajectory is None:
        raise BadInputError(f"{where} has no trajectory: its run was not made with --trajectories")
    run_dir = run_dir_of(source)
    if run_dir is None:
        raise BadInputError(f"{where}: its trajectory stays in the run store it was recorded in, not next to {source}")
    found, why = read_trajectory(run_dir, record.task_id, record.attempt, record.trajectory)
    if found is None:
        raise BadInputError(f"{where}: {why}")
    return found


@click.command("view")
@click.argument("runs", nargs=-1)
@workspace_option()
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the page here (default: .worktrial/view/<run>.html in the repository, or ./worktrial-view.html).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
def view_cmd(runs: tuple[str, ...], workspace: Path | None, output: Path | None, open_browser: bool) -> None:
    """Write one self-contained HTML page of runs (default: the latest) and print its path.

    RUNS are stored run ids or envelope files; two or more add a paired comparison and a leaderboard.
    The page works offline and from envelopes alone; logs and diffs appear when the runs kept artifacts.
    """
    refs = list(runs) or [_latest_run_id(workspace)]
    views = [_load(ref, workspace)[1] for ref in refs]
    if output is None:
        try:
            directory = state_root(workspace) / ".worktrial" / "view"
        except BadInputError:
            directory = Path.cwd()
        # The page is named after the runs: only ids of worktrial's own form (never "../../x") make a path.
        name = "-vs-".join(checked_run_id(v.envelope.run.id, "the envelope's run.id") for v in views)[:180]
        output = directory / f"{name}.html"
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, render_html(views))
    click.echo(for_terminal(str(output.resolve())))
    if open_browser and not webbrowser.open(output.resolve().as_uri()):
        err("worktrial: could not open a browser; open the file above yourself")
