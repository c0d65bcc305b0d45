"""Harness overhead per attempt, side by side with a plain `git worktree add` + `remove` loop.

Builds git repositories of about 1,000 and 10,000 files, runs a suite of 100 tasks x 2 attempts with the
`nop` agent and a `true` verify command at --jobs 1 and --jobs 2, and prints attempts per second,
overhead per attempt (wall time / attempts: the agent does nothing, so all of it is the harness), and
peak RSS of the worktrial process; then the same per-iteration figures for the plain shell loop on the
same repository. Finally peak RSS at 200 and at 5,000 attempts (more tasks, or more attempts per task),
to show memory stays flat. worktrial runs with the sandbox off and on (bubblewrap, every verify command of every
attempt inside it, on a network of its own through slirp4netns, as an unprivileged uid when run as root), so the
sandbox's own cost per attempt is the difference of the two rows; a third row runs the sandbox on the host's
network (`--network host`), so the cost of the attempt's own network is the difference of the last two.

CPU per attempt (first table): user + system CPU of the worktrial process and all its children, per attempt, at
100 / 1,000 / 10,000 / 50,000 files, for a nop agent, an agent that appends to one file and one that writes 1,000 new
files, with overlay rooms (the default with bubblewrap) and with the copying path (``WORKTRIAL_OVERLAY=off``), side
by side with the plain ``git worktree add/remove`` loop and the overlay floor (mount an overlay in a new mount
namespace, write one file, discard the upper directory). Each attempt is timed from inside the worktrial process
(its own CPU, all threads, plus what its children used during the attempt); the first attempt, which builds the
slot (a checkout of the whole repository, once per run), is left out and the median of the other ten printed.
CPU, not wall time, because wall times swing with the machine's load.

The ratio of one changed file to a nop attempt (``--ratio``): the nop, the agent command changing nothing and the
one changed file rows at 100 and 50,000 files, for this checkout and for a baseline git ref (``--baseline REF``,
default the merge base with ``int``, else ``main``), run alternately, round after round, so both see the same load;
each cell is the median of the rounds' medians.

    .venv/bin/python benchmarks/overhead.py            # everything (several minutes)
    .venv/bin/python benchmarks/overhead.py --quick    # skip the 5,000-attempt memory run
    .venv/bin/python benchmarks/overhead.py --cpu-only # only the CPU table and the start-up figures
    .venv/bin/python benchmarks/overhead.py --ratio --baseline b4792d5 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = 100
ATTEMPTS = 2
LOOP_ITERATIONS = {1_000: 40, 10_000: 15}
MODES = {"off": ("off", "host"), "on": ("on", "on"), "on-host": ("on", "host")}
"""Row label -> (--sandbox, --network): no sandbox, the default sandbox, the sandbox on the host's network."""


def make_repo(root: Path, files: int) -> Path:
    repo = root / f"repo-{files}"
    repo.mkdir(parents=True)
    for i in range(files):
        d = repo / f"d{i % 100:02d}" / f"s{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"{'x' * 200}{i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "files"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def make_suite(root: Path, tasks: int, attempts: int) -> Path:
    suite = root / f"suite-{tasks}x{attempts}.json"
    data = {
        "id": "overhead",
        "attempts": attempts,
        "tasks": [{"id": f"t{i}", "prompt": "nothing", "verify_commands": ["true"]} for i in range(tasks)],
    }
    suite.write_text(json.dumps(data))
    return suite


def run_worktrial(
    repo: Path, suite: Path, jobs: int, config_dir: Path, sandbox: str = "on", network: str = "on"
) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one `worktrial eval` process."""
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(config_dir)}
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent", "nop",
            "--jobs", str(jobs), "-q", "--format", "json", "--output", os.devnull, "--sandbox", sandbox]  # fmt: skip
    argv += ["--network", network if sandbox == "on" else "host"]
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=repo, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"worktrial failed on {repo}")
    return wall, usage.ru_maxrss / 1024


def run_plain_loop(repo: Path, iterations: int) -> tuple[float, float]:
    """Seconds per `git worktree add` + `git worktree remove`, and the loop's peak RSS (MB)."""
    script = (
        f'for i in $(seq {iterations}); do git worktree add -q --detach "$WT/w$i" HEAD && '
        'git worktree remove --force "$WT/w$i"; done'
    )
    with tempfile.TemporaryDirectory() as wt:
        start = time.perf_counter()
        child = subprocess.Popen(["sh", "-c", script], cwd=repo, env={**os.environ, "WT": wt})
        # wait4 reports this child's own tree, not every child this benchmark ever waited for.
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the plain git worktree loop failed on {repo}")
    return wall / iterations, usage.ru_maxrss / 1024


CPU_SIZES = (100, 1_000, 10_000, 50_000)
CPU_ATTEMPTS = 11
AGENTS = {
    "nop": ["--agent", "nop"],
    # The same agent command as the two below, changing nothing: what starting a sandboxed program costs, so that
    # the rows below it show what the change itself costs.
    "command, no change": ["--agent-cmd", "true"],
    "1 changed file": ["--agent-cmd", "sh -c 'echo more >> d00/s0/f0.txt'"],
    "1,000 new files": [
        "--agent-cmd",
        'awk \'BEGIN { system("mkdir -p gen"); for (i = 0; i < 1000; i++) { f = "gen/f" i; print i > f; close(f) } }\'',
    ],
}
PATHS = {"overlay": "on", "copying": "off"}


def _cpu_of(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the process and all it waited for, wall seconds) of one command."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return usage.ru_utime + usage.ru_stime, wall


# Runs worktrial in a child process with each attempt timed from inside: CPU (the process's own, all threads, plus
# the children it reaped during the attempt) and wall, written one line per attempt. The first attempt of a slot
# builds it (a checkout of the whole repository, once per run): it is left out, and the median of the rest taken.
_TIMED = """
import json, os, resource, sys, time
import worktrial.engine.local as local
real = local.run_attempt
out = open(sys.argv[1], "a")
def timed(*args, **kwargs):
    before = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    wall = time.perf_counter()
    try:
        return real(*args, **kwargs)
    finally:
        after = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
        out.write(json.dumps([cpu, time.perf_counter() - wall]) + "\\n"); out.flush()
local.run_attempt = timed
from worktrial.cli import entry
sys.argv = ["worktrial", *sys.argv[2:]]
entry()
"""


def cpu_per_attempt(
    repo: Path, root: Path, agent: list[str], overlay: str, config: Path, src: Path | None = None
) -> tuple[float, float]:
    """Median CPU and wall ms per attempt after the first (sandbox on, --jobs 1, verify ``true``); ``src``: the
    worktrial source tree to run (default: the one installed)."""
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(config), "WORKTRIAL_OVERLAY": overlay}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH", "")]))
    suite = root / "cpu-suite.json"
    suite.write_text(json.dumps({"id": "cpu", "attempts": CPU_ATTEMPTS, "tasks": [
        {"id": "t", "prompt": "nothing", "verify_commands": ["true"]}]}))  # fmt: skip
    figures = root / f"figures-{time.monotonic_ns()}.jsonl"
    argv = [sys.executable, "-c", _TIMED, str(figures), "eval", "--suite", str(suite), *agent, "--jobs", "1", "-q",
            "--format", "json", "--output", os.devnull, "--sandbox", "on"]  # fmt: skip
    _cpu_of(argv, repo, env)
    rows = [json.loads(line) for line in figures.read_text().splitlines()][1:]
    cpu = sorted(r[0] for r in rows)[len(rows) // 2]
    wall = sorted(r[1] for r in rows)[len(rows) // 2]
    return cpu * 1000, wall * 1000


def plain_loop_cpu(repo: Path, iterations: int = 0) -> float:
    iterations = iterations or (10 if sum(1 for _ in repo.glob("d00/s0/*")) < 50 else 3)  # 3 at 50,000 files
    script = (
        f'for i in $(seq {iterations}); do git worktree add -q --detach "$WT/w$i" HEAD && '
        'git worktree remove --force "$WT/w$i"; done'
    )
    with tempfile.TemporaryDirectory() as wt:
        cpu, _ = _cpu_of(["sh", "-c", script], repo, {**os.environ, "WT": wt})
    return cpu / iterations * 1000


def overlay_floor_cpu(repo: Path, iterations: int = 20) -> float:
    """CPU ms of the isolation floor: an overlay of the repository mounted in a new mount namespace (a user
    namespace too when not root), one file written through it, the upper directory discarded."""
    ns = "--mount" if os.geteuid() == 0 else "--user --map-root-user --mount"
    script = (
        f'for i in $(seq {iterations}); do mkdir "$T/u" "$T/w" "$T/m" && unshare {ns} --propagation private '
        f'sh -c \'mount -t overlay overlay -o "lowerdir=$0,upperdir=$1/u,workdir=$1/w" "$1/m" && echo x > "$1/m/new"\' '
        '"$R" "$T" && rm -rf "$T/u" "$T/w" "$T/m"; done'
    )
    with tempfile.TemporaryDirectory() as tmp:
        cpu, _ = _cpu_of(["sh", "-c", script], repo, {**os.environ, "T": tmp, "R": str(repo)})
    return cpu / iterations * 1000


def startup_figures(root: Path, repo: Path, config: Path) -> None:
    # Byte-code written and used, as by an installed worktrial (PYTHONDONTWRITEBYTECODE would compile from source).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(config)}
    cpu, _ = _cpu_of([sys.executable, "-m", "worktrial", "--version"], root, env)
    print(f"worktrial --version: {cpu * 1000:.0f} ms CPU (target <= 300)")
    suite = root / "one.json"
    suite.write_text(json.dumps({"id": "one", "tasks": [{"id": "t", "prompt": "p", "verify_commands": ["true"]}]}))
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent", "nop", "-q",
            "--format", "json", "--output", os.devnull]  # fmt: skip
    _cpu_of(argv, repo, env)  # writes the byte-code of what eval imports
    cpu, _ = _cpu_of(argv, repo, env)
    print(f"eval of one nop attempt (sandbox on, 100 files), end to end: {cpu * 1000:.0f} ms CPU (target <= 600; "
          "benchmarks/harness_cost.py measures it beside a baseline)")  # fmt: skip


def cpu_table(root: Path, config: Path, sizes: tuple[int, ...]) -> None:
    print("CPU ms per attempt (wall ms in brackets); sandbox on, --jobs 1, verify `true`")
    columns = [f"{n:,} files" for n in sizes]
    print(f"{'':>34}" + "".join(f"{c:>26}" for c in columns))
    nop: dict[tuple[str, int], float] = {}
    idle: dict[tuple[str, int], float] = {}
    changed: dict[tuple[str, int], float] = {}
    rows: dict[str, list[str]] = {}
    repos = {n: make_repo(root, n) for n in sizes}
    for agent, args in AGENTS.items():
        for path, flag in PATHS.items():
            cells = []
            for n in sizes:
                cpu, wall = cpu_per_attempt(repos[n], root, args, flag, config)
                {"nop": nop, "command, no change": idle, "1 changed file": changed}.get(agent, {})[(path, n)] = cpu
                cells.append(f"{cpu:.0f} [{wall:.0f}]")
                if agent == "1,000 new files":
                    cells[-1] += f" {max(cpu - idle[(path, n)], 0) / 1000:.2f}/file"
            rows[f"{agent}, {path}"] = cells
            print(f"{agent + ', ' + path:>34}" + "".join(f"{c:>26}" for c in cells), flush=True)
    print(f"{'git worktree add+remove':>34}" + "".join(f"{plain_loop_cpu(repos[n]):>26.0f}" for n in sizes))
    print(f"{'floor: overlay mount + discard':>34}" + "".join(f"{overlay_floor_cpu(repos[n]):>26.0f}" for n in sizes))
    for path in PATHS:
        small, large = nop[(path, sizes[0])], nop[(path, sizes[-1])]
        print(
            f"nop, {path}: {sizes[-1]:,} files costs {large / max(small, 1e-9):.2f}x {sizes[0]:,} files (target <= 1.3)"
        )
    big = sizes[-1]
    for path in PATHS:
        one, none, zero = changed[(path, big)], idle[(path, big)], nop[(path, big)]
        print(f"1 changed file, {path}, {big:,} files: {one / max(none, 1e-9):.2f}x the same agent changing nothing, "
              f"{one / max(zero, 1e-9):.2f}x the in-process nop")  # fmt: skip
    print("targets (overlay): nop <= 40 ms at every size; 1 changed file <= 1.5x nop at 50,000 files; "
          "<= 0.5 ms per new file (over the agent changing nothing)")  # fmt: skip
    startup_figures(root, repos[sizes[0]], config)


RATIO_SIZES = (100, 50_000)
RATIO_AGENTS = ("nop", "command, no change", "1 changed file")


def checkout_of(ref: str, into: Path) -> Path:
    """The ``src`` directory of ``ref`` of this repository, exported (``git archive``) under ``into``."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "archive", "--format=tar", ref, "src"], cwd=repo, check=True, capture_output=True)
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def default_baseline() -> str:
    repo = Path(__file__).resolve().parent.parent
    for branch in ("int", "main"):
        found = subprocess.run(["git", "merge-base", "HEAD", branch], cwd=repo, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()[:12]
    raise SystemExit("no baseline: pass --baseline REF")


def ratio_table(root: Path, config: Path, baseline: str, rounds: int) -> None:
    """The changed-file and nop rows of this checkout and of ``baseline``, alternately, ``rounds`` times."""
    here = Path(__file__).resolve().parent.parent / "src"
    codes = {"this checkout": here, f"baseline {baseline}": checkout_of(baseline, root / "baseline")}
    repos = {n: make_repo(root, n) for n in RATIO_SIZES}
    found: dict[tuple[int, str, str], list[float]] = {}
    loads = [os.getloadavg()[0]]
    for number in range(1, rounds + 1):
        for n in RATIO_SIZES:
            for code, src in codes.items():
                for agent in RATIO_AGENTS:
                    cpu, _ = cpu_per_attempt(repos[n], root, AGENTS[agent], "on", config, src)
                    found.setdefault((n, code, agent), []).append(cpu)
        loads.append(os.getloadavg()[0])
        print(f"round {number} of {rounds} done, load average {loads[-1]:.2f}", flush=True)
    print(f"\nCPU ms per attempt, median of {rounds} rounds (each the median of 10 attempts), sandbox on, --jobs 1;")
    print(f"load average {min(loads):.2f}-{max(loads):.2f} over the run")
    head = f"{'files':>7} {'code':>24}" + "".join(f"{a:>20}" for a in RATIO_AGENTS) + f"{'changed / nop':>15}"
    print(head)
    print("-" * len(head))
    for n in RATIO_SIZES:
        for code in codes:
            cells = [sorted(found[(n, code, a)])[rounds // 2] for a in RATIO_AGENTS]
            print(f"{n:>7,} {code:>24}" + "".join(f"{c:>20.1f}" for c in cells) + f"{cells[2] / cells[0]:>14.2f}x")
    print("target: one changed file <= 1.5x a nop attempt at 100 and 50,000 files")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 5,000-attempt memory run")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU-per-attempt table and start-up figures")
    parser.add_argument("--sizes", default=",".join(map(str, CPU_SIZES)), help="repository sizes of the CPU table")
    parser.add_argument("--ratio", action="store_true", help="only the changed-file / nop ratio beside a baseline")
    parser.add_argument("--baseline", help="git ref of the baseline for --ratio (default: merge base with int/main)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of --ratio")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="worktrial-bench-") as tmp:
        root = Path(tmp)
        config = root / "config"
        if args.ratio:
            ratio_table(root / "ratio", config, args.baseline or default_baseline(), args.rounds)
            return
        cpu_table(root / "cpu", config, tuple(int(n) for n in args.sizes.split(",")))
        if args.cpu_only:
            return
        print()
        suite = make_suite(root, TASKS, ATTEMPTS)
        attempts = TASKS * ATTEMPTS
        header = f"{'repository':>12} {'runner':>24} {'attempts/s':>11} {'ms/attempt':>11} {'peak RSS MB':>12}"
        print(header)
        print("-" * len(header))
        results: dict[tuple[int, str], float] = {}
        for files, iterations in LOOP_ITERATIONS.items():
            repo = make_repo(root, files)
            for jobs, sandbox in ((j, m) for j in (1, 2) for m in MODES):
                wall, rss = run_worktrial(repo, suite, jobs, config, *MODES[sandbox])
                per = wall / attempts * 1000
                label = f"j{jobs}-{sandbox}"
                results[(files, label)] = per
                runner = f"--jobs {jobs} sandbox {sandbox}"
                print(f"{files:>12,} {runner:>24} {attempts / wall:>11.1f} {per:>11.1f} {rss:>12.1f}")
            per_loop, rss = run_plain_loop(repo, iterations)
            results[(files, "loop")] = per_loop * 1000
            print(f"{files:>12,} {'git worktree add+remove':>24} {1 / per_loop:>11.1f} {per_loop * 1000:>11.1f} "
                  f"{rss:>12.1f}")  # fmt: skip
        print()
        for files in LOOP_ITERATIONS:
            loop = results[(files, "loop")]
            for label in (f"j{j}-{m}" for j in (1, 2) for m in MODES):
                ratio = results[(files, label)] / loop
                jobs_text, mode = label[1], label.split("-", 1)[1]
                print(f"{files:>6,} files, --jobs {jobs_text}, sandbox {mode:>7}: {results[(files, label)]:.1f} "
                      f"ms/attempt = {ratio:.3f}x the plain loop")  # fmt: skip
            cost = results[(files, "j1-on")] - results[(files, "j1-off")]
            own_net = results[(files, "j1-on")] - results[(files, "j1-on-host")]
            print(f"{files:>6,} files: the sandbox adds {cost:.1f} ms per attempt at --jobs 1, of which its own "
                  f"network {own_net:.1f} ms")  # fmt: skip
        small, large = results[(1_000, "j1-on")], results[(10_000, "j1-on")]
        print(f"sandbox on, --jobs 1: 10,000 files costs {large / small:.2f}x what 1,000 files costs per attempt")
        print("targets: sandbox on <= 60 ms/attempt on 1,000 files and <= 0.03x the plain loop on 10,000 files")
        if not args.quick:
            print()
            repo = root / "repo-1000"
            _, rss_small = run_worktrial(repo, make_suite(root, 100, 2), 2, config)
            print(f"peak RSS at   200 attempts (100 tasks x 2):  {rss_small:.1f} MB")
            for tasks, attempts_each in ((2500, 2), (100, 50)):
                wall, rss = run_worktrial(repo, make_suite(root, tasks, attempts_each), 2, config)
                print(
                    f"peak RSS at 5,000 attempts ({tasks} tasks x {attempts_each}): {rss:.1f} MB, growth "
                    f"{rss - rss_small:.1f} MB ({5000 / wall:.1f} attempts/s)"
                )
            print("target: growth under 50 MB")


if __name__ == "__main__":
    main()
