"""Overlay rooms and the copying path give the same patches, verdicts and records (issue: rooms in O(1)).

With bubblewrap, each attempt's worktree is an overlay of the slot's pristine checkout and the verifier's room an
overlay of the agent's upper directory; ``WORKTRIAL_OVERLAY=off`` keeps the copying path (one walk, a reset of what
it found). Every kind of change an agent can make must come out the same on both.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from worktrial.isolation import overlay

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (make sandbox)"),
]

# Every kind of change: edit, delete, rename, chmod, a file replaced by a directory and a directory by a file, a
# symlink in place of a file, names with a newline and with bytes that are not UTF-8, a nested repository, ignored
# new files (dropped as a fresh checkout would not have them), a FIFO (not file contents), a deep new tree.
HOSTILE = r"""
set -e
echo edited >> README.md
rm gone.txt
mv old.txt renamed.txt
chmod +x script.sh
rm file2dir && mkdir file2dir && echo inside > file2dir/x
rm -r dir2file && echo now-a-file > dir2file
rm link-me && ln -s README.md link-me
printf 'n\n' > "$(printf 'new\nline')"
printf 'b\n' > "$(printf 'bad\377name')"
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
mkdir -p sub && (cd sub && git init -q && echo s > s && git add s && git -c user.name=a -c user.email=a@a commit -qm s)
mkdir -p __pycache__ && echo forged > __pycache__/m.pyc && echo noise > build.log
mkfifo pipe
mkdir -p deep/a/b/c && echo deep > deep/a/b/c/d
chmod 700 keep
"""

VERIFY = (
    "grep -q edited README.md && test ! -e gone.txt && test -f renamed.txt && test ! -e old.txt && test -x script.sh "
    "&& test -f file2dir/x && test -f dir2file && test -L link-me && test ! -e __pycache__ && test ! -e build.log "
    "&& test ! -e pipe && test -f deep/a/b/c/d && test -f keep/k"
)

PRISTINE = (
    "test -f gone.txt && test -f old.txt && test ! -e renamed.txt && test ! -x script.sh && test -f file2dir "
    "&& test -f dir2file/y && test ! -L link-me && test ! -e sub && test ! -e deep && test ! -e pipe"
)


def _repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# r\n")
    (path / ".gitignore").write_text("*.log\n__pycache__/\n")
    for name in ("gone.txt", "old.txt", "file2dir", "link-me"):
        (path / name).write_text(f"{name}\n")
    (path / "script.sh").write_text("echo hi\n")
    (path / "dir2file").mkdir()
    (path / "dir2file" / "y").write_text("y\n")
    (path / "keep").mkdir()
    (path / "keep" / "k").write_text("k\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    return path


def _run(cli: Any, repo: Path, suite: Path, mode: str, *args: str) -> dict[str, Any]:
    os.environ["WORKTRIAL_OVERLAY"] = mode
    result = cli(
        ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", "--sandbox", "on", *args], cwd=repo
    )
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def _artifacts(repo: Path, envelope: dict[str, Any], task_id: str, attempt: int) -> dict[str, Any]:
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    return json.loads((run_dir / "attempts" / task_id / str(attempt) / "artifacts.json").read_text())  # type: ignore[no-any-return]


def _outcomes(envelope: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (t["task_id"], a["attempt"], a["outcome"], a["claimed"], a["verified"], a["reason"])
        for t in envelope["report"]["tasks"]
        for a in t["attempts"]
    )


@pytest.fixture
def restore_env() -> Any:
    before = os.environ.get("WORKTRIAL_OVERLAY")
    yield
    if before is None:
        os.environ.pop("WORKTRIAL_OVERLAY", None)
    else:
        os.environ["WORKTRIAL_OVERLAY"] = before


@pytest.mark.usefixtures("restore_env")
def test_every_kind_of_change_gives_the_same_patch_and_verdict_on_both_paths(
    cli: Any, tmp_path: Path, write_suite
) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    tasks = [task("hostile", verify_commands=[{"sh": VERIFY}])]
    # Three attempts on one slot: the second and third start from a reset of what the one before changed.
    tasks[0]["prompt"] = "change everything"
    agent = tmp_path / "agent.sh"
    agent.write_text(f"{PRISTINE.replace('&&', '&& ')} || exit 3\n{HOSTILE}")
    suite = write_suite(tasks, attempts=3)
    found = {}
    for mode in ("on", "off"):
        repo = _repo(tmp_path / f"repo-{mode}")
        envelope = _run(cli, repo, suite, mode, "--agent-cmd", f"sh {agent}")
        outcomes = _outcomes(envelope)
        assert [o[2] for o in outcomes] == ["pass"] * 3, outcomes
        patches = [_artifacts(repo, envelope, "hostile", n)["patch"] for n in (1, 2, 3)]
        assert patches[0] == patches[1] == patches[2]
        found[mode] = (outcomes, patches[0])
    assert found["on"] == found["off"]
    patch = found["on"][1]
    for name in ("README.md", "gone.txt", "renamed.txt", "old.txt", "script.sh", "file2dir/x", "dir2file", "sub"):
        assert name in patch["files"], (name, patch["files"])
    assert "new\nline" in patch["files"] and any(f.startswith("bad") for f in patch["files"])
    assert "old mode 100644\nnew mode 100755" in patch["diff"]
    assert "new file mode 120000" in patch["diff"] and "Subproject commit" in patch["diff"]
    assert not any(f.startswith(("__pycache__", "build.log", "pipe", ".git")) for f in patch["files"]), patch["files"]


@pytest.mark.usefixtures("restore_env")
def test_the_agent_works_in_an_overlay_and_the_verifier_in_another(
    cli: Any, repo: Path, tmp_path: Path, write_suite
) -> None:
    """With bubblewrap and overlays available the agent's worktree is an overlay mount; with them switched off it is
    not. The verifier's room is a different mount point from the agent's."""
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    agent = "stat -f -c %T . > fs.txt && pwd > pwd.txt"
    verify = {"sh": 'test "$(pwd)" != "$(cat pwd.txt)" && stat -f -c %T . | grep -q overlay'}
    suite = write_suite([task("probe", verify_commands=[verify])])
    envelope = _run(cli, repo, suite, "on", "--agent-cmd", agent)
    assert _outcomes(envelope)[0][2] == "pass", _outcomes(envelope)
    assert "+overlay" in _artifacts(repo, envelope, "probe", 1)["patch"]["diff"]
    envelope = _run(cli, repo, suite, "off", "--agent-cmd", agent)
    assert "+overlay" not in _artifacts(repo, envelope, "probe", 1)["patch"]["diff"]
    assert _outcomes(envelope)[0][2] == "fail"  # the copying path verifies in place, on no overlay


@pytest.mark.usefixtures("restore_env")
def test_the_bundled_suites_give_identical_records_on_both_paths(cli: Any, tmp_path: Path) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    root = Path(__file__).resolve().parent.parent
    for suite in sorted((root / "suites").glob("*.json")):
        records = {}
        for mode in ("on", "off"):
            repo = tmp_path / f"{suite.stem}-{mode}"
            shutil.copytree(root / "suites", repo / "suites")
            git(repo, "init", "-q", "-b", "main")
            git(repo, "add", ".")
            git(repo, "commit", "-qm", "suites")
            envelope = _run(cli, repo, repo / "suites" / suite.name, mode, "--agent", "oracle", "--attempts", "2")
            records[mode] = _outcomes(envelope)
        assert records["on"] == records["off"], suite.name


def test_an_unprivileged_harness_mounts_its_rooms_in_a_user_namespace(tmp_path: Path) -> None:
    """As on a developer's laptop: the harness is not root, so the overlay is mounted in a user namespace of its own
    (``unshare --user --map-root-user``) and bubblewrap starts inside it as the user again."""
    import subprocess
    import sys
    import tempfile

    from tests.test_sandbox_unprivileged import _as, _free_uid, _userns_available

    uid = os.geteuid() if os.geteuid() != 0 else _free_uid()
    if uid != os.geteuid() and (reason := _userns_available(uid)):
        pytest.skip(reason)
    probe = subprocess.run([*_as(uid if uid != os.geteuid() else None), sys.executable, "-c", "import worktrial"],
                           capture_output=True, cwd="/")  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"this test's Python cannot run as uid {uid}")
    base = Path(tempfile.mkdtemp(prefix="wt-overlay-unpriv-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        repo = base / "repo"
        repo.mkdir()
        (repo / "a.txt").write_text("a\n")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base), "TMPDIR": str(base),
               "WORKTRIAL_TRUST": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "WORKTRIAL_OVERLAY": "on"}  # fmt: skip
        for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
            subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
        verify = {"sh": "grep -q overlay fs.txt && grep -q b a.txt && test ! -e gone"}
        suite = {"id": "s", "attempts": 2, "tasks": [{"id": "t", "prompt": "p", "verify_commands": [verify]}]}
        (base / "suite.json").write_text(json.dumps(suite))
        if uid != os.geteuid():
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
        agent = "test ! -e fs.txt && stat -f -c %T . > fs.txt && echo b >> a.txt && touch gone && rm gone"
        command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(base / "suite.json"), "--jobs", "1"]
        command += ["--agent-cmd", agent, "--format", "json", "-q", "--sandbox", "on"]
        done = subprocess.run([*_as(uid if uid != os.geteuid() else None), *command], cwd=repo, env=env,
                              capture_output=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        envelope = json.loads(done.stdout)
        outcomes = [a["outcome"] for t in envelope["report"]["tasks"] for a in t["attempts"]]
        assert outcomes == ["pass", "pass"], envelope["report"]["tasks"]
        patch = _artifacts(repo, envelope, "t", 2)["patch"]
        assert patch["files"] == ["a.txt", "fs.txt"] and "+overlay" in patch["diff"], patch
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
