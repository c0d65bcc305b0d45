"""Command line: parse flags, call the library, print, map errors to exit codes."""

from __future__ import annotations

import errno
import importlib
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from worktrial.cli import logs
from worktrial.cli.common import emit, ensure_project_trust, ensure_trust, err, print_table
from worktrial.cli.executors import executor_options
from worktrial.cli.options import (
    budget_options,
    harbor_run_options,
    jobs_option,
    junit_option,
    max_jobs_option,
    output_option,
    quiet_option,
    reasons_option,
    report_format_option,
    retry_errors_option,
    runtime_option,
    sandbox_options,
    selection_options,
    suite_option,
    table_format_option,
    trust_option,
    trust_project_option,
    workspace_option,
)
from worktrial.cli.run_flags import Printing, run_options
from worktrial.errors import EXIT_BUDGET, EXIT_INTERRUPTED, BadInputError, RunAborted, WorktrialError
from worktrial.model.defaults import DEFAULT_GRACE_SECS
from worktrial.safe_text import for_terminal, terminal_text
from worktrial.util import plural
from worktrial.version import __version__

# What a command needs is imported when it runs: ``worktrial --help`` loads the commands' definitions only.
if TYPE_CHECKING:  # the engine is imported by the commands that run something, never by --help, runs or report
    from worktrial.engine.run import RunObserver, RunOptions, RunResult
    from worktrial.model.envelope import Envelope

F = TypeVar("F", bound=Callable[..., Any])
EXIT_MEASURED_NOTHING = 1
EXIT_FINDINGS = 1


_LAZY = {
    "compare": ("worktrial.cli.numbers", "compare_cmd"),
    "power": ("worktrial.cli.numbers", "power_cmd"),
    "check": ("worktrial.cli.numbers", "check_cmd"),
    "audit": ("worktrial.cli.numbers", "audit_cmd"),
    "show": ("worktrial.cli.view", "show_cmd"),
    "view": ("worktrial.cli.view", "view_cmd"),
    "init": ("worktrial.cli.init", "init_cmd"),
    "export": ("worktrial.cli.export", "export_cmd"),
    "gc": ("worktrial.cli.gc", "gc_cmd"),
    "regrade": ("worktrial.cli.regrade", "regrade_cmd"),
}
"""Commands imported only when they run (or their own --help is asked for): what they import (the HTML view and
jinja2, compare, leaderboards, the statistics of power) is not on the way of ``eval``'s first attempt."""
_LAZY_SUMMARIES = {
    "compare": "Compare runs (envelope files or stored run ids) task by task, with error bars and p-values.",
    "power": "Plan a comparison: the detectable difference, or the tasks / attempts needed to detect --delta.",
    "check": "Validate a suite by running it: oracle must pass, nop must fail, verifiers must be stable; plus lints.",
    "audit": "Recompute the digest and every metric of an envelope from its records; exit 1 listing any mismatch.",
    "show": "Show a run (default: the latest), one task's attempts, or one attempt's logs and patch.",
    "view": "Write one self-contained HTML page of runs (default: the latest) and print its path.",
    "init": "Write a starter suite (two tasks, hidden tests, solutions, a detected environment) that check passes.",
    "export": "Write a stored run in another tool's layout: harbor (Harbor's job directory and the Terminal-Bench "
    "leaderboard's metadata.yaml) or swe-bench (predictions, logs, trajectories, metadata).",
    "gc": "Remove old runs, the environment cache and worktrial's leftover container images.",
    "regrade": "Judge every stored attempt of a run again against the suite's verify commands, running no agent.",
}
"""The first line of each lazy command's help, which ``worktrial --help`` lists without importing the command
(``tests/test_cli_startup.py`` checks they are the commands' own)."""


class _Group(click.Group):
    """Turns WorktrialError into one clear message and its exit code; --debug keeps the traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with each command not imported yet shown from its summary (``_LAZY_SUMMARIES``)."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        for name in names:
            command = self.commands.get(name)
            if command is None and name in _LAZY_SUMMARIES:
                summary = click.Command(name, help=_LAZY_SUMMARIES[name])  # shortened as click shortens the real one
                rows.append((name, summary.get_short_help_str(limit)))
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _LAZY:
            module, attr = _LAZY[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr))
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WorktrialError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            for i, line in enumerate(str(exc).splitlines()):
                err(f"worktrial: error: {line}" if i == 0 else f"  {line}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:  # a second Ctrl-C while a run was cleaning up
            err("worktrial: interrupted")
            ctx.exit(EXIT_INTERRUPTED)
        except OSError as exc:
            # A disk that fills up during a run: a fact about the machine, not a bug to show a traceback for.
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or (ctx.obj and ctx.obj.get("debug")):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            err(f"worktrial: error: {where}{exc.strerror}; free some space (`worktrial resume` continues a run)")
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="worktrial")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "-v", "--verbose", "verbosity", count=True, help="Log more to stderr: -v info, -vv debug (default: warnings)."
)
@click.pass_context
def main(ctx: click.Context, debug: bool, verbosity: int) -> None:
    """Evaluate autonomous coding agents on eval suites: isolated worktrees, verified outcomes, pass@k."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logs.configure(verbosity)


def eval_options(func: F) -> F:
    options = [
        suite_option,
        click.option(
            "--agent",
            multiple=True,
            help="Agent: oracle, nop, command, a preset, ... (docs/agents.md); repeat for a matrix.",
        ),
        click.option("--agent-cmd", help="Command line of your agent (implies --agent command)."),
        click.option(
            "--model", multiple=True, help="Model route provider/model (recorded in the envelope); repeat for a matrix."
        ),
        click.option("--base-url", help="Base URL for the model provider (agents that use one)."),
        click.option(
            "--pass-env",
            "pass_env",
            multiple=True,
            metavar="NAME",
            help="Give the agent this credential-like variable of yours (or PREFIX_*); repeatable (docs/security.md).",
        ),
        click.option("--max-turns", type=click.IntRange(min=1), help="Builtin agent: model calls per attempt (50)."),
        click.option("--max-tokens", type=click.IntRange(min=1), help="Builtin agent: total tokens per attempt."),
        click.option("--temperature", type=click.FloatRange(0.0, 2.0), help="Builtin agent: sampling temperature."),
        click.option("--attempts", type=click.IntRange(min=1), help="Attempts per task (overrides the suite)."),
        click.option("--k", "k", type=click.IntRange(min=1), help="Headline k (default: attempts)."),
        workspace_option(),
        report_format_option,
        output_option,
        junit_option,
        selection_options,
        click.option("--wide", is_flag=True, help="Matrices: every leaderboard column (default: fits 100 columns)."),
        click.option("--label", help="A name for the run, shown in runs, compare, view and matrices."),
        click.option(
            "--no-artifacts", is_flag=True, help="Keep no per-attempt logs or patches (they stay local otherwise)."
        ),
        click.option(
            "--trajectories/--no-trajectories",
            default=None,
            help="Store each attempt's conversation with its model, redacted, as an ATIF trajectory (local, like "
            "the artifacts; default: [run] trajectories of the config, else off).",
        ),
        click.option("--keep-worktrees", is_flag=True, help="Keep each attempt's worktree and print its path."),
        click.option("--verify-always", is_flag=True, help="Also verify claimed failures and timeouts (diagnosis)."),
        trust_option,
        trust_project_option,
        jobs_option(),
        max_jobs_option,
        retry_errors_option,
        click.option(
            "--resume", "resume_id", metavar="RUN_ID", help="Continue a stored run: run only what is missing."
        ),
        click.option(
            "--reuse",
            metavar="RUN_ID",
            help="Reuse a stored run's attempts: carried over where the task is unchanged, regraded where only its "
            "verifier changed; only the rest runs.",
        ),
        click.option(
            "--grace-secs",
            type=click.FloatRange(0, 600),
            help=f"At an agent's deadline: SIGTERM, then this long before SIGKILL (default {DEFAULT_GRACE_SECS:g}).",
        ),
        budget_options,
        click.option(
            "--max-cost-per-attempt",
            type=click.FloatRange(0, min_open=True),
            metavar="USD",
            help="End an attempt whose spend passes this (as it streams where the agent shows it); it fails.",
        ),
        sandbox_options,
        runtime_option,
        harbor_run_options,
        quiet_option,
        reasons_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command("eval")
@eval_options
@executor_options
def eval_cmd(
    suite_path: Path,
    agent: tuple[str, ...],
    model: tuple[str, ...],
    workspace: Path | None,
    trust: bool,
    trust_project: bool,
    resume_id: str | None,
    **flags: Any,
) -> None:
    """Run a suite and print its report; several --agent / --model values run a matrix and print a leaderboard."""
    from worktrial.model.suite import load_suite

    loaded = load_suite(suite_path)
    for warning in loaded.warnings:
        err(f"worktrial: warning: {suite_path}: {warning}")
    ensure_trust(loaded, workspace, trust, trust_project)
    from worktrial.engine.run import run_suite

    options = run_options({**flags, "agent": agent, "model": model, "workspace": workspace})
    printing = Printing.of(flags)
    if _is_matrix(agent, model):
        if resume_id is not None or options.reuse is not None:
            which = "--resume continues" if resume_id is not None else "--reuse reuses"
            raise BadInputError(f"{which} one stored run; it cannot be combined with several --agent/--model")
        from worktrial.cli.matrix import run_matrix_and_report

        p = printing
        run_matrix_and_report(loaded, agent, model, options, p.fmt, p.output, p.quiet, p.reasons, p.wide)
        return
    if resume_id is not None:  # the stored run's own config decides; these flags may only change how it runs
        from worktrial.engine.resume import resume_run

        def runner(opts: RunOptions, obs: RunObserver) -> RunResult:
            return resume_run(resume_id, opts, loaded, obs)
    else:

        def runner(opts: RunOptions, obs: RunObserver) -> RunResult:
            return run_suite(loaded, opts, obs)

    _run_and_report(runner, options, printing)


def _is_matrix(agents: tuple[str, ...], models: tuple[str, ...]) -> bool:
    """One agent and at most one model is a plain run, handled exactly as before matrices existed (and without
    importing the matrix)."""
    return len(agents) > 1 or len(models) > 1


def _run_and_report(
    runner: Callable[[RunOptions, RunObserver], RunResult], options: RunOptions, printing: Printing
) -> None:
    fmt, output, quiet, reasons, junit = printing.fmt, printing.output, printing.quiet, printing.reasons, printing.junit
    from worktrial.cli.outputs import write_ci_outputs
    from worktrial.cli.progress import ProgressReporter

    progress = ProgressReporter(quiet=quiet, reasons=reasons, on_warning=lambda m: err(f"worktrial: warning: {m}"))
    try:
        result = runner(options, progress)
    finally:
        progress.close()
    if result.status == "aborted":
        message = result.error or "the run was aborted"
        if output is not None:  # the attempts that finished, as a partial report where the user asked for one
            _emit(result.envelope, fmt, output, True, result.store_dir)
            write_ci_outputs(result.envelope, result.store_dir, junit, True)
            message += f"; the partial report is in {output}"
        raise RunAborted(message)
    _emit(result.envelope, fmt, output, quiet, result.store_dir)
    write_ci_outputs(result.envelope, result.store_dir, junit, quiet)
    if result.kept_root is not None:
        err(f"worktrial: worktrees kept under {result.kept_root}")
    if not quiet:
        err(f"worktrial: run stored in {result.store_dir}")
    attempts = [a for t in result.envelope.report.tasks for a in t.attempts]
    if result.status == "complete" and attempts and all(a.outcome == "error" for a in attempts):
        from worktrial.render.format import nothing_measured

        err(f"worktrial: error: every attempt ended in error, so the run measured nothing {nothing_measured(attempts)}")
        sys.exit(EXIT_MEASURED_NOTHING)
    if result.stop_reason is not None:
        err(
            f"worktrial: stopped: {result.stop_reason}; the report covers the attempts that finished. "
            f"Continue with a higher budget: worktrial resume {result.envelope.run.id} --max-cost USD"
        )
        sys.exit(EXIT_BUDGET)
    if result.interrupted:
        err(
            f"worktrial: interrupted; the report covers the attempts that finished. "
            f"Continue with: worktrial resume {result.envelope.run.id}"
        )
        sys.exit(EXIT_INTERRUPTED)


def _emit(envelope: Envelope, fmt: str, output: Path | None, quiet: bool, run_dir: Path | None = None) -> None:
    from worktrial.render import render_json, render_markdown
    from worktrial.state.artifacts import read_run_artifacts

    if fmt == "json":
        text = render_json(envelope)
    else:
        keys = [(t.task_id, a.attempt) for t in envelope.report.tasks for a in t.attempts if a.outcome == "fail"]
        text = render_markdown(envelope, read_run_artifacts(run_dir, keys) if run_dir else None)
    emit(text, output, quiet=quiet, fmt=fmt)


main.add_command(eval_cmd)


@main.group("exec")
def exec_group() -> None:
    """Long forms of commands: 'worktrial exec eval' is 'worktrial eval'."""


exec_group.add_command(eval_cmd)


@main.command("resume")
@click.argument("run_id")
@workspace_option()
@jobs_option(default="as the run was started")
@max_jobs_option
@retry_errors_option
@click.option("--base-url", help="The provider base URL again, when it held credentials (they are never stored).")
@report_format_option
@output_option
@junit_option
@quiet_option
@reasons_option
@trust_option
@trust_project_option
@budget_options
@runtime_option
@executor_options
def resume_cmd(run_id: str, workspace: Path | None, trust: bool, trust_project: bool, **flags: Any) -> None:
    """Run only the attempts a stored run is missing, then report on the whole run."""
    from worktrial.engine.resume import resume_run, stored_suite

    stored = stored_suite(run_id, workspace)
    # A changed suite is refused below, with every difference listed; an unchanged one runs its commands again
    # and needs the same trust as eval.
    if stored.unchanged:
        ensure_trust(stored.loaded, stored.workspace, trust, trust_project)
    loaded = stored.loaded
    options = run_options({**flags, "workspace": workspace})

    def runner(opts: RunOptions, obs: RunObserver) -> RunResult:
        return resume_run(run_id, opts, loaded, observer=obs)

    _run_and_report(runner, options, Printing.of(flags))


@main.command("runs")
@workspace_option()
def runs_cmd(workspace: Path | None) -> None:
    """List stored runs: id, suite, agent/model, date, done/total, pass@1.

    Every run is listed; one whose records cannot be verified here (its signing key is under another HOME or
    user, or its run.json was changed) is marked, with what that means under the table.
    """
    from rich.console import Console
    from rich.table import Table

    from worktrial.state.history import list_runs, problem_note
    from worktrial.state.roots import state_root

    rows = list_runs(state_root(workspace))
    if not rows:
        click.echo("no runs yet; `worktrial eval --suite SUITE ...` stores one")
        return
    problems = {row.problem for row in rows if row.problem}
    table = Table(box=None, pad_edge=False)
    for column in ("run", "suite", "agent/model", "started", "done/total", "pass@1"):
        table.add_column(column)
    if problems:
        table.add_column("verified")
    for row in rows:
        pass1 = "—" if row.pass_at_1 is None else f"{row.pass_at_1:.3f}"
        done = f"{'?' if row.done is None else row.done}/{'?' if row.total is None else row.total}"
        cells = [row.id, row.suite, row.agent, row.started_at, done, pass1]
        verified = [f"no: {row.problem}" if row.problem else "yes"] if problems else []
        table.add_row(*(terminal_text(c) for c in [*cells, *verified]))
    Console(width=200).print(table)
    for problem in sorted(problems):
        click.echo(problem_note(problem, sum(1 for row in rows if row.problem == problem)))


@main.command("report")
@click.argument("run_id")
@workspace_option()
@report_format_option
@output_option
@junit_option
@click.option(
    "--redact-paths",
    is_flag=True,
    help="For publishing: local absolute paths become relative to the state root or salted hashes (audit still "
    "checks the envelope).",
)
def report_cmd(
    run_id: str, workspace: Path | None, fmt: str, output: Path | None, junit: Path | None, redact_paths: bool
) -> None:
    """Render a stored run again (also one that was interrupted or crashed)."""
    from worktrial.cli.outputs import write_ci_outputs
    from worktrial.state.history import stored_envelope
    from worktrial.state.roots import state_root
    from worktrial.state.store import runs_dir

    root = state_root(workspace)
    envelope = stored_envelope(root, run_id)
    if redact_paths:
        from worktrial.render.publish import redact_paths as redacted

        envelope = redacted(envelope)
    _emit(envelope, fmt, output, quiet=True, run_dir=runs_dir(root) / envelope.run.id)
    write_ci_outputs(envelope, runs_dir(root) / envelope.run.id, junit, quiet=True)


@main.command("schema")
@click.argument("which", type=click.Choice(["suite", "envelope"]))
def schema_cmd(which: str) -> None:
    """Print the JSON Schema of the suite format or of the result envelope."""
    from worktrial.model.envelope import envelope_json_schema
    from worktrial.model.suite import suite_json_schema

    schema = suite_json_schema() if which == "suite" else envelope_json_schema()
    click.echo(json.dumps(schema, indent=2))


@main.command("agents")
@workspace_option()
@table_format_option
@trust_project_option
@click.option("--trust", "old_trust", is_flag=True, hidden=True)
def agents_cmd(workspace: Path | None, fmt: str, trust_project: bool, old_trust: bool) -> None:
    """List every agent --agent accepts, whether its program is installed, and its version."""
    from worktrial.agents.listing import list_agents
    from worktrial.state.config import load_config
    from worktrial.state.project import read_project
    from worktrial.state.roots import state_root

    if old_trust:
        raise BadInputError("`worktrial agents --trust` is now --trust-project (--trust only ever trusts a suite)")
    root = state_root(workspace)
    # Its binaries and commands are never executed (not even for --version) until it is trusted; the warning
    # names what is skipped and how to trust it.
    ensure_project_trust(root, trust_project)
    project = read_project(root)
    untrusted = project.untrusted_agents() if project is not None else {}
    rows = list_agents(load_config(root), untrusted)  # the same project config eval would read
    if fmt == "json":
        click.echo(json.dumps([row.__dict__ for row in rows], indent=2))
        return
    headers = ["agent", "kind", "installed", "version", "what"]
    cells = []
    for row in rows:
        installed = {True: "yes", False: "no", None: "—"}[row.installed]
        hint = f" — install: {row.install}" if row.installed is False and row.install else ""
        cells.append([row.name, row.kind, installed, row.version or "—", f"{row.summary}{hint}"])
    print_table(headers, cells, fmt)


@main.command("prices")
@workspace_option()
@table_format_option
def prices_cmd(workspace: Path | None, fmt: str) -> None:
    """List the models worktrial can price (USD per million tokens), from the shipped table or your config."""
    from worktrial.agents.pricing import price_rows, price_table
    from worktrial.state.config import load_config
    from worktrial.state.roots import state_root

    rows = price_rows(load_config(state_root(workspace)))
    taken_on = price_table().taken_on
    if fmt == "json":
        click.echo(json.dumps({"taken_on": taken_on, "models": [row.__dict__ for row in rows]}, indent=2))
        return
    headers = ["route", "input", "cached input", "cache write", "output", "from"]
    cells = []
    for row in rows:
        prices = [
            "—" if value is None else f"{value:g}"
            for value in (row.input, row.cached_input, row.cache_write, row.output)
        ]
        source = f"table ({row.taken_on})" if row.source == "table" else "your config"
        cells.append([row.route, *prices, source])
    click.echo(f"Shipped prices taken on {taken_on}; any other model is unpriced (cost unknown, never 0).")
    print_table(headers, cells, fmt)


@main.command("validate")
@click.argument("suite_path", type=click.Path(path_type=Path))
def validate_cmd(suite_path: Path) -> None:
    """Check that a suite file loads and validates, and lint it as check does (no commands are run).

    Exits 1 after listing the lints when any is a problem (a warning is printed but does not fail).
    """
    from worktrial.analysis.suite_paths import static_lints
    from worktrial.model.suite import load_suite
    from worktrial.render.check_markdown import render_lints

    loaded = load_suite(suite_path)
    for warning in loaded.warnings:
        err(f"worktrial: warning: {suite_path}: {warning}")
    lints = static_lints(loaded)
    problems = sum(1 for lint in lints if lint.severity == "problem")
    warnings = len(lints) - problems
    tasks = loaded.suite.tasks
    counts = f"{plural(len(tasks), 'task')}, {plural(loaded.suite.attempts, 'attempt')}"
    verdict = f"{plural(problems, 'problem')} found" if problems else "ok"
    found = f"; {plural(warnings, 'warning')} (see Lints)" if warnings else ""
    click.echo(for_terminal(f"{suite_path}: {verdict} — {counts}, suite file sha256 {loaded.sha256}{found}"))
    if lints:
        click.echo("\n" + for_terminal("\n".join(render_lints(lints)), multiline=True))
    if problems:
        sys.exit(EXIT_FINDINGS)
