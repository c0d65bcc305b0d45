"""``worktrial regrade``: a stored run's attempts judged again against a suite, without running any agent."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from worktrial.cli.common import ensure_trust, err
from worktrial.cli.main import _run_and_report
from worktrial.cli.options import (
    jobs_option,
    junit_option,
    optional_suite_option,
    output_option,
    quiet_option,
    reasons_option,
    report_format_option,
    runtime_option,
    trust_option,
    workspace_option,
)
from worktrial.cli.run_flags import Printing
from worktrial.model.suite import load_suite
from worktrial.safe_text import for_terminal
from worktrial.util import plural

if TYPE_CHECKING:
    from worktrial.engine.run import RunObserver, RunOptions, RunResult
    from worktrial.isolation.container import RuntimeChoice


@click.command("regrade")
@click.argument("run_id")
@optional_suite_option
@workspace_option()
@jobs_option()
@click.option("--keep-worktrees", is_flag=True, help="Keep each attempt's worktree and print its path.")
@runtime_option
@trust_option
@report_format_option
@output_option
@junit_option
@quiet_option
@reasons_option
def regrade_cmd(
    run_id: str,
    suite_path: Path | None,
    workspace: Path | None,
    jobs: int | None,
    keep_worktrees: bool,
    container_runtime: str,
    trust: bool,
    **flags: Any,
) -> None:
    """Judge every stored attempt of a run again against the suite's verify commands, running no agent.

    The suite is the file the run names, as it is now, unless --suite gives another. Each attempt's stored change
    is rebuilt on its base in a fresh verifier's room; the result is a new run whose records say which run and
    attempt each verdict came from, at which suite digest. What cannot be regraded faithfully is left out and
    listed (`worktrial resume NEW_RUN` runs the agent for it).
    """
    from worktrial.engine.regrade import RegradeOptions, regrade_run
    from worktrial.engine.reuse import open_source_run
    from worktrial.engine.run import RunOptions
    from worktrial.state.roots import state_root

    meta = open_source_run(state_root(workspace), run_id).meta
    loaded = load_suite(suite_path if suite_path is not None else meta.suite_path)
    for warning in loaded.warnings:
        err(f"worktrial: warning: {loaded.path}: {warning}")
    ensure_trust(loaded, workspace, trust, None)  # it runs the suite's setup and verify commands, never an agent
    options = RegradeOptions(workspace, jobs, keep_worktrees, cast("RuntimeChoice", container_runtime))

    def runner(_opts: RunOptions, obs: RunObserver) -> RunResult:
        result = regrade_run(run_id, loaded, options, obs)
        _say_what_was_left_out(result, Printing.of(flags).quiet)
        return result

    _run_and_report(runner, RunOptions(), Printing.of(flags))


def _say_what_was_left_out(result: RunResult, quiet: bool) -> None:
    """One line per reason for the attempts the regrade could not judge again."""
    reuse = result.envelope.run.reuse
    if reuse is None or quiet:
        return
    err(
        f"worktrial: regraded run {reuse.source} (suite digest {reuse.source_suite_digest[:12]}) against suite "
        f"digest {result.envelope.bundle_digest[:12]}: {plural(reuse.regraded, 'attempt')} regraded"
        + (f", {len(reuse.not_regraded)} left out" if reuse.not_regraded else "")
    )
    reasons = Counter(item.reason for item in reuse.not_regraded)
    for reason, count in reasons.most_common():
        shown = [f"{i.task_id}#{i.attempt}" for i in reuse.not_regraded if i.reason == reason][:4]
        more = f" and {count - len(shown)} more" if count > len(shown) else ""
        err(for_terminal(f"  {plural(count, 'attempt')} ({', '.join(shown)}{more}): {reason}"))
