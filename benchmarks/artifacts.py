"""What per-attempt artifacts cost: wall time per attempt with and without them, and memory for a huge output.

Runs a suite of 40 tasks x 2 attempts on a repository of 2,000 files with a command agent that edits three files,
adds one and prints 200 lines, and a verify command that prints 200 lines and fails; once with artifacts (the
default) and once with --no-artifacts, at --jobs 2. Prints seconds per attempt side by side and the run store's
size. Then one attempt whose agent prints 50 MiB: peak RSS of the worktrial process with artifacts, beside the same
run with --no-artifacts (the baseline), and the size of the stored artifacts file.

    .venv/bin/python benchmarks/artifacts.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS, ATTEMPTS, FILES = 40, 2, 2_000
AGENT = (
    "for i in $(seq 200); do echo agent line $i; done; echo changed >> d00/f0.txt; echo changed >> d01/f1.txt; "
    "echo changed >> d02/f2.txt; echo new > added.txt"
)
VERIFY = {"sh": "for i in $(seq 200); do echo test output $i; done; exit 1"}
CHATTY = "yes 'line of agent output that repeats' | head -c 52428800; echo; echo done"


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    for i in range(FILES):
        d = repo / f"d{i % 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"{'x' * 200}{i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "files"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def write_suite(root: Path, name: str, tasks: int, verify: object) -> Path:
    path = root / f"{name}.json"
    data = {
        "id": name,
        "attempts": ATTEMPTS if tasks > 1 else 1,
        "tasks": [
            {"id": f"t{i}", "prompt": "edit", "timeout_secs": 600, "verify_commands": [verify]} for i in range(tasks)
        ],
    }
    path.write_text(json.dumps(data))
    return path


def run(repo: Path, suite: Path, agent: str, *extra: str) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) of the worktrial process, run id."""
    code = (
        "import resource, sys; from worktrial.cli import main\n"
        "try:\n    main()\nfinally:\n"
        "    print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
    )
    argv = [sys.executable, "-c", code, "eval", "--suite", str(suite), "--trust", "-q", "--format", "json"]
    start = time.monotonic()
    done = subprocess.run([*argv, "--agent-cmd", agent, *extra], cwd=repo, capture_output=True, text=True)
    seconds = time.monotonic() - start
    rss = int(next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("RSS")))
    return seconds, rss, json.loads(done.stdout)["run"]["id"]


def store_size(repo: Path, run_id: str) -> int:
    return sum(p.stat().st_size for p in (repo / ".worktrial" / "runs" / run_id).rglob("*") if p.is_file())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = make_repo(root)
        suite = write_suite(root, "edits", TASKS, VERIFY)
        attempts = TASKS * ATTEMPTS
        print(f"{TASKS} tasks x {ATTEMPTS} attempts, {FILES}-file repository, --jobs 2")
        print(f"{'':24} {'s/attempt':>10} {'run store':>12}")
        for label, extra in (("--no-artifacts (base)", ("--no-artifacts",)), ("artifacts (default)", ())):
            seconds, _, run_id = run(repo, suite, AGENT, "--jobs", "2", *extra)
            print(f"{label:24} {seconds / attempts:10.3f} {store_size(repo, run_id) / 1024:10.0f} KiB")
        chatty = write_suite(root, "chatty", 1, "true")
        print("\none attempt whose agent prints 50 MiB")
        print(f"{'':24} {'peak RSS':>10} {'artifacts':>12}")
        for label, extra in (("--no-artifacts (base)", ("--no-artifacts",)), ("artifacts (default)", ())):
            _, rss, run_id = run(repo, chatty, CHATTY, *extra)
            path = repo / ".worktrial" / "runs" / run_id / "attempts" / "t0" / "1" / "artifacts.json"
            kept = f"{path.stat().st_size / 1024:.0f} KiB" if path.exists() else "—"
            print(f"{label:24} {rss / 1024:8.0f} MiB {kept:>12}")


if __name__ == "__main__":
    main()
