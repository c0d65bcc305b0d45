"""What following every process of an attempt costs, side by side with running it untracked.

1. Per process: ``proc.run(["true"])`` tracked (sampler, stop-collect-kill sweep at the end) against the same call
   untracked (``sweep=False``: only the process group is signalled). The difference is the end-of-process sweep.
2. While a process runs: the harness's own CPU time (user + system) over a 5-second ``sleep``, tracked and
   untracked. The difference is the sampler, one pass over the process table every ``SAMPLE_SECS``.

Both depend on how many processes the machine has; the figure is printed with the results.

    .venv/bin/python benchmarks/containment.py
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time

import psutil

from worktrial.isolation import proc
from worktrial.isolation.tracking import SAMPLE_SECS, enable_subreaper

RUNS = 40
SLEEP_SECS = 5.0


def per_process(sweep: bool, cwd: str) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        proc.run(["true"], cwd=cwd, sweep=sweep)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def cpu_while_running(sweep: bool, cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF)
    proc.run(["sleep", str(SLEEP_SECS)], cwd=cwd, sweep=sweep)
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used / SLEEP_SECS * 100


def main() -> None:
    enable_subreaper()
    with tempfile.TemporaryDirectory() as cwd:
        print(f"processes on this machine: {len(psutil.pids())}; sampler interval {SAMPLE_SECS}s")
        untracked, tracked = per_process(False, cwd), per_process(True, cwd)
        print(f"{'':32} {'untracked':>10} {'tracked':>10}")
        print(f"{'ms per `true` (median of ' + str(RUNS) + ')':32} {untracked:10.1f} {tracked:10.1f}")
        idle, sampled = cpu_while_running(False, cwd), cpu_while_running(True, cwd)
        print(f"{'harness CPU % during a sleep':32} {idle:10.2f} {sampled:10.2f}")


if __name__ == "__main__":
    main()
