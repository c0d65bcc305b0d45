"""Every file worktrial reads from input is a regular file within a size limit; anything else is one line, exit 2.

A FIFO would block ``open`` forever, ``/dev/zero`` (or a symlink to it) would be read until memory runs out. Each
case runs the real CLI in its own process with a deadline, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SuiteWriter, task
from tests.hostile_support import run_worktrial
from worktrial.jsonlimits import MAX_SUITE_BYTES
from worktrial.safe_read import InputFileError, read_input

Stored = tuple[Path, dict[str, Any]]
"""A suite and the envelope of a real run of it."""

DEADLINE_SECS = 60
"""Generous for a command that must answer at once; a hang ends as TimeoutExpired, a failed test."""


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_dev_zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


BAD_FILES: dict[str, Callable[[Path], Path]] = {"fifo": make_fifo, "dev-zero-link": make_dev_zero_link}


def assert_one_line_refusal(result, what: str = "not a regular file") -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("worktrial: error:") and what in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr


@pytest.fixture
def stored_envelope(repo: Path, write_suite: SuiteWriter) -> Stored:
    """A suite and the envelope of a real (oracle) run of it, traces included."""
    suite = write_suite([task("t1"), task("t2")])
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--format", "json", "-q"],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1"},
    )
    assert result.returncode == 0, result.stderr
    return suite, json.loads(result.stdout)


def test_the_reader_refuses_without_blocking_and_follows_only_when_asked(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert read_input(link, 10) == b"{}"
    with pytest.raises(OSError):
        read_input(link, 10, follow_symlinks=False)
    for name, make in BAD_FILES.items():
        with pytest.raises(InputFileError, match="not a regular file"):
            read_input(make(tmp_path / name), 10)
    with pytest.raises(InputFileError, match="is larger than 1 bytes"):
        read_input(good, 1)
    assert read_input(good, 2) == b"{}"  # exactly the limit
    with pytest.raises(IsADirectoryError):
        read_input(tmp_path, 10)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_suite_that_is_not_a_regular_file(repo: Path, tmp_path: Path, kind: str) -> None:
    bad = BAD_FILES[kind](tmp_path / "suite.json")
    for args in (["validate", str(bad)], ["eval", "--suite", str(bad), "--agent", "oracle"], ["check", str(bad)]):
        assert_one_line_refusal(run_worktrial(args, cwd=repo, timeout=DEADLINE_SECS))


def test_a_suite_beyond_the_size_limit(repo: Path, tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(MAX_SUITE_BYTES + 1)  # sparse: refused by its size, never read
    assert_one_line_refusal(run_worktrial(["validate", str(huge)], cwd=repo, timeout=DEADLINE_SECS), "16 MiB")


def test_a_symlink_to_a_regular_suite_is_followed(repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    link = tmp_path / "linked.json"
    link.symlink_to(write_suite([task("t1", timeout_secs=600)]))  # a suite validate finds no problem in
    result = run_worktrial(["validate", str(link)], cwd=repo, timeout=DEADLINE_SECS)
    assert result.returncode == 0 and ": ok" in result.stdout, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_an_envelope_that_is_not_a_regular_file(repo: Path, write_suite: SuiteWriter, tmp_path: Path, kind: str):
    suite = write_suite([task("t1")])
    bad = BAD_FILES[kind](tmp_path / "envelope.json")
    for args in (
        ["audit", str(bad), "--suite", str(suite)],
        ["compare", str(bad), str(bad)],
        ["show", str(bad)],
        ["view", str(bad), "--output", str(tmp_path / "page.html")],
        ["power", "--from", str(bad)],
    ):
        assert_one_line_refusal(run_worktrial(args, cwd=repo, timeout=DEADLINE_SECS))
    assert not (tmp_path / "page.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_trace_an_envelope_names_that_is_not_a_regular_file(
    repo: Path, tmp_path: Path, stored_envelope: Stored, kind: str
) -> None:
    suite, envelope = stored_envelope
    bad = BAD_FILES[kind](tmp_path / "trace.json")
    for t in envelope["report"]["tasks"]:
        for attempt in t["attempts"]:
            attempt["trace"] = str(bad)
    published = tmp_path / "published.json"
    published.write_text(json.dumps(envelope))
    result = run_worktrial(["audit", str(published), "--suite", str(suite)], cwd=repo, timeout=DEADLINE_SECS)
    assert_one_line_refusal(result)
    assert "trace file" in result.stderr


@pytest.mark.slow
def test_the_audit_of_real_traces_still_passes(repo: Path, tmp_path: Path, stored_envelope: Stored) -> None:
    suite, envelope = stored_envelope
    published = tmp_path / "published.json"
    published.write_text(json.dumps(envelope))
    result = run_worktrial(["audit", str(published), "--suite", str(suite)], cwd=repo, timeout=DEADLINE_SECS)
    assert result.returncode == 0 and "2 trace files checked" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_the_users_config_that_is_not_a_regular_file(
    repo: Path, write_suite: SuiteWriter, isolated_state: Path, kind: str
) -> None:
    config_dir = isolated_state / "config"
    config_dir.mkdir(exist_ok=True)
    BAD_FILES[kind](config_dir / "config.toml")
    suite = write_suite([task("t1")])
    for args in (["prices"], ["agents"], ["eval", "--suite", str(suite), "--agent", "oracle"]):
        result = run_worktrial(args, cwd=repo, env={"WORKTRIAL_TRUST": "1"}, timeout=DEADLINE_SECS)
        assert_one_line_refusal(result)
        assert "config.toml" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_the_projects_worktrial_toml_that_is_not_a_regular_file(repo: Path, kind: str) -> None:
    BAD_FILES[kind](repo / "worktrial.toml")
    assert_one_line_refusal(run_worktrial(["agents"], cwd=repo, timeout=DEADLINE_SECS), "worktrial.toml")


@pytest.mark.slow
def test_run_directory_files_that_are_not_regular_never_hang(
    repo: Path, stored_envelope: Stored, tmp_path: Path
) -> None:
    """The run store's own files: its envelope and an attempt's artifacts replaced by FIFOs (a run directory
    copied from elsewhere, or tampered with). Reports are rebuilt from the signed records; no artifacts shown."""
    _, envelope = stored_envelope
    run_id = envelope["run"]["id"]
    run_dir = repo / ".worktrial" / "runs" / run_id
    (run_dir / "envelope.json").unlink()
    make_fifo(run_dir / "envelope.json")
    for artifacts in run_dir.rglob("artifacts.json"):
        artifacts.unlink()
        make_fifo(artifacts)
    report = run_worktrial(["report", run_id, "--format", "json"], cwd=repo, timeout=DEADLINE_SECS)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["report"]["overall"]["passed_runs"] == 2
    show = run_worktrial(["show", run_id, "t1", "1"], cwd=repo, timeout=DEADLINE_SECS)
    assert show.returncode == 0 and "no artifacts stored for this attempt" in show.stdout, show.stderr
    view = run_worktrial(["view", run_id, "--output", str(tmp_path / "p.html")], cwd=repo, timeout=DEADLINE_SECS)
    assert view.returncode == 0 and (tmp_path / "p.html").is_file(), view.stderr
