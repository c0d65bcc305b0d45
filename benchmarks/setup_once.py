"""Environment setup per attempt (``setup_commands``, as before) versus once per slot (``environment``).

A suite whose setup creates a virtual environment (about 3 s) runs 20 attempts (4 tasks x 5) with the oracle
agent at --jobs 2, twice in one invocation: once with the venv in every attempt's ``setup_commands``, once with
it in ``environment.setup``. Prints wall time, how many setups ran (counted by the setup itself) and their total
cost, side by side. Target: with ``environment`` the setups cost at most jobs x one setup.

A second table measures a cache hit (``environment.cache_key``) on a venv-like environment of 2,500 files (17 MB):
replaying the entry onto a fresh checkout and committing it as the base, with the entry's pack of git objects
(the slot's git only hashes the files) and without it (git writes one object per file, as every hit did before
entries carried a pack), side by side. ``--files N`` changes the size.

    .venv/bin/python benchmarks/setup_once.py [--files 2500] [--skip-eval]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = 4
ATTEMPTS = 5
JOBS = 2


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# bench\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def make_suite(root: Path, counter: Path, once: bool) -> Path:
    setup = [{"sh": f"python3 -m venv .venv && echo x >> {counter}"}]
    tasks = []
    for i in range(TASKS):
        task: dict[str, object] = {
            "id": f"t{i}",
            "prompt": "use the venv",
            "verify_commands": [{"sh": ".venv/bin/python -c 'import sys' && test -f done.txt"}],
            "solution": [{"sh": "echo done > done.txt"}],
        }
        if not once:
            task["setup_commands"] = setup
            task["verify_timeout_secs"] = 120
        tasks.append(task)
    data: dict[str, object] = {"id": "setup-bench", "attempts": ATTEMPTS, "tasks": tasks}
    if once:
        data["environment"] = {"setup": setup, "timeout_secs": 120}
    suite = root / f"suite-{'once' if once else 'each'}.json"
    suite.write_text(json.dumps(data))
    return suite


def one_setup_secs(root: Path) -> float:
    target = root / "probe-venv"
    start = time.perf_counter()
    subprocess.run(["python3", "-m", "venv", str(target)], check=True)
    return time.perf_counter() - start


def run(repo: Path, suite: Path, config_dir: Path) -> float:
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(config_dir)}
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent", "oracle",
            "--jobs", str(JOBS), "-q", "--format", "json", "--output", os.devnull]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(argv, cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def cache_hits(root: Path, files: int, rounds: int = 3) -> None:
    """Time cache hits with and without the entry's pack, on the same entry, in fresh workspaces."""
    import shutil

    from worktrial.isolation import proc
    from worktrial.isolation.env_cache import EnvironmentCache
    from worktrial.isolation.environment import run_setup
    from worktrial.isolation.workspace import create_attempt_workspace, open_source
    from worktrial.model.suite import Environment

    repo = root / "hit-repo"
    repo.mkdir()
    (repo / "README.md").write_text("# bench\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    base = commit.stdout.strip()
    make = (f"mkdir -p .venv/lib && for i in $(seq {files}); do head -c 7000 /dev/urandom | base64 > "
            ".venv/lib/mod$i.py; done")  # fmt: skip
    environment = Environment.model_validate({"setup": [{"sh": make}], "cache_key": "bench"})
    source = open_source(repo)
    cache = EnvironmentCache(root / "env-cache")
    run_env = proc.clean_env()
    n = iter(range(1_000_000))

    def one() -> float:
        ws = create_attempt_workspace(source, base, root / "ws" / str(next(n)))
        start = time.perf_counter()
        run_setup(ws, environment, run_env, cache=cache)
        secs = time.perf_counter() - start
        shutil.rmtree(ws.root)
        return secs

    fresh = one()
    (entry,) = [p for p in cache.root.iterdir() if not p.name.startswith(".")]
    with_pack = sorted(one() for _ in range(rounds))
    shutil.rmtree(entry / "objects")
    (entry / "objects").mkdir()
    without = sorted(one() for _ in range(rounds))
    print(f"\ncache hit, {files} files (median of {rounds}; a fresh setup with its commit took {fresh:.2f} s)")
    print(f"{'restore + commit as the base':<44} {'seconds':>8}")
    print(f"{'without the pack (git writes every object)':<44} {without[rounds // 2]:>8.2f}")
    print(f"{'with the pack (git only hashes)':<44} {with_pack[rounds // 2]:>8.2f}")


def main() -> None:
    files = int(sys.argv[sys.argv.index("--files") + 1]) if "--files" in sys.argv else 2500
    if "--skip-eval" in sys.argv:
        with tempfile.TemporaryDirectory(prefix="worktrial-bench-setup-") as tmp:
            cache_hits(Path(tmp), files)
        return
    with tempfile.TemporaryDirectory(prefix="worktrial-bench-setup-") as tmp:
        root = Path(tmp)
        repo = make_repo(root)
        setup = one_setup_secs(root)
        print(f"one setup (python3 -m venv): {setup:.2f} s; {TASKS * ATTEMPTS} attempts, --jobs {JOBS}")
        print(f"{'mode':<34} {'wall s':>8} {'setups':>7} {'setup cost s':>13} {'target s':>9}")
        for once in (False, True):
            counter = root / f"count-{once}"
            counter.write_text("")
            wall = run(repo, make_suite(root, counter, once), root / "config")
            count = len(counter.read_text().splitlines())
            label = "environment (once per slot)" if once else "setup_commands (per attempt)"
            print(f"{label:<34} {wall:>8.1f} {count:>7} {count * setup:>13.1f} {JOBS * setup:>9.1f}")
        cache_hits(root, files)


if __name__ == "__main__":
    main()
