"""The CLI imports what a command needs: listing, reading and help load no engine, agent or provider SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import task

PROBE = """
import json, sys
from worktrial.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[:2] in (["worktrial", "engine"], ["worktrial", "agents"])
               or m.split(".")[0] in ("openai", "anthropic", "ray"))
print(json.dumps(heavy), file=sys.stderr)
"""


def _loaded(args: list[str], cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    heavy: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return heavy


@pytest.mark.slow
def test_help_runs_and_report_load_no_engine_agent_or_sdk(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t")])
    made = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=repo)
    run_id = json.loads(made.stdout)["run"]["id"]
    for args in (["--help"], ["--version"], ["runs"], ["report", run_id], ["report", run_id, "--format", "json"]):
        assert _loaded(args, repo) == [], args
    assert _loaded(["eval", "--help"], repo) == []
    # ... while a command that runs attempts does load the engine: the probe sees what is imported.
    ran = _loaded(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q"], repo)
    assert "worktrial.engine.run" in ran


def test_version_answers_before_any_command_is_loaded(cli) -> None:
    """``worktrial --version`` prints what click's version option prints, without importing the commands."""
    probe = (
        "import sys; sys.argv = ['worktrial', '--version']\n"
        "from worktrial.cli import entry; entry()\n"
        "print(sorted(m for m in sys.modules if m.startswith('worktrial.cli.') or m in ('click', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    version_line, loaded = done.stdout.splitlines()
    assert loaded == "[]"
    assert version_line == cli(["--version"]).stdout.strip()
