"""The cost of a container attempt against a bare `run --rm` of the same image: target <= 1.2x CPU for a nop attempt.

An attempt of a container task starts one container of the task's image and runs its phases in it (setup, the
agent, the verifier in it or in one of its own). A nop agent runs no program: the attempt is its checkout, its
verifier (the container's only command, run as the container itself), and the harness's bookkeeping. This script
measures, at --jobs 1 on a small repository:

- `RUNTIME run --rm --network none IMAGE true` alone: the runtime's own floor, per start;
- worktrial's nop attempt of a suite task with `environment.image` (worktrial's fresh verifier room) and of a Harbor
  task (its verifier in the agent's container, Harbor's default), both with their network off as the floor's;
- a command agent `true` (one `exec` into the attempt's container, then the verifier) and a bubblewrap attempt,
  for scale.

CPU is what the measured command and every process it started used, the container runtime's included: this script
is the subreaper of everything below it and reaps every orphan (Podman's conmon double-forks out of the tree, and
the container's processes are its children), so their CPU lands in RUSAGE_CHILDREN. Per-attempt figures are
marginal: (a run of MANY attempts - a run of FEW) / (MANY - FEW), so a run's fixed costs (the runtime probe, image
inspection, the leftover sweep) do not count against an attempt. Wall time is printed beside it.

    .venv/bin/python benchmarks/container_start.py                 # podman, 3 and 13 attempts
    .venv/bin/python benchmarks/container_start.py --runtime docker --many 23
"""

from __future__ import annotations

import argparse
import ctypes
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
TARGET = 1.2
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("cannot become a subreaper: the runtime's processes would escape the CPU count")


def reap() -> None:
    """Wait for every orphan that ended (the runtime's monitors and their children), for their CPU to count."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def settle(seconds: float = 1.0) -> None:
    """Give detached monitors time to finish their cleanup, reaping as they end."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        reap()
        time.sleep(0.05)
    reap()


def measure(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU of it and everything it started) seconds of one command."""
    settle(0.3)
    cpu0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    settle()
    return wall, children_cpu() - cpu0


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    subprocess.run(["git", *args], cwd=repo, check=True, env=env)


def make_workspace(root: Path, files: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for i in range(files):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")
    return repo


def make_suite(root: Path, name: str, attempts: int, image: str | None) -> Path:
    data: dict[str, object] = {
        "id": name,
        "attempts": attempts,
        "tasks": [{"id": "t", "prompt": "nothing", "verify_commands": ["true"]}],
    }
    if image is not None:
        data["environment"] = {"image": image, "workdir": "/app", "network": "off"}
    path = root / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def make_harbor_task(root: Path) -> Path:
    task = root / "harbor" / "nothing"
    for sub in ("environment", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=["podman", "docker"], default="podman")
    parser.add_argument("--few", type=int, default=3, help="attempts of the smaller run")
    parser.add_argument("--many", type=int, default=13, help="attempts of the larger run")
    parser.add_argument("--starts", type=int, default=10, help="bare `run --rm` starts for the floor")
    args = parser.parse_args()
    if shutil.which(args.runtime) is None:
        sys.exit(f"{args.runtime} is not installed (make containers installs podman)")
    become_subreaper()
    subprocess.run([str(ROOT / "examples" / "harbor" / "build-base-image.sh"), args.runtime, BASE_IMAGE], check=True)
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="worktrial-bench-") as tmp:
        root = Path(tmp)
        repo = make_workspace(root, 50)
        empty = root / "empty"
        empty.mkdir()
        git(empty, "init", "-q")
        git(empty, "commit", "-q", "--allow-empty", "-m", "empty")
        env = {**os.environ, "WORKTRIAL_CACHE_DIR": str(root / "cache"), "WORKTRIAL_CONFIG_DIR": str(root / "cfg")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
        worktrial = [sys.executable, "-m", "worktrial", "eval", "--trust", "--jobs", "1", "--format", "json", "-q"]
        harbor = make_harbor_task(root)
        runs = [
            ("nop attempt, suite task (fresh verifier room)", "image", ["--agent", "nop"], repo),
            ("nop attempt, Harbor task (verifier in its container)", "harbor", ["--agent", "nop"], empty),
            ("command agent `true`, suite task (an exec, then the verifier)", "image", ["--agent-cmd", "true"], repo),
            ("nop attempt under bubblewrap (--sandbox on), no container", None, ["--agent", "nop"], repo),
        ]
        for label, kind, agent, ws in runs:
            figures = []
            for attempts in (args.few, args.many):
                if kind == "harbor":
                    suite, extra = harbor, ["--attempts", str(attempts), "--runtime", args.runtime]
                elif kind == "image":
                    suite = make_suite(root, f"c{attempts}", attempts, BASE_IMAGE)
                    extra = ["--runtime", args.runtime, "--network", "off"]
                else:
                    suite, extra = make_suite(root, f"b{attempts}", attempts, None), ["--sandbox", "on"]
                figures.append(measure([*worktrial, "--suite", str(suite), *agent, *extra], ws, env))
            (wall_few, cpu_few), (wall_many, cpu_many) = figures
            n = args.many - args.few
            rows.append((label, (wall_many - wall_few) / n, (cpu_many - cpu_few) / n))
        probe = [args.runtime, "run", "--rm", "--network", "none"]
        if args.runtime == "podman":  # the options this machine's probe chose (see a run's warnings)
            probe += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        wall = cpu = 0.0
        for _ in range(args.starts):
            w, c = measure([*probe, BASE_IMAGE, "true"], root, env)
            wall, cpu = wall + w, cpu + c
        floor = (f"`{args.runtime} run --rm --network none` alone, per start", wall / args.starts, cpu / args.starts)
    print(f"--jobs 1, attempts {args.few} and {args.many} (per attempt: the difference / {args.many - args.few})")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end")
    print()
    print("| run | wall per attempt | CPU per attempt (all processes, the runtime's included) | CPU / floor |")
    print("|---|---:|---:|---:|")
    for label, wall, cpu in [floor, *rows]:
        print(f"| {label} | {wall * 1000:.0f} ms | {cpu * 1000:.0f} ms | {cpu / floor[2]:.2f}x |")
    ratio = max(rows[0][2], rows[1][2]) / floor[2]
    verdict = "meets" if ratio <= TARGET else "misses"
    print()
    print(f"a nop container attempt costs {ratio:.2f}x a bare `run --rm` in CPU: {verdict} the {TARGET}x target")


if __name__ == "__main__":
    main()
