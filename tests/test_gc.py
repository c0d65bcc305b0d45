"""``worktrial gc`` on real runs, a real environment cache and real podman images: what it removes, and what never."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import SuiteWriter, task
from worktrial.engine.confine import SandboxChoice
from worktrial.engine.run import RunOptions, RunResult, run_suite
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.state import signing
from worktrial.state.dirs import cache_dir
from worktrial.state.gc import GcOptions, collect

Cli = Callable[..., Result]
DEADLINE_SECS = 60


def _eval(cli: Cli, repo: Path, suite: Path, *extra: str) -> str:
    made = cli(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json", *extra], cwd=repo
    )
    assert made.exit_code == 0, made.output
    run_id: str = json.loads(made.stdout)["run"]["id"]
    return run_id


def _left(repo: Path, run_id: str) -> list[str]:
    """What of a run is still on disk."""
    places = {
        "run": repo / ".worktrial/runs" / run_id,
        "traces": repo / ".worktrial/eval/traces" / run_id,
        "page": repo / ".worktrial/view" / f"{run_id}.html",
        "key": signing.key_path(run_id),
    }
    return [name for name, path in places.items() if os.path.lexists(path)]


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_SECS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_runs_go_whole_by_age_and_count_and_a_running_one_stays(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    suite_a, suite_b = write_suite([task("t1")]), write_suite([task("t1")], id="other-suite")
    # Oldest first by run id (its start time; runs started within one second are ordered by the id's random part).
    old = sorted(_eval(cli, repo, suite_a) for _ in range(3))
    other = _eval(cli, repo, suite_b)
    assert cli(["view", old[0]], cwd=repo).exit_code == 0

    # --keep 2: the oldest run of suite A goes, with its traces, page and key; suite B's only run stays.
    listed = cli(["gc", "--keep", "2", "--dry-run"], cwd=repo)
    assert listed.exit_code == 0, listed.output
    assert f"run {old[0]} (suite test-suite, beyond the newest 2 of its suite)" in listed.stdout
    assert "would free" in listed.stdout and old[1] not in listed.stdout and other not in listed.stdout
    assert _left(repo, old[0]) == ["run", "traces", "page", "key"]  # a dry run removes nothing
    done = cli(["gc", "--keep", "2"], cwd=repo)
    assert done.exit_code == 0, done.output
    assert _left(repo, old[0]) == [] and _left(repo, old[1]) == ["run", "traces", "key"]

    # A run that is running (its agent waits for the test) is never removed, however old it looks.
    hold, started = tmp_path / "hold", tmp_path / "started"
    hold.touch()
    agent = f"touch {started}; while [ -e {hold} ]; do sleep 0.05; done; echo done > done.txt"
    options = RunOptions(agent_cmd=agent, workspace=repo, jobs=1, sandbox=SandboxChoice(mode="off"))
    results: list[RunResult] = []
    running = threading.Thread(target=lambda: results.append(run_suite(suite_a, options)))
    running.start()
    try:
        _wait_for(started)
        later = datetime.now(UTC) + timedelta(days=30)
        report = collect(repo, cache_dir(), GcOptions(older_than_days=7), now=later)
    finally:
        hold.unlink()
        running.join(timeout=DEADLINE_SECS)
    live = results[0].run_id
    assert {i.name for i in report.removed} == {old[1], old[2], other}
    assert [(i.name, i.why_kept) for i in report.kept] == [(live, "still running (a live process holds its lock)")]
    assert all(_left(repo, run_id) == [] for run_id in (old[1], old[2], other))
    assert results[0].status == "complete" and "run" in _left(repo, live)


def test_gc_never_follows_a_symlink_out_of_the_state_root(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    precious = tmp_path / "precious"
    (precious / "inside").mkdir(parents=True)
    (precious / "inside" / "data.txt").write_text("keep me\n")
    (precious / "run.json").write_text("{}")
    run_id = _eval(cli, repo, write_suite([task("t1")]))
    # A run whose traces directory and page were replaced by links to the user's files, and a "run" that is a link.
    traces = repo / ".worktrial/eval/traces" / run_id
    shutil.rmtree(traces)
    traces.symlink_to(precious / "inside")
    (repo / ".worktrial/view").mkdir()
    (repo / ".worktrial/view" / f"{run_id}.html").symlink_to(precious / "inside" / "data.txt")
    planted = repo / ".worktrial/runs/20200101T000000Z-abcdef"
    planted.symlink_to(precious)
    done = cli(["gc", "--older-than", "0"], cwd=repo)
    assert done.exit_code == 0, done.output
    assert _left(repo, run_id) == []  # the run, and the links in its place (not what they point to)
    assert "run 20200101T000000Z-abcdef: not a directory (a symlink is never followed)" in done.stdout
    assert planted.is_symlink() and (precious / "inside" / "data.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in precious.iterdir()) == ["inside", "run.json"]
    # The state directory itself a link: refused, not followed.
    shutil.rmtree(repo / ".worktrial")
    (repo / ".worktrial").symlink_to(precious)
    refused = cli(["gc", "--older-than", "0"], cwd=repo)
    assert refused.exit_code == 2 and "gc never follows it" in refused.output
    assert sorted(p.name for p in precious.iterdir()) == ["inside", "run.json"]


def test_the_environment_cache_goes_but_never_under_a_reader(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    environment = {"setup": [{"sh": "echo ready > ready.txt"}], "cache_key": "v1"}
    _eval(cli, repo, write_suite([task("t1")], environment=environment))
    root = cache_dir() / "environments"
    entries = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    listed = cli(["gc", "--cache", "--dry-run"], cwd=repo)
    assert f"environment cache {root}" in listed.stdout and "would free" in listed.stdout and entries[0].exists()
    cache = EnvironmentCache(root)
    with cache._shared():  # an attempt restoring an entry right now
        busy = cli(["gc", "--cache"], cwd=repo)
    assert "kept:" in busy.stdout and "a running worktrial is using it" in busy.stdout and entries[0].exists()
    done = cli(["gc", "--cache"], cwd=repo)
    assert done.exit_code == 0 and "removed:" in done.stdout and not entries[0].exists()
    assert cli(["gc", "--cache"], cwd=repo).stdout.strip() == "nothing to remove"


def test_gc_needs_to_be_told_what_to_remove(cli: Cli, repo: Path) -> None:
    refused = cli(["gc"], cwd=repo)
    assert refused.exit_code == 2 and "--older-than DAYS" in refused.output


# -- podman ------------------------------------------------------------------------------------------------------


@pytest.fixture
def own_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Podman with a storage of its own (this test's images and volumes only: never another test's or the user's),
    given to worktrial through ``WORKTRIAL_PODMAN``."""
    if shutil.which("podman") is None:
        pytest.skip("needs podman (make containers installs it)")
    root = tmp_path / "storage"
    run_root = Path(tempfile.mkdtemp(prefix="wtgc-", dir="/tmp"))  # podman refuses a runroot of more than 50 characters
    argv = ["podman", "--root", str(root), "--runroot", str(run_root), "--storage-driver", "vfs"]
    wrapper = tmp_path / "podman"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(argv) + ' "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("WORKTRIAL_PODMAN", str(wrapper))
    yield argv
    subprocess.run([*argv, "rm", "--all", "--force"], capture_output=True, check=False)
    subprocess.run([*argv, "rmi", "--all", "--force"], capture_output=True, check=False)
    shutil.rmtree(run_root, ignore_errors=True)


def _podman(argv: list[str], *args: str) -> str:
    done = subprocess.run([*argv, *args], capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(args[:2])}: exit {done.returncode}: {done.stderr.strip()[-2000:]}"
    return done.stdout.strip()


@pytest.mark.container
@pytest.mark.slow
def test_gc_removes_only_the_images_and_volume_worktrial_made(
    cli: Cli, repo: Path, own_podman: list[str], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\nCOPY data /data\n")
    images = {}
    for name in ("built", "in-use", "also-the-users", "users-own"):
        (context / "data").write_text(f"{name}\n")
        images[name] = _podman(own_podman, "build", "-q", "-f", str(context / "Dockerfile"), str(context))
    tag = {name: f"localhost/worktrial-env:{index:024x}" for index, name in enumerate(images)}
    for name in ("built", "in-use", "also-the-users"):
        _podman(own_podman, "tag", images[name], tag[name])
    _podman(own_podman, "tag", images["also-the-users"], "localhost/mine:1")
    _podman(own_podman, "tag", images["users-own"], "localhost/worktrial-envy:1")  # a look-alike name of the user's
    _podman(own_podman, "create", "--name", "uses-it", tag["in-use"], "/data")
    _podman(own_podman, "volume", "create", "worktrial-tools")
    _podman(own_podman, "volume", "create", "my-data")

    listed = cli(["gc", "--images", "--runtime", "podman", "--dry-run"], cwd=repo)
    assert listed.exit_code == 0, listed.output
    for name in ("built", "in-use", "also-the-users"):
        assert f"image {tag[name]} (podman)" in listed.stdout
    assert "volume worktrial-tools" in listed.stdout and "my-data" not in listed.stdout
    assert "worktrial-envy" not in listed.stdout and "localhost/mine" not in listed.stdout
    assert _podman(own_podman, "images", "--format", "{{.Repository}}:{{.Tag}}").count("worktrial-env:") == 3

    done = cli(["gc", "--images", "--runtime", "podman"], cwd=repo)
    assert done.exit_code == 0, done.output
    left = _podman(own_podman, "images", "--format", "{{.Repository}}:{{.Tag}}").split()
    assert tag["built"] not in left and tag["also-the-users"] not in left
    assert tag["in-use"] in left and f"image {tag['in-use']} (podman)" in done.stdout.split("kept:")[1]
    assert "localhost/mine:1" in left and "localhost/worktrial-envy:1" in left  # the user's tags and images stay
    assert (
        _podman(own_podman, "image", "inspect", "--format", "{{.Id}}", "localhost/mine:1") == images["also-the-users"]
    )
    assert _podman(own_podman, "volume", "ls", "--format", "{{.Name}}").split() == ["my-data"]
