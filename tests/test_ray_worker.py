"""The Ray executor's parts that need no cluster: bundles, the worker's checks, the flags, Ray missing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, task
from worktrial.agents.base import AgentOptions
from worktrial.cli.executors import executor_factory, parse_resources
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptSpec, RepoSource
from worktrial.engine.ray_executor import RayExecutor, RaySettings, check_shippable
from worktrial.engine.ray_worker import SlotWorker, SuitePack
from worktrial.errors import BadInputError
from worktrial.isolation.gitbundle import create_bundle
from worktrial.model.suite import load_suite


def test_bundle_holds_the_commit_and_leaves_the_repository_alone(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / "later.txt").write_text("later\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "later")
    refs_before = git(repo, "for-each-ref")
    digest = create_bundle(repo, [first], tmp_path / "b.bundle")
    assert git(repo, "for-each-ref") == refs_before
    heads = subprocess.run(["git", "bundle", "list-heads", str(tmp_path / "b.bundle")], capture_output=True, text=True)
    assert first in heads.stdout
    assert git(repo, "rev-parse", "HEAD") not in heads.stdout  # only what was asked for travels
    assert len(digest) == 64


class _Setup:
    def __init__(self, repo: Path, tmp_path: Path, write_suite) -> None:
        self.commit = git(repo, "rev-parse", "HEAD")
        (tmp_path / "hidden").mkdir()
        (tmp_path / "hidden" / "expected.txt").write_text("ok\n")
        suite = write_suite(
            [task("t1", verify_commands=[{"sh": 'cmp done.txt "$WORKTRIAL_SUITE_DIR/hidden/expected.txt"'}])],
            files=["hidden/*"],
        )
        self.loaded = load_suite(suite)
        digest = create_bundle(repo, [self.commit], tmp_path / "b.bundle")
        self.bundle_name = "bundle:" + digest
        self.shipments: dict[str, object] = {self.bundle_name: (tmp_path / "b.bundle").read_bytes()}
        pack = SuitePack(self.loaded.sha256, (("hidden/expected.txt", "", b"ok\n"),))
        self.suite_name = "suite:" + pack.digest()
        self.shipments[self.suite_name] = pack
        self.spec = AttemptSpec(
            run_id="r",
            suite_sha256=self.loaded.sha256,
            base_commit=self.commit,
            source=RepoSource("bundle", self.bundle_name),
            agent=AgentRef("command", AgentOptions(agent_cmd="sh -c 'echo ok > done.txt'")),
            suite_dir=self.suite_name,
            suite_digest=self.loaded.digest,
        )
        self.worker = SlotWorker(str(tmp_path), "test-worker")
        assert "error" not in self.worker.preflight(self.spec.agent)

    def job(self, **spec_changes: object) -> AttemptJob:
        spec = dataclasses.replace(self.spec, **spec_changes)  # type: ignore[arg-type]
        return AttemptJob(spec=spec, task=self.loaded.suite.tasks[0], attempt=1)


@pytest.fixture
def setup(repo: Path, tmp_path: Path, write_suite):
    made = _Setup(repo, tmp_path, write_suite)
    try:
        yield made
    finally:
        made.worker.close()


def test_worker_runs_from_shipments_only(setup: _Setup) -> None:
    fetched: list[str] = []

    def fetch(name: str) -> object:
        fetched.append(name)
        return setup.shipments[name]

    for attempt in (1, 2):
        result = setup.worker.run(dataclasses.replace(setup.job(), attempt=attempt), fetch)
        assert result.record.outcome == "pass", (result.record.reason, result.artifacts)
    assert sorted(fetched) == sorted([setup.bundle_name, setup.suite_name])  # each fetched once, then cached


def test_worker_refuses_a_bundle_that_does_not_match_its_digest(setup: _Setup) -> None:
    setup.shipments[setup.bundle_name] = b"not the bundle"
    result = setup.worker.run(setup.job(), setup.shipments.__getitem__)
    assert result.record.outcome == "error" and result.record.error_category == "source_mismatch"
    assert result.fatal is not None  # the run stops: every attempt would hit it


def test_worker_refuses_a_base_commit_the_bundle_lacks(setup: _Setup, repo: Path) -> None:
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "new")
    result = setup.worker.run(setup.job(base_commit=git(repo, "rev-parse", "HEAD")), setup.shipments.__getitem__)
    assert result.record.error_category == "source_mismatch"
    assert "is not in the repository" in (result.record.reason or "")


def test_worker_refuses_suite_files_other_than_the_pinned_ones(setup: _Setup) -> None:
    setup.shipments[setup.suite_name] = SuitePack(setup.loaded.sha256, (("hidden/expected.txt", "", b"changed\n"),))
    result = setup.worker.run(setup.job(), setup.shipments.__getitem__)
    assert result.record.error_category == "source_mismatch"
    assert "suite files" in (result.record.reason or "")


def test_worker_reports_an_agent_that_cannot_work_on_its_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a node without the agent's CLI
    worker = SlotWorker(str(tmp_path), "w")
    try:
        answer = worker.preflight(AgentRef("aider", AgentOptions()))
    finally:
        worker.close()
    assert "`aider` is not on PATH" in answer.get("error", "")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (("agent_claude=1",), {"agent_claude": 1.0}),
        (('{"a": 2, "b": 0.5}', "c=3"), {"a": 2.0, "b": 0.5, "c": 3.0}),
    ],
)
def test_resources_parse(values: tuple[str, ...], expected: dict[str, float]) -> None:
    assert parse_resources(values) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("agent_claude", "NAME=AMOUNT"),
        ("x=lots", "not a number"),
        ("x=0", "more than 0"),
        ("CPU=2", "--ray-cpus-per-attempt"),
        ("{nope", "not valid JSON"),
        ("[1]", "NAME=AMOUNT"),
    ],
)
def test_bad_resources_are_one_clear_error(value: str, message: str) -> None:
    with pytest.raises(BadInputError, match="--ray-resource") as info:
        parse_resources((value,))
    assert message in str(info.value)


def test_credentials_in_the_base_url_never_travel_to_the_cluster() -> None:
    with pytest.raises(BadInputError, match="would travel to every Ray node"):
        check_shippable(AgentRef("builtin", AgentOptions(base_url="https://user:s3cret@llm.example.invalid/v1")))
    check_shippable(AgentRef("builtin", AgentOptions(base_url="https://llm.example.invalid/v1")))


def test_keep_worktrees_is_refused_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="--keep-worktrees"):
        RayExecutor(2, tmp_path, keep_worktrees=True, settings=RaySettings(address="127.0.0.1:1"))


def test_ray_flags_without_ray_executor_are_refused() -> None:
    with pytest.raises(BadInputError, match="need --executor ray"):
        executor_factory("local", "127.0.0.1:6379", 1.0, ())


def test_auto_stays_local_without_an_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert executor_factory("auto", None, 1.0, ()).__name__ == "local_executor"


@pytest.mark.slow
def test_executor_ray_without_ray_installed_is_one_clear_error(repo: Path, write_suite) -> None:
    suite = write_suite([task("t1")])
    code = "import sys; sys.modules['ray'] = None; from worktrial.cli import main; main()"
    argv = [sys.executable, "-c", code, "eval", "--suite", str(suite), "--trust", "--agent", "oracle"]
    result = subprocess.run([*argv, "--executor", "ray"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "worktrial: error: --executor ray needs Ray, which is not installed; "
        "install it with: pip install 'worktrial[ray]'"
    )
