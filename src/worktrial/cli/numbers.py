"""Commands that make numbers trustworthy: compare, power, check and audit (registered on ``worktrial.cli.main``).

Like ``cli.py``, this only parses flags, calls the library and prints; findings that should fail a CI job
(a suite problem, an audit mismatch) exit 1 after the report is printed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Literal

import click
from pydantic import BaseModel

from worktrial.analysis import stats
from worktrial.analysis.audit import audit_envelope, load_envelope_json, render_audit, trace_root
from worktrial.analysis.check_report import default_repeats
from worktrial.analysis.compare import LoadedEnvelope, compare_runs
from worktrial.analysis.power import DEFAULT_OMEGA2, DEFAULT_SIGMA2, plan, render_plan, variance_model
from worktrial.cli.common import emit, ensure_trust, err
from worktrial.cli.options import (
    jobs_option,
    output_option,
    quiet_option,
    report_format_option,
    runtime_option,
    sandbox_option,
    selection_options,
    suite_option,
    text_format_option,
    trust_option,
    workspace_option,
)
from worktrial.errors import BadInputError
from worktrial.model.selection import select
from worktrial.model.suite import LoadedSuite, load_suite
from worktrial.render.check_markdown import render_check_markdown
from worktrial.render.compare_markdown import render_comparison_markdown
from worktrial.state.history import resolve_envelope, store_problems
from worktrial.state.looks import note_comparison
from worktrial.state.provenance import provenance_problems
from worktrial.state.roots import state_root

EXIT_FINDINGS = 1


def _as_json(model: BaseModel) -> str:
    # allow_nan=False: a NaN would make the document invalid JSON; inputs with one are refused long before this.
    return json.dumps(model.model_dump(mode="json"), indent=2, allow_nan=False) + "\n"


def _labelled(loaded: LoadedEnvelope) -> LoadedEnvelope:
    """A run named with --label shows that name, with the id or file it was loaded from."""
    label = loaded.envelope.run.label
    return dataclasses.replace(loaded, label=f"{label} ({loaded.label})") if label else loaded


def _load_with_warnings(suite_path: Path) -> LoadedSuite:
    loaded = load_suite(suite_path)
    for warning in loaded.warnings:
        err(f"worktrial: warning: {suite_path}: {warning}")
    return loaded


@click.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--allow-different-suites", is_flag=True, help="Compare runs of different suites on shared task ids.")
@workspace_option()
@report_format_option
@output_option
def compare_cmd(
    runs: tuple[str, ...], allow_different_suites: bool, workspace: Path | None, fmt: str, output: Path | None
) -> None:
    """Compare runs (envelope files or stored run ids) task by task, with error bars and p-values."""
    loaded = [_labelled(resolve_envelope(ref, lambda: state_root(workspace))) for ref in runs]
    comparison = compare_runs(loaded, allow_different_suites=allow_different_suites)
    for warning in note_comparison([(item.envelope.run.id, _attempts(item), Path(item.source)) for item in loaded]):
        err(f"worktrial: warning: {warning}")
    emit(_as_json(comparison) if fmt == "json" else render_comparison_markdown(comparison), output, fmt=fmt)


def _attempts(loaded: LoadedEnvelope) -> int:
    return sum(t.total_runs for t in loaded.envelope.report.tasks)


@click.command("power")
@click.option("--tasks", type=click.IntRange(min=1), help="Number of tasks (default: the envelope's).")
@click.option("--attempts", type=click.IntRange(min=1), help="Attempts per task (default: the envelope's, else 1).")
@click.option("--delta", type=click.FloatRange(min=0, max=1, min_open=True), help="Difference in pass rate to detect.")
@click.option(
    "--from",
    "sources",
    multiple=True,
    help="Estimate variances from an envelope or run id; give two runs of one suite for the best estimate.",
)
@click.option(
    "--omega2", type=click.FloatRange(min=0), help=f"Across-task variance of the difference [{DEFAULT_OMEGA2:.4f}]."
)
@click.option("--sigma2", type=click.FloatRange(min=0), help=f"Within-task variance per attempt [{DEFAULT_SIGMA2}].")
@click.option(
    "--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=stats.ALPHA, show_default=True
)
@click.option(
    "--power",
    "power_",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=stats.POWER,
    show_default=True,
)
@workspace_option()
@text_format_option
def power_cmd(
    tasks: int | None,
    attempts: int | None,
    delta: float | None,
    sources: tuple[str, ...],
    omega2: float | None,
    sigma2: float | None,
    alpha: float,
    power_: float,
    workspace: Path | None,
    fmt: str,
) -> None:
    """Plan a comparison: the detectable difference, or the tasks / attempts needed to detect --delta."""
    if len(sources) > 2:
        raise BadInputError("--from takes one envelope, or two runs of the same suite")
    loaded = [resolve_envelope(ref, lambda: state_root(workspace)) for ref in sources]
    model = variance_model([(item.label, item.envelope) for item in loaded], omega2=omega2, sigma2=sigma2)
    if loaded:
        tasks = tasks or len(loaded[0].envelope.report.tasks)
        attempts = attempts or loaded[0].envelope.run.attempts
    result = plan(model, tasks=tasks, attempts=attempts or 1, delta=delta, alpha=alpha, power=power_)
    click.echo(_as_json(result) if fmt == "json" else render_plan(result), nl=False)


@click.command("check")
@click.argument("suite_path", type=click.Path(path_type=Path))
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=default_repeats(),
    show_default=True,
    help="Verifier re-runs on the oracle's result, to find flaky verifiers.",
)
@workspace_option()
@jobs_option()
@trust_option
@selection_options
@sandbox_option
@runtime_option
@report_format_option
@output_option
@quiet_option
def check_cmd(
    suite_path: Path,
    repeats: int,
    workspace: Path | None,
    jobs: int | Literal["auto"] | None,
    trust: bool,
    task_patterns: tuple[str, ...],
    categories: tuple[str, ...],
    limit: int | None,
    sandbox: str | None,
    container_runtime: Literal["auto", "docker", "podman"],
    fmt: str,
    output: Path | None,
    quiet: bool,
) -> None:
    """Validate a suite by running it: oracle must pass, nop must fail, verifiers must be stable; plus lints."""
    loaded = _load_with_warnings(suite_path)
    ensure_trust(loaded, workspace, trust, None)  # oracle and nop: nothing of worktrial.toml runs
    loaded, selection = select(loaded, task_patterns, categories, limit)
    if selection is not None and not quiet:
        err(f"worktrial: checking {len(selection.task_ids)} of {selection.suite_tasks} tasks (the selection)")
    from worktrial.cli.check_progress import CheckProgress  # the engine only for the command that runs
    from worktrial.engine.check import CheckOptions, check_suite
    from worktrial.engine.confine import SandboxChoice

    progress = CheckProgress(quiet=quiet, on_warning=lambda message: err(f"worktrial: warning: {message}"))
    options = CheckOptions(
        workspace=workspace,
        repeats=repeats,
        observer=progress,
        sandbox=SandboxChoice(mode=sandbox),
        jobs=jobs,
        container_runtime=container_runtime,
    )
    try:
        report = check_suite(loaded, options)
    finally:
        progress.close()
    emit(_as_json(report) if fmt == "json" else render_check_markdown(report), output, fmt=fmt)
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


@click.command("audit")
@click.argument("envelope_path", type=click.Path(path_type=Path, dir_okay=False))
@suite_option
@workspace_option(default="the one the envelope records; its trace paths are relative to it")
@click.option("--no-traces", is_flag=True, help="Skip the trace-file checks (when only the envelope was published).")
@text_format_option
def audit_cmd(envelope_path: Path, suite_path: Path, workspace: Path | None, no_traces: bool, fmt: str) -> None:
    """Recompute the digest and every metric of an envelope from its records; exit 1 listing any mismatch."""
    loaded = _load_with_warnings(suite_path)
    report = audit_envelope(envelope_path, loaded, workspace=workspace, check_traces=not no_traces)
    envelope = load_envelope_json(envelope_path)[1]
    problems, notes = store_problems(envelope_path, envelope)
    origin = provenance_problems(envelope_path, envelope, workspace or trace_root(envelope_path, envelope))
    problems, notes = problems + origin[0], notes + origin[1]
    report = report.model_copy(
        update={
            "mismatches": report.mismatches + problems,
            "notes": report.notes + notes,
            "ok": report.ok and not problems,
        }
    )
    click.echo(_as_json(report) if fmt == "json" else render_audit(report), nl=False)
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


COMMANDS = (compare_cmd, power_cmd, check_cmd, audit_cmd)
