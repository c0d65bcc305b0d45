"""Every process of an attempt ends with the attempt, even one that dropped its marker and left its session.

Each test runs the real harness (``python -m worktrial``, which makes itself a child subreaper) with agents that
try to outlive their attempt, and looks only for processes carrying a uuid marker of its own in their argv.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import SuiteWriter, alive_with_marker, task
from worktrial.isolation import cgroups
from worktrial.isolation.tracking import DISABLE_VAR, TOKEN_VAR, ProcIdentity, end_leftovers

PY = shlex.quote(sys.executable)
HARNESS_TIMEOUT = 120


def sleeper(_marker: str, py: str = PY) -> str:
    """Shell words for a process that sleeps with the marker in its argv.

    The marker reaches it through ``$MARK`` in the environment, so that the harness's own argv (which holds the
    agent command) does not carry it.
    """
    return f'{py} -c "import time; time.sleep(300)" "$MARK"'


@pytest.fixture(autouse=True)
def _unsandboxed() -> None:
    """These are the guarantees without a sandbox (its PID namespace ends everything anyway, and would keep the
    escapes' pid files and /proc out of the test's sight): the user's config turns it off for this module."""
    config = Path(os.environ["WORKTRIAL_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[sandbox]\nmode = "off"\n')


def escape(marker: str, pid_dir: Path, name: str, py: str = PY) -> str:
    """Shell: start a sleeper that drops the token and leaves the session, and wait until it runs."""
    return (
        f'P="{pid_dir}/{name}"; export P; '
        f'env -u {TOKEN_VAR} setsid sh -c \'echo $$ > "$P.tmp" && mv "$P.tmp" "$P" && '
        f"exec {sleeper(marker, py)}' >/dev/null 2>&1 </dev/null & "
        'while [ ! -e "$P" ]; do sleep 0.01; done; '
    )


def double_fork(marker: str, pid_dir: Path, name: str, py: str = PY) -> str:
    """Shell: a subshell that backgrounds the escape and exits at once, so it is orphaned immediately."""
    return (
        f'P="{pid_dir}/{name}"; export P; '
        f'( env -u {TOKEN_VAR} setsid sh -c \'echo $$ > "$P.tmp" && mv "$P.tmp" "$P" && '
        f"exec {sleeper(marker, py)}' >/dev/null 2>&1 </dev/null & ) ; "
        'while [ ! -e "$P" ]; do sleep 0.01; done; '
    )


def none_alive_verify(marker: str, py: str = sys.executable) -> dict[str, list[str]]:
    """A verify command that passes only if no process carrying ``marker`` is running (a live one fails it)."""
    code = (
        f"marker = {marker[::-1]!r}[::-1].encode()\n"  # reversed: this check must not carry the marker itself
        "import os,sys\n"
        "def live(p):\n"
        "    try:\n"
        "        return open(f'/proc/{p}/stat','rb').read().rsplit(b')',1)[1].split()[0] not in (b'Z',b'X') and "
        "marker in open(f'/proc/{p}/cmdline','rb').read()\n"
        "    except OSError:\n"
        "        return False\n"
        "sys.exit(1 if any(live(p) for p in os.listdir('/proc') if p.isdigit()) else 0)\n"
    )
    return {"argv": [py, "-c", code]}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until_none(marker: str) -> None:
    wait_for(lambda: not alive_with_marker(marker), f"every process marked {marker} to end", timeout=30)


def kill_marked(marker: str) -> None:
    for pid in alive_with_marker(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def harness(
    repo: Path, *args: str, marker: str = "", extra_env: dict[str, str] | None = None, cgroup: Path | None = None
) -> subprocess.Popen[bytes]:
    """``worktrial ARGS`` in ``repo``; with ``cgroup`` (``private_cgroup``) it starts inside that cgroup."""
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "MARK": marker, **(extra_env or {})}
    passed = ["--pass-env", "MARK"] if args and args[0] == "eval" else []  # resume keeps the run's own
    join = ["/bin/sh", "-c", 'echo $$ >"$0" && exec "$@"', str(cgroup / "cgroup.procs")] if cgroup else []
    return subprocess.Popen(
        [*join, sys.executable, "-m", "worktrial", *args, *passed],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    try:
        return proc.communicate(timeout=HARNESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


NO_CGROUP = {DISABLE_VAR: "cgroup"}
"""As where no cgroup can be made (an unprivileged harness, cgroup v1 only): the subreaper and the tree alone."""


@pytest.mark.parametrize("cgroup", ["cgroup", "no cgroup"])
@pytest.mark.parametrize("how", ["setsid", "double-fork"])
def test_escaped_process_ends_with_its_attempt(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path, how: str, cgroup: str
) -> None:
    """The escape is gone before verify runs (verify fails if it is alive), and after worktrial exits; with the
    attempt's own cgroup where the harness can make one, and from the process tree and its orphans where not."""
    marker = f"wt-escape-{uuid.uuid4().hex}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    start = escape if how == "setsid" else double_fork
    agent = start(marker, pid_dir, "$WORKTRIAL_TASK_ID-$WORKTRIAL_ATTEMPT") + "touch done.txt"
    suite = write_suite([task("t", verify_commands=["test -f done.txt", none_alive_verify(marker)])], attempts=2)
    # One at a time: verify must not see the escape of a concurrent attempt (the parallel test covers those).
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--format", "json", "-j", "1"]
    proc = harness(repo, *args, marker=marker, extra_env=NO_CGROUP if cgroup == "no cgroup" else None)
    try:
        out, err = finish(proc)
        assert proc.returncode == 0, err.decode()
        report = json.loads(out)["report"]["tasks"][0]
        assert [a["outcome"] for a in report["attempts"]] == ["pass", "pass"], err.decode()
        assert sorted(p.name for p in pid_dir.iterdir()) == ["t-1", "t-2"]  # both escapes did run
        assert alive_with_marker(marker) == []
        assert b"reaper" not in err  # the subreaper is available here: no degraded-mode warning
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.mark.parametrize("cgroup", ["cgroup", "no cgroup"])
def test_escapes_of_parallel_attempts_all_end(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path, cgroup: str
) -> None:
    """With two attempts at once, orphans re-parent to the harness itself; each still ends with the run."""
    marker = f"wt-parallel-{uuid.uuid4().hex}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    agent = double_fork(marker, pid_dir, "$WORKTRIAL_TASK_ID") + escape(marker, pid_dir, "$WORKTRIAL_TASK_ID-b")
    agent += "sleep 0.5; touch done.txt"
    suite = write_suite([task("a"), task("b"), task("c")], attempts=1)
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "-q", "--jobs", "3"]
    proc = harness(repo, *args, marker=marker, extra_env=NO_CGROUP if cgroup == "no cgroup" else None)
    try:
        _, err = finish(proc)
        assert proc.returncode == 0, err.decode()
        assert len(list(pid_dir.iterdir())) == 6
        assert alive_with_marker(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.mark.slow
def test_degraded_mode_still_ends_marker_carriers(repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    """Without a subreaper (as on macOS), processes that keep the token are still found, with one warning."""
    marker = f"wt-degraded-{uuid.uuid4().hex}"
    started = tmp_path / "started"
    agent = (
        f"( setsid sh -c 'touch {shlex.quote(str(started))}; exec {sleeper(marker)}' >/dev/null 2>&1 </dev/null & ); "
        f"while [ ! -e {shlex.quote(str(started))} ]; do sleep 0.01; done; touch done.txt"
    )
    suite = write_suite([task("t", verify_commands=["test -f done.txt", none_alive_verify(marker)])], attempts=1)
    proc = harness(
        repo, "eval", "--suite", str(suite), "--agent-cmd", agent, "--format", "json",
        marker=marker, extra_env={DISABLE_VAR: "subreaper"},
    )  # fmt: skip
    try:
        out, err = finish(proc)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["report"]["tasks"][0]["attempts"][0]["outcome"] == "pass"
        assert err.decode().count("cannot make worktrial the reaper") == 1
        assert alive_with_marker(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as opened:
        yield opened


def _run_dir(repo: Path) -> Path:
    runs = repo / ".worktrial" / "runs"
    dirs = list(runs.iterdir()) if runs.is_dir() else []
    assert len(dirs) == 1, dirs
    return dirs[0]


def _recorded(run_dir: Path) -> set[int]:
    try:
        body = json.loads(json.loads((run_dir / "processes.json").read_text())["body"])
    except (OSError, ValueError, KeyError):
        return set()
    return {pid for pid, _, _ in body["processes"]}


@pytest.mark.slow
@pytest.mark.parametrize("then", ["resume", "eval"])
def test_kill_9_then_resume_ends_the_leftovers(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path, then: str, stack: contextlib.ExitStack
) -> None:
    """After kill -9 of the harness, `resume` of its run, or the next `eval` in the workspace, ends its processes."""
    marker = f"wt-kill9-{uuid.uuid4().hex}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    first = shlex.quote(str(tmp_path / "first-done"))
    # The first attempt leaves an escaped daemon and a child, then sleeps; after resume the agent passes at once.
    agent = (
        f"if [ ! -e {first} ]; then touch {first}; "
        + escape(marker, pid_dir, "escaped")
        + f"{sleeper(marker)} & {sleeper(marker)}; fi; touch done.txt"
    )
    suite = write_suite([task("t", timeout_secs=300)], attempts=1)
    own = stack.enter_context(private_cgroup())
    proc = harness(
        repo, "eval", "--suite", str(suite), "--agent-cmd", agent, "--format", "json", marker=marker, cgroup=own
    )
    try:
        wait_for(lambda: len(alive_with_marker(marker)) == 3, "the agent's three processes")
        run_dir = _run_dir(repo)
        wait_for(lambda: set(alive_with_marker(marker)) <= _recorded(run_dir), "the record of all three")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert len(alive_with_marker(marker)) == 3

        if then == "resume":
            resumed = harness(repo, "resume", run_dir.name, "--format", "json", marker=marker, cgroup=own)
        else:
            again = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--format", "json"]
            resumed = harness(repo, *again, marker=marker, cgroup=own)
        out, err = finish(resumed)
        assert resumed.returncode == 0, err.decode()
        # the agent's shell, its two sleepers and the escape
        assert "ended 4 process(es) left running by a killed worktrial" in err.decode()
        assert err.decode().count("left running by a killed worktrial") == 1
        assert alive_with_marker(marker) == []
        assert json.loads(out)["report"]["tasks"][0]["attempts"][0]["outcome"] == "pass"
        assert not (run_dir / "processes.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.mark.slow
def test_a_live_run_keeps_its_processes_when_another_run_starts(repo: Path, write_suite: SuiteWriter) -> None:
    """Only runs whose harness is gone (nobody holds the run's lock) are cleaned up by the next run."""
    marker = f"wt-live-{uuid.uuid4().hex}"
    slow = write_suite([task("slow", timeout_secs=300)], attempts=1)
    first = harness(repo, "eval", "--suite", str(slow), "--agent-cmd", sleeper(marker), "-q", marker=marker)
    try:
        wait_for(lambda: len(alive_with_marker(marker)) == 1, "the first run's agent")
        run_dir = _run_dir(repo)
        wait_for(lambda: set(alive_with_marker(marker)) <= _recorded(run_dir), "its record")
        quick = write_suite([task("quick")], attempts=1)
        second = harness(repo, "eval", "--suite", str(quick), "--agent", "oracle", "-q")
        _, err = finish(second)
        assert second.returncode == 0, err.decode()
        assert "killed worktrial" not in err.decode()
        assert len(alive_with_marker(marker)) == 1 and first.poll() is None
    finally:
        first.kill()
        first.communicate(timeout=30)
        kill_marked(marker)


@pytest.mark.slow
def test_a_forged_record_does_not_kill_an_unrelated_process(repo: Path, write_suite: SuiteWriter) -> None:
    """An agent that writes processes.json naming some other process gets nothing killed by the next run."""
    marker = f"wt-forged-{uuid.uuid4().hex}"
    suite = write_suite([task("t")], attempts=1)
    first = harness(repo, "eval", "--suite", str(suite), "--agent", "oracle", "-q")
    _, err = finish(first)
    assert first.returncode == 0, err.decode()
    run_dir = _run_dir(repo)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
    try:
        wait_for(lambda: len(alive_with_marker(marker)) == 1, "the bystander")
        created = psutil.Process(bystander.pid).create_time()
        body = json.dumps({"harness": [1, 0.0], "processes": [[bystander.pid, created, "0" * 32]]}, sort_keys=True)
        (run_dir / "processes.json").write_text(json.dumps({"body": body, "sig": "0" * 64}))
        again = harness(repo, "eval", "--suite", str(suite), "--agent", "oracle", "-q")
        _, err = finish(again)
        assert again.returncode == 0, err.decode()
        assert "not signed by the harness" in err.decode()
        assert bystander.poll() is None and alive_with_marker(marker) == [bystander.pid]
        assert not (run_dir / "processes.json").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_end_leftovers_checks_each_identity() -> None:
    """Create time and token must match: a recycled pid or a process with another token is never killed."""
    marker = f"wt-ident-{uuid.uuid4().hex}"
    token, other = uuid.uuid4().hex, uuid.uuid4().hex  # unique: a concurrent run of this test has its own
    env = {**os.environ, TOKEN_VAR: token}
    argv = [sys.executable, "-c", "import time; time.sleep(300)", marker]
    procs = [subprocess.Popen(argv, env=env) for _ in range(3)]
    try:
        wait_for(lambda: len(alive_with_marker(marker)) == 3, "three sleepers")
        times = [psutil.Process(p.pid).create_time() for p in procs]
        wrong_time = ProcIdentity(procs[0].pid, times[0] - 100, other)
        wrong_token = ProcIdentity(procs[1].pid, times[1], other)
        assert end_leftovers([wrong_time, wrong_token]) == 0
        assert all(p.poll() is None for p in procs)
        assert end_leftovers([ProcIdentity(procs[2].pid, times[2], token)]) == 3  # the token finds the others
        for p in procs:
            p.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _cgroup_base() -> Path | None:
    """This process's cgroup v2 directory when it may create cgroups there (root, or a delegated subtree)."""
    mount, own = cgroups._v2_mount(), cgroups._own_v2_cgroup()
    if mount is None or own is None:
        return None
    base = mount / own.lstrip("/")
    return base if os.access(base, os.W_OK) else None


needs_cgroup = pytest.mark.skipif(_cgroup_base() is None, reason="no writable cgroup v2 hierarchy on this machine")


@contextlib.contextmanager
def private_cgroup() -> Iterator[Path | None]:
    """A cgroup of this test's own (None where worktrial gets no cgroups): harnesses started in it keep their parent
    cgroups below it, where no other worktrial on the machine looks. Every harness that starts ends the leftovers of
    killed harnesses in its own cgroup's directory (``cgroups.end_stale``): without this, another run starting in
    the same PID namespace (a parallel test run, a user's worktrial) could end a killed harness's processes first,
    and the harness under test would have nothing left to end or report."""
    base = _cgroup_base()
    if base is None:
        yield None
        return
    own = base / f"test-{uuid.uuid4().hex[:12]}"
    own.mkdir()
    try:
        yield own
    finally:
        cgroups.remove(own)


@pytest.mark.slow
@needs_cgroup
@pytest.mark.parametrize("disable", ["subreaper", "subreaper,cgroup"])
def test_the_cgroup_ends_an_escape_no_other_mechanism_sees(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path, disable: str
) -> None:
    """Without the subreaper, a double fork that drops the token is never seen; its cgroup still ends it.

    The second case turns the cgroup off too and shows the escape then survives its attempt (so the first case
    passes because of the cgroup, not by luck).
    """
    marker = f"wt-cgroup-{uuid.uuid4().hex}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    agent = double_fork(marker, pid_dir, "escaped") + "touch done.txt"
    suite = write_suite([task("t", verify_commands=["test -f done.txt", none_alive_verify(marker)])], attempts=1)
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--format", "json"]
    proc = harness(repo, *args, marker=marker, extra_env={DISABLE_VAR: disable})
    try:
        out, err = finish(proc)
        outcome = json.loads(out)["report"]["tasks"][0]["attempts"][0]["outcome"]
        if disable == "subreaper":
            assert proc.returncode == 0, err.decode()
            assert outcome == "pass", err.decode()
            assert alive_with_marker(marker) == []
        else:
            assert outcome == "fail" and len(alive_with_marker(marker)) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.mark.slow
@needs_cgroup
def test_the_next_run_ends_what_a_killed_harness_left_in_its_cgroup(
    repo: Path, write_suite: SuiteWriter, stack: contextlib.ExitStack
) -> None:
    """A parent cgroup whose harness is gone is emptied and removed; one made in another PID namespace is not."""
    base = stack.enter_context(private_cgroup())
    assert base is not None
    marker = f"wt-stale-{uuid.uuid4().hex}"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid whose process no longer runs, as after kill -9
    ns = os.stat("/proc/self/ns/pid").st_ino
    stale = base / f"worktrial-{ns}-{gone.pid}-1"
    foreign = base / f"worktrial-{ns + 1}-{gone.pid}-1"  # its pid means nothing in this namespace
    argv = [sys.executable, "-c", "import time; time.sleep(300)", marker]
    sleepers = []
    try:
        for parent in (stale, foreign):
            (parent / "attempt").mkdir(parents=True)
            sleeper_proc = subprocess.Popen(argv, start_new_session=True)
            sleepers.append(sleeper_proc)
            (parent / "attempt" / "cgroup.procs").write_text(str(sleeper_proc.pid))
        wait_for(lambda: len(alive_with_marker(marker)) == 2, "two sleepers")
        suite = write_suite([task("t")], attempts=1)
        run = harness(repo, "eval", "--suite", str(suite), "--agent", "oracle", "-q", cgroup=base)
        _, err = finish(run)
        assert run.returncode == 0, err.decode()
        assert "ended 1 process(es) left in the cgroup of a worktrial killed with kill -9" in err.decode()
        sleepers[0].wait(timeout=30)
        assert alive_with_marker(marker) == [sleepers[1].pid]
        assert not stale.exists() and foreign.exists()
    finally:
        for sleeper_proc in sleepers:
            if sleeper_proc.poll() is None:
                sleeper_proc.kill()
            sleeper_proc.wait()
        for parent in (stale, foreign):
            cgroups.remove(parent)


_NO_MACHINE_SCAN = """
import json, sys
from worktrial.isolation import proc, tracking
tracking.enable_subreaper()
tracking.SAMPLE_SECS = 0.02  # the sampler looks many times while the escapes run
scans = []
real_table, real_tokens = tracking._table, tracking.pids_with_token
def table():
    scans.append("process table")
    return real_table()
def tokens(wanted):
    wanted = list(wanted)
    if wanted:
        scans.append("token carriers")
    return real_tokens(wanted)
tracking._table, tracking.pids_with_token = table, tokens
result = proc.run(["/bin/sh", "-c", sys.argv[1]], cwd=sys.argv[2], timeout=60)
print(json.dumps({"scans": scans, "returncode": result.returncode}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads children from /proc/<pid>/task/*/children")
@pytest.mark.parametrize("cgroup", ["cgroup", "no cgroup"])
def test_following_an_attempt_never_reads_every_process_of_the_machine(tmp_path: Path, cgroup: str) -> None:
    """What a command started is found from its cgroup, its tree and the harness's own orphans: neither the sampler
    nor the end of the command reads the machine's process table or every process's environment (the cost of both
    grew with everything else running on the machine), and the escapes still end with the command."""
    marker = f"wt-noscan-{uuid.uuid4().hex}"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = escape(marker, pid_dir, "setsid") + double_fork(marker, pid_dir, "double") + "sleep 0.3"
    env = {**os.environ, "MARK": marker, **(NO_CGROUP if cgroup == "no cgroup" else {})}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _NO_MACHINE_SCAN, script, str(tmp_path)],
            env=env, capture_output=True, text=True, timeout=HARNESS_TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout)
        assert outcome == {"scans": [], "returncode": 0}
        assert sorted(p.name for p in pid_dir.iterdir()) == ["double", "setsid"]  # both escapes did run
        assert alive_with_marker(marker) == []
    finally:
        kill_marked(marker)


def _free_uid() -> int:
    for uid in range(61_000, 62_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no free uid between 61000 and 62000")


@pytest.mark.slow
def test_an_unprivileged_harness_ends_escapes_without_a_cgroup() -> None:
    """A harness that is not root has no cgroup to put an unsandboxed command in (this machine delegates none): the
    escapes are found from the process tree and the orphans re-parented to it, and are gone before verify runs."""
    if os.geteuid() != 0:
        pytest.skip("the harness already runs unprivileged: the tests above cover it")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to become an unprivileged user")
    py = "/usr/bin/python3"  # this test's own Python may live where the other user cannot reach it
    if not os.access(py, os.X_OK):
        pytest.skip(f"{py} is needed for the agent's processes and the check")
    uid = _free_uid()
    as_user = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    probe = subprocess.run([*as_user, sys.executable, "-c", "import worktrial"], capture_output=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"this test's Python cannot run as uid {uid}: {probe.stderr.decode().strip()[-200:]}")
    base = Path(tempfile.mkdtemp(prefix="wt-unprivileged-escape-", dir="/var/tmp"))
    marker = f"wt-unpriv-{uuid.uuid4().hex}"
    try:
        base.chmod(0o755)
        repo, pid_dir = base / "repo", base / "pids"
        repo.mkdir()
        pid_dir.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base), "TMPDIR": str(base),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "WORKTRIAL_TRUST": "1", "MARK": marker,
            "WORKTRIAL_CONFIG_DIR": str(base / "config"), "WORKTRIAL_CACHE_DIR": str(base / "cache"),
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
        }  # fmt: skip
        (repo / "README.md").write_text("# r\n")
        for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
            subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
        agent = (
            escape(marker, pid_dir, "$WORKTRIAL_TASK_ID-$WORKTRIAL_ATTEMPT-s", py)
            + double_fork(marker, pid_dir, "$WORKTRIAL_TASK_ID-$WORKTRIAL_ATTEMPT-d", py)
            + "touch done.txt"
        )
        checks = ["test -f done.txt", none_alive_verify(marker, py)]
        suite = {"id": "s", "attempts": 2, "tasks": [{"id": "t", "prompt": "p", "verify_commands": checks}]}
        (base / "suite.json").write_text(json.dumps(suite))
        subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
        command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(base / "suite.json"), "--agent-cmd",
                   agent, "--sandbox", "off", "--format", "json", "-j", "1", "--pass-env", "MARK"]  # fmt: skip
        done = subprocess.run([*as_user, *command], cwd=repo, env=env, capture_output=True, timeout=HARNESS_TIMEOUT)
        assert done.returncode == 0, done.stderr.decode()
        attempts = json.loads(done.stdout)["report"]["tasks"][0]["attempts"]
        assert [a["outcome"] for a in attempts] == ["pass", "pass"], done.stderr.decode()
        assert len(list(pid_dir.iterdir())) == 4  # every escape did run
        assert alive_with_marker(marker) == []
    finally:
        kill_marked(marker)
        subprocess.run(["rm", "-rf", str(base)], check=False)
