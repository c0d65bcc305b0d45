"""Helpers shared by the builtin agent's end-to-end tests: run ``worktrial eval`` and read what it left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.conftest import SuiteWriter

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "suites/smoke-workspace-basics.json"


def run_eval(cli: Any, repo: Path, suite: Path, *args: str, jobs: int = 1) -> Any:
    """One attempt per task; one job unless asked, so scripted steps are served in task order."""
    common = ["--trust", "--trust-project", "--format", "json", "-q", "--attempts", "1", "--jobs", str(jobs)]
    return cli(["eval", "--suite", str(suite), *common, *args], cwd=repo)


def traces(repo: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((repo / ".worktrial/eval/traces").rglob("*.json"))]


def write_user_config(text: str) -> None:
    path = Path(os.environ["WORKTRIAL_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def one_task_suite(write_suite: SuiteWriter, task_id: str = "exact-file-content", **changes: Any) -> Path:
    """A suite holding one task of the bundled suite, unchanged unless ``changes`` says otherwise."""
    bundled = json.loads(BUNDLED.read_text())
    task = next(t for t in bundled["tasks"] if t["id"] == task_id)
    return write_suite([{**task, **changes}])
