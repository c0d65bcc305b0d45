"""The engine's seams: one run is one scope, results come back as data, the executor is pluggable."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from tests.fakes import share_with_sandbox
from worktrial.agents import AgentContext, AgentOptions, AgentResult
from worktrial.agents.base import AgentError
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptSpec, Executor, ExecutorEvent, RepoSource
from worktrial.engine.local import LocalExecutor
from worktrial.engine.run import RunObserver, RunOptions, RunResult, agent_ref, run_suite
from worktrial.model.records import AttemptRecord, ErrorCategory
from worktrial.model.suite import Task, load_suite

WAIT_SECS = 60.0


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_runs_in_one_process_never_touch_each_others_agents(repo: Path, write_suite, tmp_path: Path) -> None:
    """The fast run ends (and cleans up its processes) while the slow run's agent is still working."""
    sync = tmp_path / "sync"
    sync.mkdir()
    share_with_sandbox(sync)  # the agent signals the test through this one shared directory
    started, go = sync / "slow-started", sync / "go"
    slow_agent = f"touch {started}; while [ ! -f {go} ]; do sleep 0.02; done; touch done.txt"
    slow_suite = write_suite([task("slow", timeout_secs=120)])
    fast_suite = write_suite([task("fast")])
    results: dict[str, RunResult] = {}

    def slow() -> None:
        results["slow"] = run_suite(slow_suite, RunOptions(agent_cmd=slow_agent, workspace=repo, jobs=1))

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        _wait_for(started)
        results["fast"] = run_suite(fast_suite, RunOptions(agent_cmd="touch done.txt", workspace=repo, jobs=1))
    finally:
        go.touch()
        thread.join(WAIT_SECS)
    assert not thread.is_alive()
    for name in ("fast", "slow"):
        result = results[name]
        assert result.status == "complete"
        attempt = result.envelope.report.tasks[0].attempts[0]
        assert attempt.outcome == "pass", (name, attempt.reason)


class FatalAgent:
    """Breaks the way a rejected API key does: every attempt would repeat it."""

    name = "fatal"

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        return AgentResult(
            claimed=None, error=AgentError(ErrorCategory.PROVIDER_AUTH, "the key was rejected", fatal=True)
        )


def test_an_aborted_run_is_a_result_not_an_exception(repo: Path, write_suite) -> None:
    suite = write_suite([task("a"), task("b")], attempts=2)
    result = run_suite(suite, RunOptions(agent="tests.test_engine:FatalAgent", workspace=repo, jobs=1))
    assert result.status == "aborted"
    assert result.error is not None and "the key was rejected" in result.error
    assert result.run_id in result.error
    assert result.envelope.run.complete is False
    assert (result.store_dir / "envelope.json").is_file()


class Recorder(RunObserver):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def begin(self, run_id: str, to_run: int, done: int) -> None:
        self.calls.append(("begin", str(to_run), str(done)))

    def start(self, task_id: str, attempt: int) -> None:
        self.calls.append(("start", task_id, str(attempt)))

    def attempt(self, record: AttemptRecord) -> None:
        self.calls.append(("attempt", record.task_id, str(record.attempt), record.outcome))


def test_the_observer_hears_every_attempt_in_order(repo: Path, write_suite) -> None:
    suite = write_suite([task("a"), task("b")], attempts=2)
    recorder = Recorder()
    run_suite(suite, RunOptions(agent="oracle", workspace=repo, jobs=1), recorder)
    assert recorder.calls[0] == ("begin", "4", "0")
    starts = [c[1:] for c in recorder.calls if c[0] == "start"]
    finished = [c[1:] for c in recorder.calls if c[0] == "attempt"]
    assert starts == [("a", "1"), ("b", "1"), ("a", "2"), ("b", "2")]
    assert finished == [(*s, "pass") for s in starts]


class PicklingExecutor:
    """Wraps the local executor but sends every job and result through pickle, as a remote executor would."""

    def __init__(self, jobs: int, work_root: Path, keep_worktrees: bool) -> None:
        self.inner = LocalExecutor(jobs, work_root, keep_worktrees=keep_worktrees)
        self.pickled_jobs: list[bytes] = []

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        return self.inner.preflight(pickle.loads(pickle.dumps(agent)))

    def submit(self, job: AttemptJob) -> None:
        data = pickle.dumps(job)
        self.pickled_jobs.append(data)
        self.inner.submit(pickle.loads(data))

    def events(self) -> Iterator[ExecutorEvent]:
        for event in self.inner.events():
            yield pickle.loads(pickle.dumps(event))

    def stop(self) -> None:
        self.inner.stop()

    def close(self, timeout: float | None) -> bool:
        return self.inner.close(timeout)


@pytest.mark.slow
def test_a_plugged_in_executor_gets_serialisable_jobs_and_gives_the_same_report(
    repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-a-job-0123456789")
    suite = write_suite([task("a"), task("b", verify_commands=["false"])], attempts=2)
    made: list[PicklingExecutor] = []

    def factory(jobs: int, work_root: Path, keep: bool) -> Executor:
        made.append(PicklingExecutor(jobs, work_root, keep))
        return made[0]

    remote = run_suite(suite, RunOptions(agent="oracle", workspace=repo, jobs=2, executor=factory))
    local = run_suite(suite, RunOptions(agent="oracle", workspace=repo, jobs=2))
    assert len(made[0].pickled_jobs) == 4
    assert all(b"sk-never-in-a-job" not in data for data in made[0].pickled_jobs)

    def comparable(result: RunResult) -> list[tuple[str, int, str, bool | None]]:
        return [(t.task_id, a.attempt, a.outcome, a.verified) for t in result.envelope.report.tasks for a in t.attempts]

    assert comparable(remote) == comparable(local)
    assert remote.envelope.report.overall == local.envelope.report.overall
    # The driver, not the worker, wrote the traces.
    for t in remote.envelope.report.tasks:
        for a in t.attempts:
            assert a.trace is not None and (repo / a.trace).is_file()


def test_an_agent_reference_never_carries_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-a-job-0123456789")
    ref = agent_ref(RunOptions(model="openai/gpt-5.1"))
    assert ref.name == "builtin"
    assert b"sk-never-in-a-job" not in pickle.dumps(ref)


def test_a_worker_builds_its_slot_from_a_git_bundle(repo: Path, write_suite, tmp_path: Path) -> None:
    """What a remote worker gets instead of a path on the driver's disk."""
    bundle = tmp_path / "repo.bundle"
    git(repo, "bundle", "create", str(bundle), "HEAD", "main")
    base = git(repo, "rev-parse", "HEAD")
    loaded = load_suite(write_suite([task("a")]))
    spec = AttemptSpec(
        run_id="r",
        suite_sha256=loaded.sha256,
        base_commit=base,
        source=RepoSource("bundle", str(bundle)),
        agent=AgentRef("oracle", AgentOptions()),
    )
    work_root = tmp_path / "work"
    work_root.mkdir()
    executor = LocalExecutor(1, work_root)
    try:
        executor.preflight(spec.agent)
        task_model = Task.model_validate(task("a"))
        executor.submit(AttemptJob(spec=spec, task=task_model, attempt=1))
        done = [e for e in executor.events() if e.kind == "done"]
    finally:
        executor.stop()
        executor.close(WAIT_SECS)
    assert len(done) == 1 and done[0].result is not None
    assert done[0].result.record.outcome == "pass", done[0].result.record.reason
    assert done[0].result.trace.task_id == "a"
