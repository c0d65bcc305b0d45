"""Hostile agents against the slot pool: whatever they leave, the reset never acts on the user's repository.

Each agent is a real shell script run by ``--agent command``; each run is a real ``worktrial`` process bounded by
a timeout. The outcome the user cares about: the repository is fsck-clean with its commits, refs, uncommitted
edits, untracked and ignored files byte-identical, and no attempt sees what an earlier one left.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import task
from tests.hostile_support import fingerprint, make_precious, run_worktrial

# Each attack runs on every attempt; the second and third attempts then start from a reset (or rebuilt) slot.
ATTACKS = {
    "worktree-symlink-to-repo": 'w="$PWD"; cd ..; mv "$w" "$w.moved"; ln -s "$USER_REPO" "$w"',
    "git-dir-symlink-to-user-git": (
        'g="$(git rev-parse --path-format=absolute --git-common-dir)"; mv "$g" "$g.moved"; ln -s "$USER_REPO/.git" "$g"'
    ),
    "build-dir-symlink-to-repo": 'b="$(cd .. && pwd)"; cd /; mv "$b" "$b.moved"; ln -s "$USER_REPO" "$b"',
    "slot-dir-symlink-to-repo": 's="$(cd ../.. && pwd)"; cd /; mv "$s" "$s.moved"; ln -s "$USER_REPO" "$s"',
    "git-subdirs-symlinked": (
        'g="$(git rev-parse --path-format=absolute --git-common-dir)"; '
        'for d in refs objects info worktrees logs; do rm -rf "$g/$d"; ln -s "$USER_REPO/.git/$d" "$g/$d"; done'
    ),
    "gitfile-points-at-user-git": 'rm -f .git; printf "gitdir: %s/.git\\n" "$USER_REPO" > .git',
    "symlinks-planted-everywhere": (
        "for d in .. ../.. ../../..; do for n in mark meta pristine-index scratch index ws work; do "
        'ln -sfn "$USER_REPO/README.md" "$d/$n-$$" 2>/dev/null; ln -sfn "$USER_REPO/README.md" "$d/$n" 2>/dev/null;'
        " done; done"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["on", "off"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_reset_never_follows_what_the_agent_left(
    repo: Path, write_suite, tmp_path: Path, attack: str, sandbox: str
) -> None:
    """Off: the agent really rearranges its slot and the reset must not follow it; on: the sandbox refuses most of
    the moves (the slot around the worktree is read-only) and the same guarantees hold."""
    mode = ["--sandbox", sandbox]
    make_precious(repo)
    before = fingerprint(repo)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    agent = tmp_path / "agent.sh"
    agent.write_text(f"set +e\ntouch done.txt\n{ATTACKS[attack]}\nexit 0\n")
    suite = write_suite([task("t", verify_commands=["test -f done.txt"])], attempts=3)
    result = run_worktrial(
        [
            "eval",
            "--suite",
            str(suite),
            "--agent-cmd",
            f"sh {agent}",
            "--format",
            "json",
            "--jobs",
            "1",
            *mode,
            "--pass-env",
            "USER_REPO",
        ],
        cwd=repo,
        env={"USER_REPO": str(repo), "TMPDIR": str(tmp), "WORKTRIAL_TRUST": "1"},
    )
    assert result.returncode == 0, result.stderr
    after = fingerprint(repo)
    assert after == before
    attempts = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert len(attempts) == 3
    # Nothing of the run is left in the temp dir (links included), and nothing outside it was touched.
    assert sorted(os.listdir(tmp)) == []


OFF = ["--sandbox", "off"]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_agent_files_next_to_the_worktree_do_not_survive(repo: Path, write_suite, tmp_path: Path, sandbox: str) -> None:
    """Files an agent plants next to its worktree (in the slot, outside git) are gone for the next attempt.

    Unsandboxed the plants land and the reset removes them; in the sandbox the slot around the worktree is
    read-only, so they never land at all (the agent records which)."""
    mode = ["--sandbox", sandbox]
    agent = tmp_path / "agent.sh"
    agent.write_text(
        "set -e\n"
        'for d in .. ../..; do if ls -A "$d" | grep -q planted; then exit 1; fi; done\n'
        "if echo x > ../planted-build && echo x > ../../planted-slot && mkdir -p ../planted-dir/deep; then\n"
        "  echo planted >> landed.txt; fi 2>/dev/null\n"
        "touch done.txt\n"
    )
    suite = write_suite([task("t", verify_commands=["test -f done.txt"])], attempts=3)
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--format", "json", "--jobs", "1", *mode],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1"},
    )
    assert result.returncode == 0, result.stderr
    attempts = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["pass"] * 3
    run_dir = repo / ".worktrial" / "runs" / json.loads(result.stdout)["run"]["id"]
    patches = "".join(p.read_text() for p in run_dir.rglob("artifacts.json"))
    assert ("landed.txt" in patches) == (sandbox == "off"), "plants land only without the sandbox"


@pytest.mark.slow
def test_each_attempt_gets_a_fresh_worktree_path(repo: Path, write_suite, tmp_path: Path) -> None:
    """A process that writes by the previous attempt's path cannot reach the next attempt's files."""
    seen = tmp_path / "seen"
    agent = tmp_path / "agent.sh"
    agent.write_text(
        'set -e\necho "$PWD" >> "$SEEN"\n'
        # The previous attempt's path must not be this one, and must not lead here.
        'prev="$(tail -n 2 "$SEEN" | head -n 1)"\n'
        'if [ "$prev" != "$PWD" ] && [ -e "$prev/from-prev" ]; then exit 1; fi\n'
        "touch from-prev done.txt\n"
    )
    suite = write_suite([task("t", verify_commands=["test -f done.txt"])], attempts=3)
    result = run_worktrial(
        # Unsandboxed: the agent keeps a log outside its worktree, which the sandbox would hide.
        [
            "eval",
            "--suite",
            str(suite),
            "--agent-cmd",
            f"sh {agent}",
            "--format",
            "json",
            "--jobs",
            "1",
            *OFF,
            "--pass-env",
            "SEEN",
        ],
        cwd=repo,
        env={"WORKTRIAL_TRUST": "1", "SEEN": str(seen)},
    )
    assert result.returncode == 0, result.stderr
    paths = seen.read_text().split()
    assert len(paths) == 3 and len(set(paths)) == 3
    outcomes = [a["outcome"] for a in json.loads(result.stdout)["report"]["tasks"][0]["attempts"]]
    assert outcomes == ["pass"] * 3


UNPRIVILEGED_REMOVAL = r"""
import os, sys
from pathlib import Path
from worktrial.isolation.workspace import remove_tree
top = Path(sys.argv[1])
tree = top / "tree"
(tree / "locked" / "inner").mkdir(parents=True)
(tree / "locked" / "inner" / "f").write_text("x")
(tree / "readonly").mkdir()
(tree / "readonly" / "f").write_text("x")
deep = tree / "deep"
deep.mkdir()
fd = os.open(deep, os.O_RDONLY)
for _ in range(3000):  # deeper than any recursion limit, built relative to a descriptor
    os.mkdir("d", dir_fd=fd)
    nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nxt
os.close(fd)
os.chmod(tree / "locked" / "inner", 0)
os.chmod(tree / "locked", 0)
os.chmod(tree / "readonly", 0o555)
print("removed" if remove_tree(tree) and not tree.exists() else "left behind")
"""


@pytest.mark.slow
def test_remove_tree_of_unreadable_and_deep_dirs_without_root(tmp_path: Path) -> None:
    """An agent's chmod 000 directories and absurd nesting are removed by an unprivileged harness."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from tests.hostile_support import PROJECT

    # Outside pytest's per-test TMPDIR: its parents (/tmp/pytest-of-root, mode 0700) are closed to nobody.
    top = Path(tempfile.mkdtemp(prefix="wt-unpriv-", dir="/tmp"))
    try:
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("needs setpriv (util-linux) to drop root")
            shutil.chown(top, "nobody")
            prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        else:
            prefix = []
        env = {**os.environ, "PYTHONPATH": str(Path(PROJECT) / "src"), "HOME": str(top), "TMPDIR": str(top)}
        out = subprocess.run(
            [*prefix, sys.executable, "-c", UNPRIVILEGED_REMOVAL, str(top)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "removed"
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_an_honest_reset_reuses_the_slot(repo: Path, tmp_path: Path) -> None:
    """The checks above must not cost the pool its point: without an attack the slot is reset, not rebuilt."""
    from tests.conftest import git
    from worktrial.isolation.copying_slot import CopyingSlot
    from worktrial.isolation.workspace import open_source

    work = tmp_path / "work"
    work.mkdir()
    slot = CopyingSlot(open_source(repo), git(repo, "rev-parse", "HEAD"), work / "slot-0")
    try:
        paths = []
        for _ in range(3):
            ws = slot.acquire()
            paths.append(ws.worktree)
            assert sorted(p.name for p in ws.worktree.iterdir()) == [".git", ".gitignore", "README.md"]
            (ws.worktree / "README.md").write_text("changed\n")
            (ws.worktree / "new.txt").write_text("new\n")
        assert slot.builds == 1
        assert len(set(paths)) == 3
    finally:
        slot.close()
    assert list(work.iterdir()) == []
