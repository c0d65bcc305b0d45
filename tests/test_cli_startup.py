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


def test_eval_loads_neither_the_html_view_nor_jinja2(repo: Path, write_suite) -> None:
    """The commands that render pages or compare runs are imported when they run, not before ``eval``'s first
    attempt."""
    suite = write_suite([task("t")])
    probe = (
        "import sys\nfrom worktrial.cli import main\n"
        "try:\n    main(sys.argv[1:], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jinja2', 'markupsafe') "
        "or m in ('worktrial.render.html', 'worktrial.cli.view', 'worktrial.cli.numbers')), file=sys.stderr)"
    )
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json"]
    done = subprocess.run([sys.executable, "-c", probe, *args], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


WEB_STACK = ("uvicorn", "starlette", "httpx", "httpx2", "httpcore", "h11", "anyio", "asyncio")
"""The model gateway's server and client: imported by a run only where an attempt may route through it."""

_LOADED = """
import json, sys
from worktrial.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules(args: list[str], cwd: Path) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _web(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in WEB_STACK)


@pytest.mark.slow
def test_a_run_that_routes_nothing_never_loads_the_web_stack(repo: Path, write_suite) -> None:
    """``eval`` of agents that never call a provider through the gateway (nop, oracle, a command without
    ``--base-url``) imports neither the gateway's server nor its client; one whose command agent is given
    ``--base-url`` does (the probe sees what a run imports)."""
    suite = write_suite([task("t")])
    run = ["eval", "--suite", str(suite), "--trust", "-q", "--format", "json", "--sandbox", "off"]
    for agent in (["--agent", "nop"], ["--agent", "oracle"], ["--agent-cmd", "true"]):
        loaded = _modules([*run, *agent], repo)
        assert "worktrial.engine.run" in loaded, agent
        assert _web(loaded) == [], agent
        assert "worktrial.gateway.server" not in loaded, agent
    routed = _modules([*run, "--agent-cmd", "true", "--base-url", "http://127.0.0.1:9/v1"], repo)
    assert "worktrial.gateway.server" in routed and "uvicorn" in routed


def test_help_loads_only_the_commands_definitions(tmp_path: Path) -> None:
    """``worktrial --help`` lists every command without importing what any of them runs with: no models (pydantic),
    no rich, none of the commands imported on first use, no psutil."""
    loaded = _modules(["--help"], tmp_path)
    assert "worktrial.cli.main" in loaded
    heavy = {"pydantic", "rich", "psutil", "jinja2"} | {
        f"worktrial.cli.{m}" for m in ("numbers", "view", "init", "export", "gc", "regrade")
    }
    assert sorted(m for m in loaded if m in heavy or m.split(".")[0] in heavy) == []


def test_help_lists_each_lazy_command_as_the_command_describes_itself() -> None:
    """The summaries --help shows for commands it does not import are the commands' own first lines."""
    import importlib

    import click

    from worktrial.cli.main import _LAZY, _LAZY_SUMMARIES

    assert set(_LAZY_SUMMARIES) == set(_LAZY)
    for name, (module, attr) in _LAZY.items():
        command = getattr(importlib.import_module(module), attr)
        for limit in (30, 45, 80, 200):
            shown = click.Command(name, help=_LAZY_SUMMARIES[name]).get_short_help_str(limit)
            assert shown == command.get_short_help_str(limit), name
