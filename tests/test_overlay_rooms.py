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
from worktrial.isolation import overlay, slot_ns

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
git mv movedir renameddir
rm -r replaced && mv source replaced
python3 -c "import os; os.rename('nested/inner', 'nested-inner')"
"""

VERIFY = (
    "grep -q edited README.md && test ! -e gone.txt && test -f renamed.txt && test ! -e old.txt && test -x script.sh "
    "&& test -f file2dir/x && test -f dir2file && test -L link-me && test ! -e __pycache__ && test ! -e build.log "
    "&& test ! -e pipe && test -f deep/a/b/c/d && test -f keep/k && test -f renameddir/m/deep.txt "
    "&& grep -q from-source replaced/x && test ! -e source && test -f nested-inner/i && test ! -e nested/inner"
)

PRISTINE = (
    "test -f gone.txt && test -f old.txt && test ! -e renamed.txt && test ! -x script.sh && test -f file2dir "
    "&& test -f dir2file/y && test ! -L link-me && test ! -e sub && test ! -e deep && test ! -e pipe "
    "&& test -f movedir/m/deep.txt && grep -q original replaced/x && test -f source/x && test -f nested/inner/i"
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
    (path / "movedir" / "m").mkdir(parents=True)
    (path / "movedir" / "m" / "deep.txt").write_text("moved\n")
    for name, text in (("replaced", "original"), ("source", "from-source")):
        (path / name).mkdir()
        (path / name / "x").write_text(f"{text}\n")
    (path / "nested" / "inner").mkdir(parents=True)
    (path / "nested" / "inner" / "i").write_text("i\n")
    (path / "nested" / "stay").write_text("s\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "base")
    return path


def _run(cli: Any, repo: Path, suite: Path, mode: str, *args: str) -> dict[str, Any]:
    """``mode``: ``on`` (overlay rooms, mounted in the slot's namespaces), ``per-program`` (overlay rooms, each
    program mounting its own), ``off`` (the copying path)."""
    os.environ["WORKTRIAL_OVERLAY"] = "off" if mode == "off" else "on"
    os.environ[slot_ns.DISABLE_VAR] = "off" if mode == "per-program" else "on"
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
    before = {name: os.environ.get(name) for name in ("WORKTRIAL_OVERLAY", slot_ns.DISABLE_VAR)}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.mark.slow
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
    for mode in ("on", "per-program", "off"):
        repo = _repo(tmp_path / f"repo-{mode}")
        envelope = _run(cli, repo, suite, mode, "--agent-cmd", f"sh {agent}")
        outcomes = _outcomes(envelope)
        assert [o[2] for o in outcomes] == ["pass"] * 3, outcomes
        patches = [_artifacts(repo, envelope, "hostile", n)["patch"] for n in (1, 2, 3)]
        assert patches[0] == patches[1] == patches[2]
        found[mode] = (outcomes, patches[0])
    assert found["on"] == found["per-program"] == found["off"]
    patch = found["on"][1]
    for name in ("README.md", "gone.txt", "renamed.txt", "old.txt", "script.sh", "file2dir/x", "dir2file", "sub",
                 "movedir/m/deep.txt", "renameddir/m/deep.txt", "replaced/x", "source/x", "nested-inner/i",
                 "nested/inner/i"):  # fmt: skip
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_unprivileged_harness_uses_the_copying_path_with_the_same_results(tmp_path: Path) -> None:
    """As on a developer's laptop: the harness is not root. An overlay it mounts in a user namespace of its own
    cannot rename a directory of the checkout (``redirect_dir`` needs trusted xattrs: EXDEV), which an agent's
    ``git mv`` does, so the probe says so and the slots use the copying path, with the same verdicts and patch."""
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
        verify = {"sh": "test -s fs.txt && ! grep -q overlay fs.txt && grep -q b a.txt && test ! -e gone"}
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
        assert patch["files"] == ["a.txt", "fs.txt"] and "+overlay" not in patch["diff"], patch
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


# The agent (uid 60901 under a root harness) sets overlay metadata in the namespace the kernel ignores on a root
# overlay: a redirect out of the lower layer (relative with ``..``, absolute with ``..``, ``/``) and an opaque mark.
# The kernel shows an ordinary directory in both rooms; the harness must read the change the same way.
FORGED_XATTRS = r"""
import os, sys
secret = sys.argv[1].lstrip("/")
up = "../" * 40
for name, value in (("rel", up + secret), ("abs", "/" + up + secret), ("root", "/"), ("dots", "..")):
    with open(f"{name}/new.txt", "w") as fh:
        fh.write(name + "\n")
    os.setxattr(name, "user.overlay.redirect", value.encode())
with open("opq/new.txt", "w") as fh:
    fh.write("opaque\n")
os.setxattr("opq", "user.overlay.opaque", b"y")
"""


@pytest.mark.slow
@pytest.mark.usefixtures("restore_env")
def test_overlay_metadata_the_agent_sets_never_reaches_the_patch(cli: Any, tmp_path: Path, write_suite) -> None:
    """A redirect the agent wrote never makes the harness read outside the lower layer (a root-only file of the
    host stays out of the patch and the artifacts), an opaque mark it wrote never makes the patch say files were
    deleted that the verifier saw, and the patch is the same as on the copying path, where xattrs mean nothing."""
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    if os.geteuid() != 0:
        pytest.skip("the agent's xattrs are ignored by the kernel only on a root harness's overlays")
    secret = tmp_path / "host-secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("HOST-SECRET-KEY-7f3a\n")
    (secret / "id_rsa").chmod(0o600)
    agent = tmp_path / "agent.py"
    agent.write_text(FORGED_XATTRS)
    # The verifier sees ordinary directories: the lower layer's files are all there, nothing of the host is.
    verify = (
        "for d in rel abs root dots opq; do test -f $d/orig.txt && test -f $d/new.txt && test ! -e $d/id_rsa "
        "&& test ! -e $d/README.md || exit 1; done"
    )
    suite = write_suite([task("xattrs", verify_commands=[{"sh": verify}])])
    found = {}
    for mode in ("on", "off"):
        repo = tmp_path / f"repo-{mode}"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# r\n")
        for name in ("rel", "abs", "root", "dots", "opq"):
            (repo / name).mkdir()
            (repo / name / "orig.txt").write_text(f"{name}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "base")
        envelope = _run(cli, repo, suite, mode, "--agent-cmd", f"python3 {agent} {secret}")
        assert [o[2] for o in _outcomes(envelope)] == ["pass"], _outcomes(envelope)
        run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
        for path in run_dir.rglob("*"):
            if path.is_file():
                assert b"HOST-SECRET" not in path.read_bytes(), path
        found[mode] = _artifacts(repo, envelope, "xattrs", 1)["patch"]
    expected = [f"{name}/new.txt" for name in ("abs", "dots", "opq", "rel", "root")]
    assert found["on"]["files"] == expected, found["on"]["files"]
    assert found["on"] == found["off"]


def test_a_redirect_is_read_below_the_lower_layer_and_never_through_a_link(tmp_path: Path) -> None:
    """Even a redirect in the namespace the kernel honours (which only the kernel writes on a root overlay) names a
    path of the lower layer: one through a symlink the repository committed (to a host directory) or with ``..``
    lists nothing, and files come only from the lower layer's own directories."""
    if os.geteuid() != 0:
        pytest.skip("trusted xattrs need root")
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("host\n")
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    (lower / "real").mkdir(parents=True)
    (lower / "real" / "kept.txt").write_text("kept\n")
    (lower / "link").symlink_to(host)
    for name, value in (("moved", b"/real"), ("through-link", b"/link"), ("escape", b"/real/../../host")):
        (upper / name).mkdir(parents=True)
        os.setxattr(upper / name, "trusted.overlay.redirect", value)
    lower_fd, upper_fd = os.open(lower, os.O_RDONLY), os.open(upper, os.O_RDONLY)
    try:
        changes = overlay.scan_upper(upper_fd)
        assert changes.origins == {"moved": "real", "through-link": "link"}
        assert overlay.moved_files(lower_fd, changes) == {"moved/kept.txt": "real/kept.txt"}
        assert overlay.lower_files(lower_fd, "link/secret") == [] and overlay.lower_kind(lower_fd, "link") == "link"
    finally:
        os.close(lower_fd)
        os.close(upper_fd)
