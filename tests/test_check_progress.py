"""check's progress off a terminal: a line per phase, per task's re-runs, and after every quiet while, with the ETA."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.conftest import SuiteWriter, task
from worktrial.cli.check_progress import CheckProgress
from worktrial.cli.progress import PlainTicker, ProgressReporter
from worktrial.engine.check import CheckObserver, CheckOptions, CheckPhase, check_suite
from worktrial.model.suite import load_suite


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_ticker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests move the clock and tick themselves: no thread may print between their steps."""
    monkeypatch.setattr(PlainTicker, "start", lambda self: None)


def test_reruns_print_a_line_per_task_and_after_each_quiet_while() -> None:
    clock, out = _Clock(), io.StringIO()
    progress = CheckProgress(stream=out, clock=clock, every=30)
    progress.begin_reruns(CheckPhase(3, 3, "re-running the verifier of 2 tasks 2 times each", 4))
    progress.rerun("a", "rebuilding the oracle's result", 0)
    clock.now += 29
    progress.ticker.tick()  # not yet quiet for 30 s: nothing
    clock.now += 1
    progress.ticker.tick()
    progress.rerun("a", "re-run 1 of 2", 0)
    clock.now += 10
    progress.rerun("a", "re-run 2 of 2", 1)
    clock.now += 10
    progress.rerun("a", "probing the verifier", 2)
    progress.rerun("b", "rebuilding the oracle's result", 2)  # a's re-runs are done: its line, with the ETA
    clock.now += 20
    progress.ticker.tick()  # quiet for 20 s only
    progress.rerun("b", "probing the verifier", 4)
    progress.end_reruns()
    assert out.getvalue().splitlines() == [
        "worktrial: check 3/3: re-running the verifier of 2 tasks 2 times each",
        "worktrial: [0/4] verifier re-runs · a: rebuilding the oracle's result · elapsed 0:30 · ETA —",
        "worktrial: [2/4] verifier re-runs · a done · elapsed 0:50 · ETA ~0:50",
        "worktrial: [4/4] verifier re-runs · b done · elapsed 1:10 · ETA ~0:00",
    ]


def test_a_run_phase_says_its_number_and_goes_quiet_for_no_longer_than_the_interval() -> None:
    clock, out = _Clock(), io.StringIO()
    progress = CheckProgress(stream=out, clock=clock, every=30)
    with progress.run(CheckPhase(1, 2, "running the oracle agent on 3 tasks", 3)) as observer:
        assert isinstance(observer, ProgressReporter) and observer.title == "check 1/2"
        observer.begin("20260101T120000Z-1a2b3c", 3, 0)
        observer.start("slow-task", 1)
        observer.phase("slow-task", 1, "agent")
        clock.now += 95
        observer.ticker.tick()
    lines = out.getvalue().splitlines()
    assert lines[0] == "worktrial: check 1/2: running the oracle agent on 3 tasks"
    assert lines[2] == "[0/3] running: slow-task #1 (agent 1:35) · elapsed 1:35 · ETA —"


def test_quiet_shows_nothing_but_warnings() -> None:
    out, warned = io.StringIO(), list[str]()
    progress = CheckProgress(stream=out, quiet=True, on_warning=warned.append)
    progress.begin_reruns(CheckPhase(1, 1, "re-running", 2))
    progress.rerun("a", "re-run 1 of 2", 0)
    progress.warning("careful")
    progress.end_reruns()
    assert out.getvalue() == "" and warned == ["careful"]


class _Heard(CheckObserver):
    def __init__(self) -> None:
        self.phases: list[CheckPhase] = []
        self.reruns: list[tuple[str, str, int]] = []

    def run(self, phase: CheckPhase):
        self.phases.append(phase)
        return super().run(phase)

    def begin_reruns(self, phase: CheckPhase) -> None:
        self.phases.append(phase)

    def rerun(self, task_id: str, activity: str, done: int) -> None:
        self.reruns.append((task_id, activity, done))


def test_check_tells_every_phase_and_counts_each_rerun(repo: Path, write_suite: SuiteWriter) -> None:
    suite = write_suite([task("a"), task("b"), task("no-solution", solution=None)])
    heard = _Heard()
    report = check_suite(load_suite(suite), CheckOptions(workspace=repo, repeats=2, observer=heard))
    assert [(p.number, p.of, p.total) for p in heard.phases] == [(1, 3, 3), (2, 3, 3), (3, 3, 4)]
    assert heard.phases[0].title == "running the oracle agent on 3 tasks"
    assert heard.phases[2].title == "re-running the verifier of 2 tasks 2 times each on the oracle's result"
    assert heard.reruns == [
        ("a", "rebuilding the oracle's result", 0),
        ("a", "re-run 1 of 2", 0),
        ("a", "re-run 2 of 2", 1),
        ("a", "probing the verifier", 2),
        ("b", "rebuilding the oracle's result", 2),
        ("b", "re-run 1 of 2", 2),
        ("b", "re-run 2 of 2", 3),
        ("b", "probing the verifier", 4),
    ]
    assert [t.verify_runs for t in report.tasks] == [3, 3, 0]
