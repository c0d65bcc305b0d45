"""``--jobs auto``: the level grows while the machine and the provider allow, halves under pressure, settles below
the provider's 429s, and is kept in the run's record and envelope. Made deterministic: the pressure and the clock
are scripted (``Probe``), the provider is a real loopback server behind the real gateway that answers 429 above N
requests at once, and nothing waits on wall time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.cli_servers import CliServer, Plain, Request, chat_plain, chat_usage
from tests.conftest import task
from worktrial.agents.base import AgentOptions
from worktrial.engine.budget import Budget
from worktrial.engine.concurrency import AutoLevel, FixedLevel, HostProbe, Pressure, Tuning
from worktrial.engine.confine import SandboxChoice
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptSpec, RepoSource
from worktrial.engine.ray_worker import error_result
from worktrial.engine.run import RunObserver, RunOptions, run_suite
from worktrial.engine.schedule import Scheduler
from worktrial.engine.session import session_jobs
from worktrial.errors import BadInputError
from worktrial.model.envelope import ConcurrencyInfo, LevelChange
from worktrial.model.records import AttemptRecord, ErrorCategory
from worktrial.model.suite import Task

LOW = Pressure("psi", 0.0, 0.0)
HIGH = Pressure("psi", 90.0, 0.0)


class Clocked:
    """A probe whose clock moves ``step`` seconds each time it is read, and whose pressure is ``reading``."""

    def __init__(self, step: float = 1.0, reading: Pressure | None = LOW) -> None:
        self.step, self.reading, self.time = step, reading, 0.0

    def now(self) -> float:
        self.time += self.step
        return self.time

    def pressure(self) -> Pressure | None:
        return self.reading


TUNING = Tuning(sample_secs=1.0, grow_secs=10.0, settle_secs=10.0, ceiling_secs=100.0)


def test_the_level_grows_only_with_room_work_waiting_and_every_allowed_attempt_running() -> None:
    probe = Clocked()
    level = AutoLevel(4, probe, start=2, tuning=TUNING)
    steps = [level.update(running=2, waiting=True, rate_limited=0) for _ in range(9)]
    assert steps == [None] * 9 and level.level == 2  # not before grow_secs since the start
    assert level.update(running=2, waiting=True, rate_limited=0) is not None and level.level == 3
    for _ in range(20):
        level.update(running=2, waiting=True, rate_limited=0)  # one fewer runs than allowed: no room to prove
        level.update(running=3, waiting=False, rate_limited=0)  # nothing waits: nothing to grow for
    assert level.level == 3
    for _ in range(40):
        level.update(running=level.level, waiting=True, rate_limited=0)
    assert level.level == 4  # never past --max-jobs
    probe.reading = Pressure("psi", 30.0, 0.0)  # between low and high: hold
    level.level = 3
    for _ in range(30):
        level.update(running=3, waiting=True, rate_limited=0)
    assert level.level == 3


def test_pressure_halves_the_level_once_per_settling_and_only_once_it_is_in_effect() -> None:
    probe = Clocked(reading=HIGH)
    level = AutoLevel(8, probe, start=8, tuning=TUNING)
    why = level.update(running=8, waiting=True, rate_limited=0)
    assert level.level == 4 and why is not None and "CPU pressure 90%" in why
    for _ in range(30):  # still 8 running: the old level's doing, never a second halving for it
        level.update(running=8, waiting=True, rate_limited=0)
    assert level.level == 4
    level.update(running=4, waiting=True, rate_limited=0)
    assert level.level == 2
    level.update(running=2, waiting=True, rate_limited=0)
    assert level.level == 2  # within settle_secs of the last decrease
    for _ in range(20):
        level.update(running=level.level, waiting=True, rate_limited=0)
    assert level.level == 1  # and never below one
    probe.reading = Pressure("psi", 0.0, 30.0)  # memory counts as well
    level.level = 4
    probe.time += 100
    assert "memory pressure 30%" in (level.update(running=4, waiting=True, rate_limited=0) or "")


def test_a_429_sets_a_ceiling_below_what_ran_which_lifts_after_a_quiet_while() -> None:
    probe = Clocked()
    level = AutoLevel(6, probe, start=5, tuning=TUNING)
    why = level.update(running=5, waiting=True, rate_limited=2)
    assert level.level == 4 and level.ceiling == 4 and why == "the provider answered 2 429s with 5 running"
    assert level.update(running=5, waiting=True, rate_limited=3) is None  # 5 run above the new level: theirs
    assert level.level == 4
    for _ in range(80):  # low pressure, saturated: but not past the ceiling
        level.update(running=4, waiting=True, rate_limited=3)
    assert level.level == 4
    for _ in range(40):  # ceiling_secs without a 429: one more is tried
        level.update(running=level.level, waiting=True, rate_limited=3)
    assert level.level == 5
    level.update(running=5, waiting=True, rate_limited=4)
    assert level.level == 4


def test_the_record_keeps_earlier_sessions_and_bounds_a_long_run() -> None:
    earlier = ConcurrencyInfo(max_jobs=3, levels=[LevelChange(at="2026-01-01T00:00:00Z", level=2, why="start")])
    probe = Clocked(reading=None)  # a machine that says nothing: the level follows the 429s only
    level = AutoLevel(3, probe, start=2, earlier=earlier, tuning=TUNING)
    for _ in range(12):
        level.update(running=level.level, waiting=True, rate_limited=0)
    info = level.info()
    assert [c.level for c in info.levels] == [2, 2, 3]
    assert "no pressure reading" in info.levels[-1].why
    fixed = FixedLevel(5, info).info()
    assert fixed is not None and fixed.levels[-1].level == 5 and "--jobs 5" in fixed.levels[-1].why
    assert FixedLevel(5).info() is None
    swinging = Swinging()
    busy = AutoLevel(3, swinging, start=3, tuning=Tuning(sample_secs=0, grow_secs=0, settle_secs=0))
    changed = sum(busy.update(running=busy.level, waiting=True, rate_limited=0) is not None for _ in range(3000))
    kept = busy.info()
    assert changed > 2000 and len(kept.levels) == 1000 and kept.omitted == 1 + changed - 1000
    assert kept.levels[0].why.startswith("start")
    assert kept.levels[-1].level == busy.level


class Swinging(Clocked):
    """Pressure high and low by turns: a level that changes at every look."""

    def pressure(self) -> Pressure | None:
        return HIGH if int(self.time) % 2 else LOW


def test_the_host_probe_reads_psi_and_falls_back_to_load_and_meminfo(tmp_path: Path) -> None:
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text(
        "some avg10=63.10 avg60=50.00 avg300=40.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    (tmp_path / "pressure" / "memory").write_text("some avg10=0.50 avg60=0.00 avg300=0.00 total=1\n")
    reading = HostProbe(str(tmp_path)).pressure()
    assert reading == Pressure("psi", 63.1, 0.5) and reading.high() is not None and not reading.low()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "meminfo").write_text("MemTotal:  1000 kB\nMemFree: 10 kB\nMemAvailable:  50 kB\n")
    fallback = HostProbe(str(bare)).pressure()
    assert fallback is not None and fallback.source == "load" and fallback.memory == pytest.approx(95.0)
    assert fallback.high() is not None  # 95% of memory in use, whatever this machine's load average
    assert Pressure("load", 0.2, 95.0).high() == "memory 95% in use" and Pressure("load", 0.5, 50.0).low()
    assert Pressure("load", 2.0, 10.0).high() == "load 2.00 per core"


def test_jobs_and_max_jobs_resolve_as_documented() -> None:
    assert session_jobs(3, None) == (3, None)
    workers, auto = session_jobs("auto", 7)
    assert workers == 7 and auto is not None and auto.max_jobs == 7
    assert session_jobs(None, 5)[1] is not None  # --max-jobs alone means auto
    with pytest.raises(BadInputError, match="--max-jobs is the ceiling of --jobs auto"):
        session_jobs(2, 5)
    stored = ConcurrencyInfo(max_jobs=6)
    resumed = session_jobs(None, None, stored=(6, stored))
    assert resumed[0] == 6 and resumed[1] is not None and resumed[1].max_jobs == 6
    assert session_jobs(2, None, stored=(6, stored)) == (2, None)


class Watching(RunObserver):
    """Counts recorded attempts and follows the level, waking whoever waits on ``changed``."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.recorded = 0
        self.level = 0
        self.levels: list[tuple[int, str]] = []

    def attempt(self, record: AttemptRecord) -> None:
        with self.changed:
            self.recorded += 1
            self.changed.notify_all()

    def concurrency(self, level: int, why: str) -> None:
        with self.changed:
            self.level = level
            self.levels.append((level, why))
            self.changed.notify_all()


OFF = SandboxChoice(mode="off")
"""The level is the scheduler's: what the attempts run in does not matter to it (the 429 test runs them sandboxed)."""


class PressureMidRun(Clocked):
    """High CPU pressure while the 4th to the 6th attempt are being recorded, low before and after."""

    def __init__(self, watching: Watching) -> None:
        super().__init__(step=2.0)
        self.watching = watching

    def pressure(self) -> Pressure | None:
        return HIGH if 3 <= self.watching.recorded < 6 else LOW


@pytest.mark.slow
def test_cpu_pressure_mid_run_lowers_the_level_and_it_comes_back(repo: Path, write_suite) -> None:
    watching = Watching()
    suite = write_suite([task("t", solution=None, verify_commands=["true"])], attempts=12)
    options = RunOptions(
        agent_cmd="true", workspace=repo, jobs="auto", max_jobs=4, probe=PressureMidRun(watching), sandbox=OFF
    )
    result = run_suite(suite, options, watching)
    assert result.status == "complete"
    outcomes = [a.outcome for t in result.envelope.report.tasks for a in t.attempts]
    assert outcomes == ["pass"] * 12
    levels = result.envelope.run.concurrency
    assert levels is not None and levels.max_jobs == 4 and result.envelope.run.jobs == 4
    changes = [(c.level, c.why) for c in levels.levels]
    assert changes[1:] == watching.levels[1:]  # what progress heard is what the run recorded
    drops = [i for i, (_, why) in enumerate(changes) if why.startswith("CPU pressure 90%")]
    assert drops, changes
    before = changes[drops[0] - 1][0]
    assert changes[drops[0]][0] < before
    lowest = min(level for level, _ in changes[drops[0] :])
    assert any(level > lowest and "room for more" in why for level, why in changes[drops[-1] + 1 :]), changes
    stored = json.loads((result.store_dir / "run.json").read_text())
    assert stored["concurrency"]["levels"][-1]["level"] == changes[-1][0]


PROVIDER_SLOTS = 2
AGENT = r"""
import json, os, sys, urllib.error, urllib.request
body = json.dumps({"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}).encode()
request = urllib.request.Request(os.environ["WORKTRIAL_BASE_URL"] + "/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=120) as answer:
        json.load(answer)
except urllib.error.HTTPError as exc:
    print("model call failed: HTTP", exc.code)
    sys.exit(1)
open("done.txt", "w").write("ok\n")
"""


class SlotsProvider:
    """A provider that serves at most ``slots`` requests at once and answers 429 to any more. Each request it
    admits is held until as many are held as the run allows to run at once (its level, or the attempts left when
    fewer): a level above ``slots`` therefore always meets a 429, and one at or below it never waits on time."""

    def __init__(self, watching: Watching, total: int, slots: int) -> None:
        self.watching, self.total, self.slots = watching, total, slots
        self.held = 0
        self.most = 0
        self.refused = 0

    def respond(self, request: Request) -> Plain:
        changed = self.watching.changed
        with changed:
            if self.held >= self.slots:
                self.refused += 1
                return Plain(429, {"error": {"message": "too many requests at once"}})
            self.held += 1
            self.most = max(self.most, self.held)
            changed.notify_all()
            released = changed.wait_for(
                lambda: self.held >= min(self.watching.level, self.total - self.watching.recorded), timeout=120
            )
            self.held -= 1
        if not released:  # a bug, not a wait: the test fails on this answer's error
            return Plain(500, {"error": {"message": "held for two minutes"}})
        return chat_plain("m-1", chat_usage(10, 1), text="ok")


@pytest.mark.slow
def test_429s_above_n_at_once_settle_the_level_at_or_below_n_and_fail_no_attempt(
    repo: Path, write_suite, tmp_path: Path
) -> None:
    (repo / "agent.py").write_text(AGENT)
    subprocess.run(["git", "add", "agent.py"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "agent"], cwd=repo, check=True)
    watching = Watching()
    total = 9
    provider = SlotsProvider(watching, total, PROVIDER_SLOTS)
    suite = write_suite([task(f"t{i}", solution=None) for i in range(3)], attempts=3)
    with CliServer(provider.respond) as server:
        options = RunOptions(
            agent_cmd=f"{sys.executable} agent.py",
            base_url=f"{server.url}/v1",
            workspace=repo,
            jobs="auto",
            max_jobs=4,
            probe=Clocked(step=2.0),
        )
        result = run_suite(suite, options, watching)
    assert result.status == "complete"
    attempts = [a for t in result.envelope.report.tasks for a in t.attempts]
    assert [a.outcome for a in attempts] == ["pass"] * total, [(a.reason, a.retries) for a in attempts]
    assert provider.refused > 0 and provider.most <= PROVIDER_SLOTS
    # Every repetition was the provider's 429 (an infrastructure error, never scored), run again at a lower level.
    reasons = [why for a in attempts for why in a.retry_reasons or []]
    assert reasons and all("rate limited" in why and "HTTP 429" in why for why in reasons), reasons
    concurrency = result.envelope.run.concurrency
    assert concurrency is not None
    changes = [(c.level, c.why) for c in concurrency.levels]
    limited = [i for i, (_, why) in enumerate(changes) if "429" in why]
    assert limited, changes
    assert all(level <= PROVIDER_SLOTS for level, _ in changes[limited[-1] :]), changes
    assert changes[-1][0] <= PROVIDER_SLOTS


@pytest.mark.slow
def test_jobs_auto_on_the_command_line_and_in_resume(cli, repo: Path, write_suite) -> None:
    suite = str(write_suite([task("t", solution=None, verify_commands=["true"])], attempts=2))
    bad = cli(["eval", "--suite", suite, "--agent-cmd", "true", "--trust", "--jobs", "2", "--max-jobs", "3"], cwd=repo)
    assert bad.exit_code == 2 and "--max-jobs is the ceiling of --jobs auto" in bad.output
    nonsense = cli(["eval", "--suite", suite, "--agent", "oracle", "--trust", "--jobs", "many"], cwd=repo)
    assert nonsense.exit_code == 2 and "neither a whole number nor 'auto'" in nonsense.output
    fixed = cli(["eval", "--suite", suite, "--agent-cmd", "true", "--trust", "--format", "json", "-q"], cwd=repo)
    assert fixed.exit_code == 0 and "concurrency" not in json.loads(fixed.stdout)["run"]
    argv = ["eval", "--suite", suite, "--agent-cmd", "true", "--trust", "--format", "json", "--jobs", "auto"]
    ran = cli([*argv, "--max-jobs", "3"], cwd=repo)
    assert ran.exit_code == 0, ran.output
    envelope: dict[str, Any] = json.loads(ran.stdout)
    run_id = envelope["run"]["id"]
    assert envelope["run"]["jobs"] == 3 and envelope["run"]["concurrency"]["max_jobs"] == 3
    assert "--jobs auto: " in ran.stderr and "(start)" in ran.stderr
    resumed = cli(["resume", run_id, "--format", "json"], cwd=repo)
    assert resumed.exit_code == 0, resumed.output
    again = json.loads(resumed.stdout)["run"]["concurrency"]
    assert again["max_jobs"] == 3 and [c["why"] for c in again["levels"]].count("start (at most 3)") == 2


class Recording:
    """An executor that only records what it is given (the scheduler's decisions are all this test looks at)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, int, int]] = []

    def submit(self, job: AttemptJob) -> None:
        self.submitted.append((job.task.id, job.attempt, job.try_number))

    def stop(self) -> None:
        raise AssertionError("nothing here stops the run")


def test_a_try_to_run_again_waits_for_room_under_the_level_like_any_attempt() -> None:
    spec = AttemptSpec("r", "s", "c", RepoSource("path", "/nowhere"), AgentRef("nop", AgentOptions()))
    jobs = [AttemptJob(spec, Task(id=f"t{i}", prompt="p", verify_commands=["true"]), 1) for i in range(6)]
    executor = Recording()
    level = AutoLevel(4, Clocked(), start=3, tuning=TUNING)
    scheduler = Scheduler(executor, iter(jobs), Budget(None), jobs=level, retry_errors=0)  # type: ignore[arg-type]
    scheduler.begin()
    assert [s[0] for s in executor.submitted] == ["t0", "t1", "t2"]  # the level's worth, nothing queued ahead
    scheduler.rate_limits = lambda: 1  # the gateway saw a 429 with 3 running
    scheduler.tick()
    assert level.level == 2
    limited = error_result(jobs[0], ErrorCategory.PROVIDER_RATE_LIMIT, "rate limited (HTTP 429)", worker=None)
    scheduler.finished(limited)
    assert scheduler.retried(jobs[0], limited)  # --retry-errors 0: under --jobs auto a 429 runs again anyway
    assert len(executor.submitted) == 3  # but not yet: two still run, as many as the level allows
    done = error_result(jobs[1], ErrorCategory.CRASHED, "recorded", worker=None)
    scheduler.finished(done)
    assert not scheduler.retried(jobs[1], done)
    scheduler.recorded()
    assert executor.submitted[3] == ("t0", 1, 2)  # room for one: the try waiting goes first
    assert scheduler.retry_reasons(jobs[0]) == ["rate limited (HTTP 429)"]
