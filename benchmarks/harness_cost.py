"""What the harness itself costs, in agent time, in run length and at start-up, beside a baseline (issue #40).

Every figure is CPU time (user + system of the worktrial process and of every process it waited for), because
wall time on a shared machine swings with its load:

1. **Agent time.** Harness CPU per attempt for a command agent that sleeps 3 s, beside the same agent sleeping 0 s
   and the in-process nop agent: sandbox on, ``--jobs 1``, verify ``true``, each attempt timed from inside the
   process, the first attempt (which builds the slot) left out, the median of the rest. The sleeping and the
   non-sleeping attempts are two tasks of one run, so they alternate under the same load, and the cost per second
   the agent runs is the median of their differences, attempt by attempt, over 3. Targets: sleep 3 costs at most
   nop + 10 ms, and at most 1 ms per second the agent runs.
2. **Run length.** Memory over 5,000 nop attempts (2,500 tasks x 2, ``--jobs 2``): the process's RSS after every
   1,000th attempt (after a garbage collection, from ``/proc/self/status``), and the growth per 1,000 attempts from
   the 1,000th to the last. Target: at most 0.5 MB per 1,000 attempts. RSS moves in steps that are not per attempt
   (a table of the interpreter's doubling once, an allocator's arena), so Python's own count of allocated blocks
   (``sys.getallocatedblocks``) is printed beside it: it grows with every object kept per attempt, and only then.
3. **Start-up.** ``eval`` of one nop attempt from start to report (the whole process tree), and ``worktrial --help``
   and ``--version``: median of five. Targets: 0.6 s and 0.3 s.

With ``--baseline-ref REF`` the same measurements run on that commit's ``src/`` (taken with ``git archive`` into a
temporary directory, so no worktree is registered), alternating baseline and this checkout run by run so that both
see the same load, and the two columns print side by side. The machine's load average is printed before and after.

    .venv/bin/python benchmarks/harness_cost.py                        # this checkout only
    .venv/bin/python benchmarks/harness_cost.py --baseline-ref main    # beside main
    .venv/bin/python benchmarks/harness_cost.py --quick                # 1,000 + 1,000 attempts for memory
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent.parent
T = TypeVar("T")
FILES = 100
NOP_ATTEMPTS = 11
SLEEP_SECS = 3
SLEEP_ATTEMPTS = 8
SLEEPER = f'if [ "$WORKTRIAL_TASK_ID" = long ]; then sleep {SLEEP_SECS}; else sleep 0; fi'
"""One agent command for both tasks of the agent-time run: task ``long`` sleeps, task ``short`` does not."""
STARTUP_REPEATS = 5

# Runs worktrial with each finished attempt timed from inside: CPU (the process's own, all threads, plus the
# children it reaped meanwhile) and, after the attempts named in MARKS, the RSS after a garbage collection.
_PROBE = """
import gc, json, os, resource, sys, threading, time
import worktrial.engine.local as local
real = local.run_attempt
out = open(sys.argv[1], "a")
marks = {int(m) for m in os.environ.get("BENCH_MARKS", "").split(",") if m}
done = [0]
lock = threading.Lock()
def rss_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024
def timed(*args, **kwargs):
    before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    try:
        return real(*args, **kwargs)
    finally:
        after = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
        with lock:
            done[0] += 1
            row = {"cpu": cpu, "task": getattr(getattr(args[1], "task", None), "id", None)}
            if done[0] in marks:
                gc.collect()
                row["rss"] = rss_mb()
                row["blocks"] = sys.getallocatedblocks()
                row["n"] = done[0]
            out.write(json.dumps(row) + "\\n"); out.flush()
local.run_attempt = timed
from worktrial.cli import entry
sys.argv = ["worktrial", *sys.argv[2:]]
entry()
"""


def make_repo(root: Path, files: int = FILES) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for i in range(files):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "files"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def suite(root: Path, tasks: int, attempts: int) -> Path:
    path = root / f"suite-{tasks}x{attempts}.json"
    items = [{"id": f"t{i}", "prompt": "nothing", "verify_commands": ["true"]} for i in range(tasks)]
    path.write_text(json.dumps({"id": "cost", "attempts": attempts, "tasks": items}))
    return path


def baseline_source(ref: str, into: Path) -> Path:
    """``src/`` of ``ref`` in this repository, extracted (no worktree is registered)."""
    archive = subprocess.run(["git", "archive", ref, "src"], cwd=HERE, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def cpu_of(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """CPU seconds of one command and every process it waited for."""
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    assert child.stderr is not None
    errors = child.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{errors}")
    return usage.ru_utime + usage.ru_stime


class Bench:
    def __init__(self, root: Path, sources: dict[str, Path]) -> None:
        self.root = root
        self.sources = sources
        self.repo = make_repo(root)
        self._runs = 0

    def env(self, label: str, **extra: str) -> dict[str, str]:
        # Byte-code is written and used, as by an installed worktrial: with PYTHONDONTWRITEBYTECODE every run would
        # compile the modules a checkout changed from source, which costs the changed side hundreds of ms.
        inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        return {
            **inherited,
            "PYTHONPATH": str(self.sources[label]),
            "WORKTRIAL_TRUST": "1",
            "WORKTRIAL_CONFIG_DIR": str(self.root / f"config-{label}"),
            "WORKTRIAL_CACHE_DIR": str(self.root / f"cache-{label}"),
            **extra,
        }

    def rows(self, label: str, args: list[str], marks: str = "") -> list[dict[str, Any]]:
        self._runs += 1
        figures = self.root / f"figures-{self._runs}.jsonl"
        argv = [sys.executable, "-c", _PROBE, str(figures), "eval", *args, "-q", "--format", "json",
                "--output", os.devnull]  # fmt: skip
        cpu_of(argv, self.repo, self.env(label, BENCH_MARKS=marks))
        return [json.loads(line) for line in figures.read_text().splitlines()]

    def nop(self, label: str) -> list[float]:
        """CPU ms of each nop attempt after the first."""
        path = suite(self.root, 1, NOP_ATTEMPTS)
        rows = self.rows(label, ["--suite", str(path), "--agent", "nop", "--jobs", "1", "--sandbox", "on"])
        return [r["cpu"] * 1000 for r in rows[1:]]

    def sleepers(self, label: str) -> list[tuple[float, float]]:
        """(CPU ms of the ``short`` attempt, of the ``long`` one) of each attempt number after the first: the two
        tasks alternate in one run (short #1, long #1, short #2, ...), so each pair saw the same load."""
        path = self.root / "sleepers.json"
        tasks = [{"id": name, "prompt": "sleep or not", "verify_commands": ["true"]} for name in ("short", "long")]
        path.write_text(json.dumps({"id": "sleepers", "attempts": SLEEP_ATTEMPTS, "tasks": tasks}))
        rows = self.rows(label, ["--suite", str(path), "--agent-cmd", SLEEPER, "--jobs", "1", "--sandbox", "on"])
        short = [r["cpu"] * 1000 for r in rows if r["task"] == "short"]
        long = [r["cpu"] * 1000 for r in rows if r["task"] == "long"]
        return list(zip(short, long, strict=True))[1:]  # the first short attempt builds the slot

    def memory(self, label: str, marks: list[int]) -> dict[int, tuple[float, int]]:
        """(RSS MB, Python's allocated blocks) after each attempt in ``marks`` of one nop run at --jobs 2."""
        path = suite(self.root, marks[-1] // 2, 2)
        args = ["--suite", str(path), "--agent", "nop", "--jobs", "2"]
        rows = self.rows(label, args, marks=",".join(map(str, marks)))
        return {int(r["n"]): (r["rss"], int(r["blocks"])) for r in rows if "rss" in r}

    def startup(self, label: str, what: str) -> list[float]:
        env = self.env(label)
        if what == "eval":
            argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite(self.root, 1, 1)), "--agent",
                    "nop", "-q", "--format", "json", "--output", os.devnull]  # fmt: skip
        else:
            argv = [sys.executable, "-m", "worktrial", what]
        return [cpu_of(argv, self.repo, env) * 1000]


def alternate(labels: list[str], rounds: int, measure: Callable[[str], list[T]]) -> dict[str, list[T]]:
    """Run ``measure`` for each label in turn, ``rounds`` times, in an order that gives each label the same share of
    early and late runs (a b, b a, ...)."""
    found: dict[str, list[T]] = {label: [] for label in labels}
    for i in range(rounds):
        for label in labels if i % 2 == 0 else list(reversed(labels)):
            found[label] += measure(label)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-ref", help="a git ref of this repository to measure beside this checkout")
    parser.add_argument("--quick", action="store_true", help="memory over 2,000 attempts instead of 5,000")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: agent, memory, startup")
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="worktrial-cost-") as tmp:
        root = Path(tmp)
        sources = {"this checkout": HERE / "src"}
        if args.baseline_ref:
            commit = subprocess.run(["git", "rev-parse", "--short", args.baseline_ref], cwd=HERE, check=True,
                                    capture_output=True, text=True).stdout.strip()  # fmt: skip
            sources = {f"{args.baseline_ref} ({commit})": baseline_source(args.baseline_ref, root / "baseline")}
            sources["this checkout"] = HERE / "src"
        labels = list(sources)
        bench = Bench(root, sources)
        for label in labels:  # compiles each source's byte-code once, outside every figure
            bench.startup(label, "eval")
        width = 30
        header = f"{'':46}" + "".join(f"{label:>{width}}" for label in labels)

        def line(name: str, values: dict[str, str]) -> None:
            print(f"{name:46}" + "".join(f"{values[label]:>{width}}" for label in labels), flush=True)

        if "agent" not in skip:
            print("\nharness CPU per attempt, ms (sandbox on, --jobs 1, verify `true`; median after the first)")
            print(header)
            nop = {label: statistics.median(v) for label, v in alternate(labels, 2, bench.nop).items()}
            pairs = alternate(labels, 2, lambda label: [bench.sleepers(label)])
            flat = {label: [pair for run in runs for pair in run] for label, runs in pairs.items()}
            short = {label: statistics.median(s for s, _ in flat[label]) for label in labels}
            long = {label: statistics.median(g for _, g in flat[label]) for label in labels}
            line("nop", {label: f"{nop[label]:.1f}" for label in labels})
            line("agent command, sleep 0", {label: f"{short[label]:.1f}" for label in labels})
            line(f"agent command, sleep {SLEEP_SECS}", {label: f"{long[label]:.1f}" for label in labels})
            line(f"sleep {SLEEP_SECS} - nop (target <= 10)", {
                label: f"{long[label] - nop[label]:+.1f}" for label in labels})  # fmt: skip
            line("per agent-second, paired (target <= 1)", {
                label: f"{statistics.median((g - s) / SLEEP_SECS for s, g in flat[label]):+.2f}"
                for label in labels})  # fmt: skip
        if "memory" not in skip:
            marks = [1_000, 2_000] if args.quick else [1_000, 2_000, 3_000, 4_000, 5_000]
            first, last = marks[0], marks[-1]
            print(f"\nmemory over {last:,} nop attempts (--jobs 2), after each 1,000th attempt")
            print(header)
            figures = {label: bench.memory(label, marks) for label in labels}
            for mark in marks:
                line(f"RSS MB after {mark:,}", {label: f"{figures[label][mark][0]:.1f}" for label in labels})
            thousands = (last - first) / 1000
            line(f"RSS growth per 1,000, {first:,} to {last:,} (<= 0.5)", {
                label: f"{(f[last][0] - f[first][0]) / thousands:+.2f}" for label, f in figures.items()})  # fmt: skip
            line("Python allocated blocks per 1,000", {
                label: f"{(f[last][1] - f[first][1]) / thousands:+,.0f}" for label, f in figures.items()})  # fmt: skip
        if "startup" not in skip:
            print(f"\nstart-up, CPU ms of the whole process tree (median of {STARTUP_REPEATS})")
            print(header)
            for what, name in (("eval", "eval of one nop attempt (target <= 600)"), ("--help", "worktrial --help "
                               "(target <= 300)"), ("--version", "worktrial --version")):  # fmt: skip
                found = alternate(labels, STARTUP_REPEATS, functools.partial(bench.startup, what=what))
                line(name, {label: f"{statistics.median(v):.0f}" for label, v in found.items()})
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
