"""Outputs for CI besides the report: a JUnit XML file (--junit) and the GitHub job summary ($GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from worktrial.cli.common import err
from worktrial.util import atomic_write_text

if TYPE_CHECKING:
    from worktrial.model.envelope import Envelope


def write_ci_outputs(envelope: Envelope, run_dir: Path | None, junit: Path | None, quiet: bool = False) -> None:
    """JUnit when asked for; the step summary whenever GitHub Actions provides the file (appended, as it expects)."""
    if junit is not None:
        from worktrial.render.junit import render_junit  # (and xml.etree) only when asked for
        from worktrial.state.artifacts import read_run_artifacts

        keys = [(t.task_id, a.attempt) for t in envelope.report.tasks for a in t.attempts]
        artifacts = read_run_artifacts(run_dir, keys) if run_dir is not None else {}
        atomic_write_text(junit, render_junit(envelope, artifacts))
        if not quiet:
            err(f"worktrial: JUnit XML written to {junit}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        from worktrial.render.ci_summary import render_ci_summary

        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(render_ci_summary(envelope) + "\n")
        except OSError as exc:
            err(f"worktrial: warning: cannot append to $GITHUB_STEP_SUMMARY ({summary}): {exc.strerror}")
