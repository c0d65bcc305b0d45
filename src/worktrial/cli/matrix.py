"""``worktrial eval`` with several --agent / --model values: run the matrix, print the leaderboard.

Like ``cli.py`` this only wires flags to the library and prints: ``worktrial.engine.matrix`` runs the configurations,
``worktrial.analysis.leaderboard`` ranks them and ``worktrial.render.leaderboard_markdown`` renders the table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from worktrial.analysis.leaderboard import build_leaderboard
from worktrial.cli.common import emit, err
from worktrial.cli.progress import ProgressReporter
from worktrial.engine.matrix import (
    Configuration,
    ConfigurationOutcome,
    matrix_config,
    plan_configurations,
    preflight_all,
    run_matrix,
)
from worktrial.engine.run import RunOptions
from worktrial.model.suite import LoadedSuite
from worktrial.render.leaderboard_markdown import render_leaderboard_markdown
from worktrial.util import plural


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def run_matrix_and_report(
    loaded: LoadedSuite,
    agents: Sequence[str],
    models: Sequence[str],
    base: RunOptions,
    fmt: str,
    output: Path | None,
    quiet: bool,
    reasons: bool,
    wide: bool = False,
) -> None:
    """Plan, preflight and run every configuration, then print the leaderboard; exits 130 or 2 when due."""
    configurations = plan_configurations(agents, models, base.agent_cmd, matrix_config(base.workspace))
    preflight_all(configurations, base)
    seen_warnings: set[str] = set()

    def warn(message: str) -> None:
        if message not in seen_warnings:  # e.g. a dirty workspace: say it once, not once per configuration
            seen_warnings.add(message)
            err(f"worktrial: warning: {message}")

    def prepare(index: int, configuration: Configuration, options: RunOptions) -> ProgressReporter:
        if not quiet:
            err(f"worktrial: configuration {index}/{len(configurations)}: {configuration.label}")
        return ProgressReporter(quiet=quiet, reasons=reasons, on_warning=warn)

    def finished(outcome: ConfigurationOutcome) -> None:
        label = outcome.configuration.label
        if outcome.error is not None:
            stored = f" (finished attempts are in run {outcome.run_id})" if outcome.run_id else ""
            err(f"worktrial: error: {label}: {_first_line(outcome.error)}{stored}; continuing with the others")
        if outcome.kept_root is not None:
            err(f"worktrial: {label}: worktrees kept under {outcome.kept_root}")
        if not quiet and outcome.store_dir is not None:
            err(f"worktrial: {label}: run {outcome.run_id} stored in {outcome.store_dir}")

    result = run_matrix(loaded, configurations, base, prepare=prepare, finished=finished)
    board = build_leaderboard([o.contender() for o in result.outcomes])
    if fmt == "json":
        document = {
            "leaderboard": [row.model_dump(mode="json") for row in board.rows],
            "envelopes": [o.envelope.model_dump(mode="json") for o in result.outcomes if o.envelope is not None],
            "notes": board.notes,
            "k": board.k,
        }
        text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    else:
        text = render_leaderboard_markdown(board, wide=wide)
    emit(text, output, quiet=quiet, what="leaderboard", fmt=fmt)
    if result.interrupted:
        resume = [o.run_id for o in result.outcomes if o.status == "interrupted" and o.run_id]
        hint = f" Continue the interrupted run with: worktrial resume {resume[0]}" if resume else ""
        err(f"worktrial: interrupted; the leaderboard covers the configurations that ran.{hint}")
    if result.stop_reason is not None:
        stopped = [o.run_id for o in result.outcomes if o.stop_reason and o.run_id]
        hint = f" Continue with a higher budget: worktrial resume {stopped[0]} --max-cost USD" if stopped else ""
        err(f"worktrial: stopped: {result.stop_reason}; the leaderboard covers what ran.{hint}")
    failed = [o for o in result.outcomes if o.status == "failed"]
    if failed and not result.interrupted:
        err(f"worktrial: {len(failed)} of {plural(len(configurations), 'configuration')} failed; see the leaderboard")
    if result.exit_code:
        sys.exit(result.exit_code)
