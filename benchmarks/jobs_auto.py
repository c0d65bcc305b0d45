"""``--jobs auto`` on this machine with a real CPU hog started mid-run: the level goes down, then comes back.

Runs ``worktrial eval --jobs auto`` on a suite of attempts whose agent waits (``sleep``, as an agent waiting on its
model does), prints every change of the level as progress reports it (with the seconds since the start), the
machine's CPU pressure every few seconds, and when the hog (one busy loop per core, twice over) starts and stops;
ends the run (SIGTERM: the partial envelope is still written) once it had time to come back, and prints the level
before, during and after the hog from the envelope's ``run.concurrency``.

    .venv/bin/python benchmarks/jobs_auto.py                      # hog from 45 s to 90 s, run ended at 180 s
    .venv/bin/python benchmarks/jobs_auto.py --hog-at 30 --hog-for 30 --end-at 120 --max-jobs 6

CPU pressure is Linux's ``/proc/pressure/cpu`` (``some avg10``, percent of the last 10 s in which a runnable task
waited for a CPU); on a machine already loaded by others it is high before the hog too, and the level stays low.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# jobs auto\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "r"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def cpu_pressure() -> float | None:
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


class Hog:
    """Busy loops, ``count`` of them, until stopped."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        loop = "while True: pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(self.count)]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-jobs", type=int, default=8)
    parser.add_argument("--agent-secs", type=float, default=5.0, help="how long each attempt's agent waits")
    parser.add_argument("--hog-at", type=float, default=45.0, help="seconds after the start")
    parser.add_argument("--hog-for", type=float, default=45.0)
    parser.add_argument("--end-at", type=float, default=180.0, help="the run is ended then if still running")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores, load average {os.getloadavg()[0]:.2f}, CPU pressure {cpu_pressure()}%")
    attempts = int(args.end_at / args.agent_secs * args.max_jobs) + 10  # more than can finish before the end
    hog = Hog(2 * cores)
    with tempfile.TemporaryDirectory(prefix="worktrial-jobs-auto-") as tmp:
        root = Path(tmp)
        repo = make_repo(root)
        suite = root / "suite.json"
        tasks = [{"id": "wait", "prompt": "wait", "verify_commands": ["true"]}]
        suite.write_text(json.dumps({"id": "jobs-auto", "attempts": attempts, "tasks": tasks}))
        env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(root / "config")}
        argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd",
                f"sleep {args.agent_secs:g}", "--jobs", "auto", "--max-jobs", str(args.max_jobs), "--format", "json",
                "--output", str(root / "envelope.json")]  # fmt: skip
        began = time.monotonic()
        run = subprocess.Popen(argv, cwd=repo, env=env, stderr=subprocess.PIPE, text=True)
        stop = threading.Event()

        def stamp() -> str:
            return f"{time.monotonic() - began:6.1f}s"

        def sample() -> None:
            while not stop.wait(5.0):
                print(f"{stamp()}  CPU pressure {cpu_pressure()}%, load {os.getloadavg()[0]:.2f}", flush=True)

        def read() -> None:
            assert run.stderr is not None
            for line in run.stderr:
                if "--jobs auto" in line:
                    print(f"{stamp()}  {line.strip().removeprefix('worktrial: ')}", flush=True)

        threads = [threading.Thread(target=sample, daemon=True), threading.Thread(target=read, daemon=True)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(args.hog_at)
            print(f"{stamp()}  hog: {hog.count} busy loops start", flush=True)
            hog_on = datetime.now(UTC)
            hog.start()
            time.sleep(args.hog_for)
            hog.stop()
            hog_off = datetime.now(UTC)
            print(f"{stamp()}  hog: stopped", flush=True)
            deadline = began + args.end_at
            while run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            if run.poll() is None:
                print(f"{stamp()}  ending the run (SIGTERM)", flush=True)
                run.send_signal(signal.SIGTERM)
            run.wait()
        finally:
            hog.stop()
            stop.set()
            if run.poll() is None:
                run.kill()
        threads[1].join(timeout=10)
        envelope = json.loads((root / "envelope.json").read_text())
    concurrency = envelope["run"]["concurrency"]
    timeline: list[tuple[datetime, int]] = [
        (datetime.fromisoformat(c["at"].replace("Z", "+00:00")), int(c["level"])) for c in concurrency["levels"]
    ]

    def level_at(t: datetime) -> int:
        return ([level for at, level in timeline if at <= t] or [timeline[0][1]])[-1]

    during = [level for at, level in timeline if hog_on <= at <= hog_off] or [level_at(hog_on)]
    after = [level for at, level in timeline if at > hog_off] or [level_at(hog_off)]
    done = sum(len(t["attempts"]) for t in envelope["report"]["tasks"])
    print(f"\n{done} attempts finished; {len(timeline)} levels recorded in run.concurrency (max {args.max_jobs})")
    print(f"level when the hog started: {level_at(hog_on)}; lowest while it ran: {min(during)}; "
          f"highest after it stopped: {max(after)} (last: {timeline[-1][1]})")  # fmt: skip
    print("target: the level goes down while the hog runs and comes back after it stops")


if __name__ == "__main__":
    main()
