"""The cost of running an attempt in a container, side by side with the same attempt under bubblewrap.

One run of each, on the same small repository, with the same suite (TASKS tasks x ATTEMPTS attempts, a command
agent that runs `true`, one `true` verify command) at --jobs 1: once with the sandbox on (bubblewrap) and once with
`environment.image` set to the example base image (every command a `podman run --rm`, or docker with --runtime).
Each attempt starts two programs (the agent and the verify command), so a container attempt is two container starts
plus the harness's own work. Printed per attempt: wall time, and CPU time in two views: what worktrial and its
children used (getrusage; a container runtime's monitor, e.g. conmon, double-forks out of that tree) and what the
whole machine used meanwhile (/proc/stat; includes anything else running, so run it on a quiet machine). A plain
`run --rm IMAGE true` loop gives the runtime's own floor.

    .venv/bin/python benchmarks/container_start.py                 # podman, 10 tasks x 2 attempts
    .venv/bin/python benchmarks/container_start.py --runtime docker --tasks 20
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "localhost/worktrial-base:busybox"


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent (user, nice, system, irq, softirq), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / ticks


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall, children CPU, machine CPU) seconds of one command."""
    cpu0, mcpu0, t0 = children_cpu(), machine_cpu(), time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, children_cpu() - cpu0, machine_cpu() - mcpu0


def make_workspace(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for i in range(50):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "files"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def make_suite(root: Path, name: str, tasks: int, attempts: int, image: str | None) -> Path:
    data: dict[str, object] = {
        "id": name,
        "attempts": attempts,
        "tasks": [{"id": f"t{i}", "prompt": "nothing", "verify_commands": ["true"]} for i in range(tasks)],
    }
    if image is not None:
        data["environment"] = {"image": image, "workdir": "/app"}
    path = root / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=["podman", "docker"], default="podman")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--attempts", type=int, default=2)
    args = parser.parse_args()
    if shutil.which(args.runtime) is None:
        sys.exit(f"{args.runtime} is not installed (make containers installs podman)")
    subprocess.run([str(ROOT / "examples" / "harbor" / "build-base-image.sh"), args.runtime, BASE_IMAGE], check=True)
    n = args.tasks * args.attempts
    with tempfile.TemporaryDirectory(prefix="worktrial-bench-") as tmp:
        root = Path(tmp)
        repo = make_workspace(root)
        env = {**os.environ, "WORKTRIAL_CACHE_DIR": str(root / "cache"), "WORKTRIAL_CONFIG_DIR": str(root / "cfg")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
        common = ["--agent-cmd", "true", "--trust", "--jobs", "1", "--format", "json", "--quiet"]
        worktrial = [sys.executable, "-m", "worktrial"]
        rows = []
        plain = make_suite(root, "bubblewrap", args.tasks, args.attempts, None)
        boxed = make_suite(root, "container", args.tasks, args.attempts, BASE_IMAGE)
        for label, suite, extra in (
            ("bubblewrap (--sandbox on)", plain, ["--sandbox", "on"]),
            (f"container ({args.runtime})", boxed, ["--runtime", args.runtime]),
        ):
            wall, cpu, mcpu = measure([*worktrial, "eval", "--suite", str(suite), *common, *extra], repo, env)
            rows.append((label, wall / n, cpu / n, mcpu / n))
        starts = 10
        probe = [args.runtime, "run", "--rm", "--network", "none"]
        if args.runtime == "podman":  # the options this machine's probe chose (see the run's warnings)
            probe += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        wall = cpu = mcpu = 0.0
        for _ in range(starts):
            w, c, m = measure([*probe, BASE_IMAGE, "true"], root, env)
            wall, cpu, mcpu = wall + w, cpu + c, mcpu + m
        rows.append((f"`{args.runtime} run --rm` alone (per start)", wall / starts, cpu / starts, mcpu / starts))
    print(f"{args.tasks} tasks x {args.attempts} attempts, --jobs 1, agent `true`, one `true` verify command")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end")
    print()
    print("| run | wall per attempt | CPU per attempt (worktrial + children) | machine CPU per attempt |")
    print("|---|---:|---:|---:|")
    for label, wall, cpu, mcpu in rows:
        print(f"| {label} | {wall * 1000:.0f} ms | {cpu * 1000:.0f} ms | {mcpu * 1000:.0f} ms |")
    base, box = rows[0], rows[1]
    print()
    print(
        f"container start cost per attempt: {(box[1] - base[1]) * 1000:.0f} ms wall, "
        f"{(box[3] - base[3]) * 1000:.0f} ms machine CPU over bubblewrap"
    )


if __name__ == "__main__":
    main()
