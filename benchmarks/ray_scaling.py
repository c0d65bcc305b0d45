"""Scaling out on Ray: 80 attempts of an agent that sleeps 1 s (``--sleep``), local executor (4 jobs, ``--jobs``) vs
a 2-node Ray cluster with as many actors, side by side.

Prints, per executor: wall time of the attempt phase (from the run's first attempt being handed out to its last
result persisted: the driver's own startup, Ray connection and actor start are reported separately as "setup"),
per-attempt overhead over the 1 s sleep (phase time x jobs / attempts - 1 s), and efficiency = ideal time / phase
time, where ideal = attempts x 1 s / jobs. The Ray cluster runs contained in its own network and PID namespace
(tests/ray_cluster.py; needs root), and its start time is printed on its own line.

    .venv/bin/python benchmarks/ray_scaling.py             # 80 attempts (about 2 minutes with the cluster start)
    .venv/bin/python benchmarks/ray_scaling.py --attempts 40
    .venv/bin/python benchmarks/ray_scaling.py --sleep 10 --jobs 8     # issue 40's target: efficiency >= 0.9

It also prints the driver process's CPU time (user + system, with its children: for the local executor that
includes the attempts' own processes, for Ray only what the driver spends).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SLEEP_SECS = 1.0
JOBS = 4


def make_workspace(root: Path, attempts: int) -> tuple[Path, Path]:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("benchmark\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    tasks = attempts // 4
    suite = root / "suite.json"
    data = {
        "id": "ray-scaling",
        "attempts": 4,
        "tasks": [{"id": f"t{i}", "prompt": "sleep", "verify_commands": ["test -f done.txt"]} for i in range(tasks)],
    }
    suite.write_text(json.dumps(data))
    return repo, suite


def drive(suite: str, repo: str, executor: str, address: str | None, sleep: float, jobs: int) -> None:
    """Runs inside the cluster's namespaces: one run, timed by an observer; prints a JSON line."""
    sys.path.insert(0, str(ROOT / "src"))
    from worktrial.cli.executors import executor_factory
    from worktrial.engine.run import RunObserver, RunOptions, run_suite

    class Timer(RunObserver):
        first: float | None = None
        last: float | None = None
        done = 0

        def start(self, task_id: str, attempt: int) -> None:
            if self.first is None:
                self.first = time.perf_counter()

        def attempt(self, record: Any) -> None:
            self.done += 1
            self.last = time.perf_counter()

    began = time.perf_counter()
    timer = Timer()
    options = RunOptions(
        agent_cmd=f"sh -c 'sleep {sleep}; touch done.txt'",
        workspace=Path(repo),
        jobs=jobs,
        artifacts=False,
        executor=executor_factory(executor, address, 1.0, ()),
    )
    result = run_suite(suite, options, timer)
    ended = time.perf_counter()
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime for u in usage)
    assert timer.first is not None and timer.last is not None
    passed = sum(1 for t in result.envelope.report.tasks for a in t.attempts if a.outcome == "pass")
    print(
        json.dumps(
            {
                "attempts": timer.done,
                "passed": passed,
                "setup": timer.first - began,
                "phase": timer.last - timer.first,
                "total": ended - began,
                "cpu": cpu,
            }
        )
    )


def run_driver(
    cluster: Any, root: Path, suite: Path, repo: Path, executor: str, sleep: float, jobs: int
) -> dict[str, Any]:
    argv = [
        sys.executable,
        __file__,
        "--drive",
        str(suite),
        str(repo),
        executor,
        cluster.address,
        str(sleep),
        str(jobs),
    ]
    env = {**os.environ, "WORKTRIAL_CONFIG_DIR": str(root / "config"), "WORKTRIAL_CACHE_DIR": str(root / "cache")}
    done = cluster.run(argv, repo, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{executor} run failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=80)
    parser.add_argument("--sleep", type=float, default=SLEEP_SECS, help="seconds each agent sleeps (default 1)")
    parser.add_argument("--jobs", type=int, default=JOBS, help="threads, and Ray actors (default 4)")
    parser.add_argument("--drive", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        suite, repo, executor, address, sleep, jobs = args.drive
        drive(suite, repo, executor, address if executor == "ray" else None, float(sleep), int(jobs))
        return
    sleep, jobs = args.sleep, args.jobs
    cpus = max(2, -(-jobs // 2))  # each node offers half the actors a CPU each (the agents only sleep)
    sys.path.insert(0, str(ROOT))
    from tests.ray_cluster import ContainedCluster, Node, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise SystemExit(f"cannot run a contained Ray cluster here: {reason}")
    with tempfile.TemporaryDirectory(prefix="ray-scaling-") as tmp:
        root = Path(tmp)
        repo, suite = make_workspace(root, args.attempts)
        cluster = ContainedCluster([Node("head", cpus=cpus), Node("b", cpus=cpus)])
        try:
            cluster.start()
            print(f"cluster start (2 nodes, contained): {cluster.start_secs:.1f} s")
            figures = {name: run_driver(cluster, root, suite, repo, name, sleep, jobs) for name in ("local", "ray")}
        finally:
            cluster.stop()
    ideal = args.attempts * sleep / jobs
    print(f"{args.attempts} attempts x {sleep:g} s sleep, {jobs} jobs; ideal attempt phase {ideal:.1f} s")
    print(f"{'':28}{f'local ({jobs} threads)':>20}{f'ray (2 nodes, {jobs} actors)':>26}")
    labels = ["setup (connect, actors) s", "attempt phase wall s", "overhead / attempt ms", "efficiency (ideal/wall)"]
    labels += ["passed", "driver CPU s"]
    columns = [_cells(figures[name], ideal, sleep, jobs) for name in ("local", "ray")]
    for i, label in enumerate(labels):
        print(f"{label:28}{columns[0][i]:>20}{columns[1][i]:>26}")


def _cells(f: dict[str, Any], ideal: float, sleep: float, jobs: int) -> list[str]:
    overhead_ms = (f["phase"] * jobs / f["attempts"] - sleep) * 1000
    return [
        f"{f['setup']:.2f}",
        f"{f['phase']:.2f}",
        f"{overhead_ms:.0f}",
        f"{ideal / f['phase']:.3f}",
        f"{f['passed']}/{f['attempts']}",
        f"{f['cpu']:.2f}",
    ]


if __name__ == "__main__":
    main()
