"""Shared fixtures: isolated user state, real temporary git repositories, a CLI runner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner, Result

from worktrial.cli.main import main

_SRC = Path(__file__).resolve().parent.parent / "src"

# A shell without job control starts background commands (`make test &`, nohup) with SIGINT ignored, and an
# ignored signal stays ignored across exec: every harness a test starts would then shrug off its Ctrl-C.
# Restoring Python's own handler here makes children start with the default disposition, as under a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Where bubblewrap is missing (`make check` installs nothing; `make test` installs it), the tests that need it
    are skipped, not failed: those marked ``sandbox`` and the ``sandbox="on"`` case of a test parametrized over it."""
    if shutil.which("bwrap") is not None:
        return
    skip = pytest.mark.skip(reason="needs bubblewrap (make sandbox installs it)")
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.get_closest_marker("sandbox") or (callspec is not None and callspec.params.get("sandbox") == "on"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point config, cache and TMPDIR at a temp dir so tests never touch the user's real state nor leave kept
    worktrees or slots in /tmp (pytest keeps only its last few base directories)."""
    base = tmp_path_factory.mktemp("state")
    scratch = base / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # subprocesses (a harness under test) inherit it
    # A harness started as a subprocess imports this checkout too, not the one the venv was installed from.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(_SRC), os.environ.get("PYTHONPATH", "")])))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # tempfile caches gettempdir() in this process
    monkeypatch.setenv("WORKTRIAL_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("WORKTRIAL_CACHE_DIR", str(base / "cache"))
    monkeypatch.delenv("WORKTRIAL_TRUST", raising=False)
    monkeypatch.delenv("WORKTRIAL_TRUST_PROJECT", raising=False)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Author")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "author@example.invalid")
    yield base


def git(repo: Path, *args: str) -> str:
    """Run real git in ``repo`` and return its stdout (tests only; the product uses worktrial.isolation.proc)."""
    out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(params=["overlay", "copying"])
def rooms(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test on both paths of the agent's and the verifier's rooms: overlays (where the sandbox can mount
    them) and the copying path (``WORKTRIAL_OVERLAY=off``), which must give the same patches and verdicts."""
    monkeypatch.setenv("WORKTRIAL_OVERLAY", "on" if request.param == "overlay" else "off")
    return str(request.param)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository with one commit, to evaluate in."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# sample repo\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "initial")
    return path


SuiteWriter = Callable[..., Path]


@pytest.fixture
def write_suite(tmp_path: Path) -> SuiteWriter:
    """Write a suite JSON file: ``write_suite(tasks, attempts=1, **suite_fields)``."""
    counter = iter(range(1_000_000))

    def write(tasks: list[dict[str, Any]], attempts: int = 1, **fields: Any) -> Path:
        data = {"id": "test-suite", "name": "Test suite", "attempts": attempts, "tasks": tasks, **fields}
        path = tmp_path / f"suite-{next(counter)}.json"
        path.write_text(json.dumps(data, indent=2))
        return path

    return write


def task(task_id: str = "t1", **fields: Any) -> dict[str, Any]:
    """A minimal valid task; override any field."""
    base: dict[str, Any] = {
        "id": task_id,
        "prompt": f"Do {task_id}",
        "timeout_secs": 30,
        "verify_commands": ["test -f done.txt"],
        "solution": [{"sh": "echo done > done.txt"}],
    }
    base.update(fields)
    return base


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Invoke the real CLI in-process: ``cli(args, cwd=path)``."""

    def invoke(args: list[str], cwd: Path | None = None, input: str | None = None) -> Result:
        runner = CliRunner()
        old = Path.cwd()
        if cwd is not None:
            os.chdir(cwd)
        try:
            return runner.invoke(main, args, input=input, catch_exceptions=False)
        finally:
            os.chdir(old)

    return invoke


def alive_with_marker(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``marker``.

    A sandbox's own bubblewrap processes repeat the command they run in their command line; they are not
    counted, the marked process inside is (and it cannot outlive them).
    """
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        cmdline = proc.info["cmdline"] or ()
        if cmdline and os.path.basename(cmdline[0]) == "bwrap":
            continue
        if any(marker in arg for arg in cmdline):
            found.append(proc.pid)
    return found


def alive_with_env(name: str, value: str) -> list[int]:
    """Live (not zombie) processes, other than this one, whose environment holds ``name=value`` exactly.

    A test gives its processes a unique value (a uuid) so that concurrent test runs on one machine, which
    start the same programs from the same paths, never count each other's processes.
    """
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found
