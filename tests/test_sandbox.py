"""Hostile agents under ``--sandbox on``: every attack is tried and the host is checked afterwards.

Each attack the agent makes is logged into its own worktree (kept with --keep-worktrees), so a test can tell
"blocked" from "never tried"; the host side is then compared with what it was before the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

import worktrial.isolation.sandbox as sandbox_module
from tests.conftest import alive_with_marker, git, task
from worktrial.isolation.limits import Enforcer, Limits, mechanism
from worktrial.isolation.sandbox import AttemptView, Bubblewrap, SandboxSettings, etc_secrets

pytestmark = pytest.mark.usefixtures("rooms")  # every test on both room paths: overlays and copying

DEADLINE_SECS = 60.0

HOSTILE = r"""
r="$PWD/report.txt"
attempt() { if sh -c "$1" >/dev/null 2>&1; then echo "ESCAPED $2" >> "$r"; else echo "blocked $2" >> "$r"; fi; }
attempt 'echo pwned > "$H_REPO/README.md"' repo-absolute
attempt 'echo pwned > ../escape.txt' dotdot
attempt 'ln -s "$H_REPO/README.md" link && echo pwned > link' symlink
attempt 'echo pwned > "$H_HOME/pwned.txt"' real-home
attempt 'mkdir -p "$H_REPO/.worktrial/runs/evil"' run-store
attempt 'echo pwned > "$H_TRACES/evil.json"' traces
attempt 'touch "$H_REPO/.git/objects/evil"' objects-write
attempt 'rm -rf "$H_REPO/.git/objects/info"' objects-remove
attempt 'git -C "$H_REPO" commit -q --allow-empty -m evil' git-commit
attempt 'git -C "$H_REPO" update-ref refs/heads/evil HEAD' git-ref
attempt 'git -C "$H_REPO" config evil.key 1' git-config
attempt 'echo "touch /tmp/hooked" > "$H_REPO/.git/hooks/pre-commit"' git-hook
attempt 'echo pwned > "$H_OTHER/pwned.txt"' other-dir
cat "$H_HOME/.ssh/id_rsa" >> "$r" 2>/dev/null
cat "$H_CONFIG/planted.txt" >> "$r" 2>/dev/null
ls "$H_REPO/.worktrial" >> "$r" 2>/dev/null
echo fresh > "$HOME/fresh.txt" && echo "home-write-inside $HOME" >> "$r"
echo private > "/tmp/$H_MARK" && echo "tmp-write-inside" >> "$r"
git add -A && git commit -q -m "agent commit" && echo "worktree-commit ok" >> "$r"
setsid env -u WORKTRIAL_PROC_TOKEN "$H_PY" -c "import time; time.sleep(300)" "$H_MARK" >/dev/null 2>&1 &
echo done > done.txt
"""


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _repo_state(repo: Path) -> dict[str, Any]:
    return {
        "log": git(repo, "log", "--all", "--format=%H %s"),
        "refs": git(repo, "for-each-ref"),
        "config": (repo / ".git" / "config").read_text(),
        "hooks": _tree(repo / ".git" / "hooks"),
        "objects": _tree(repo / ".git" / "objects"),
        "readme": (repo / "README.md").read_text(),
    }


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def hostile_env(tmp_path: Path, repo: Path, isolated_state: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake home with a planted SSH key, a planted worktrial config file and a directory of someone else's."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-SSH-KEY\n")
    config = Path(os.environ["WORKTRIAL_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "planted.txt").write_text("SECRET-CONFIG\n")
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("HOME", str(home))
    paths = {"H_REPO": repo, "H_HOME": home, "H_CONFIG": config, "H_OTHER": other}
    for name, path in paths.items():
        monkeypatch.setenv(name, str(path))
    monkeypatch.setenv("H_TRACES", str(repo / ".worktrial" / "eval" / "traces"))
    monkeypatch.setenv("H_PY", sys.executable)
    return paths


def _kept_worktree(envelope: dict[str, Any], stdout: str) -> Path:
    kept = [line[3:-1] for line in stdout.splitlines() if line.startswith("- `/")]
    assert kept, stdout
    return Path(kept[0])


@pytest.mark.sandbox
@pytest.mark.parametrize("under", ["/home", "/tmp"])
def test_a_planted_ssh_key_is_absent_wherever_home_is(
    cli: Callable[..., Result], repo: Path, write_suite, under: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME under /home (a developer) or elsewhere (CI images, sudo -E, HOME=/tmp/...): the key is not there."""
    if not os.access(under, os.W_OK):
        pytest.skip(f"cannot plant a home under {under}")
    home = Path(tempfile.mkdtemp(prefix="wt-planted-home-", dir=under))
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_rsa").write_text("SECRET-SSH-KEY\n")
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("H_KEY", str(home / ".ssh" / "id_rsa"))
        agent = 'cat "$H_KEY" "$HOME/.ssh/id_rsa" > leaked.txt 2>/dev/null; '
        agent += 'ls -A "$(dirname "$H_KEY")" >> leaked.txt 2>&1; true'
        suite = write_suite([task("t", verify_commands=["test -f leaked.txt"])])
        args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--pass-env", "H_KEY"]
        result = cli([*args, "--sandbox", "on", "--keep-worktrees", "--format", "json", "-q"], cwd=repo)
        assert result.exit_code == 0, result.output
        attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
        leaked = (Path(attempt["worktree"]) / "leaked.txt").read_text()
        assert "SECRET" not in leaked and "id_rsa" not in leaked, leaked
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.sandbox
def test_hostile_agent_is_contained(cli: Callable[..., Result], repo: Path, write_suite, hostile_env, tmp_path) -> None:
    marker = f"wt-sandbox-{uuid.uuid4().hex}"
    os.environ["H_MARK"] = marker
    (repo / ".worktrial" / "eval" / "traces").mkdir(parents=True)
    git(repo, "status")  # the run store directory exists before the run, like any second run
    before = _repo_state(repo)
    script = tmp_path / "hostile.sh"
    script.write_text(HOSTILE)
    suite = write_suite([task("hostile")])
    args = ["eval", "--suite", str(suite), "--agent-cmd", f"sh {script}", "--trust", "--keep-worktrees"]
    args += ["--pass-env", "H_*"]  # where the attacks aim: the agent is told, as a hostile one would find out
    try:
        result = cli([*args, "--sandbox", "on"], cwd=repo)
        assert result.exit_code == 0, result.output
        report = (_kept_worktree({}, result.stdout) / "report.txt").read_text()
        assert "ESCAPED" not in report, report
        assert report.count("blocked ") == 13, report
        assert "SECRET" not in report
        assert "runs" not in report.split("blocked other-dir")[1], "the run store was visible"
        assert "home-write-inside" in report and str(hostile_env["H_HOME"]) not in report.split("home-write")[1]
        assert "tmp-write-inside" in report and not Path(f"/tmp/{marker}").exists()
        assert "worktree-commit ok" in report  # the agent's own git still works inside
        assert "| 1/1 |" in result.stdout or "1/1" in result.stdout  # and the task still passes
        assert "sandbox: bubblewrap" in result.stdout
        assert _repo_state(repo) == before
        assert not (hostile_env["H_HOME"] / "pwned.txt").exists()
        assert not (hostile_env["H_HOME"] / "fresh.txt").exists()
        assert list(hostile_env["H_OTHER"].iterdir()) == []
        assert not (repo / ".worktrial" / "runs" / "evil").exists()
        assert not alive_with_marker(marker), "a setsid daemon outlived its attempt"
    finally:
        for pid in alive_with_marker(marker):
            os.kill(pid, signal.SIGKILL)


def test_the_same_attacks_unsandboxed_are_not_prevented_but_never_followed(
    cli: Callable[..., Result], repo: Path, write_suite, hostile_env, tmp_path
) -> None:
    """--sandbox off: the attacks land (the "sandbox off" column of docs/security.md says so), yet the run finishes,
    its records are the harness's own (audit is clean) and the agent's commits never reach the user's branches."""
    marker = f"wt-sandbox-off-{uuid.uuid4().hex}"
    os.environ["H_MARK"] = marker
    (repo / ".worktrial" / "eval" / "traces").mkdir(parents=True)
    main_before = git(repo, "rev-parse", "main")
    script = tmp_path / "hostile.sh"
    script.write_text(HOSTILE)
    suite = write_suite([task("hostile")])
    args = ["eval", "--suite", str(suite), "--agent-cmd", f"sh {script}", "--trust", "--keep-worktrees"]
    args += ["--pass-env", "H_*"]  # where the attacks aim: the agent is told, as a hostile one would find out
    try:
        result = cli([*args, "--sandbox", "off"], cwd=repo)
        assert result.exit_code == 0, result.output
        report = (_kept_worktree({}, result.stdout) / "report.txt").read_text()
        assert "ESCAPED repo-absolute" in report and "SECRET-SSH-KEY" in report and "SECRET-CONFIG" in report
        assert "sandbox: none" in result.stdout and "1/1" in result.stdout
        run_dir = next((repo / ".worktrial" / "runs").glob("*/envelope.json")).parent
        audit = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(suite)], cwd=repo)
        assert audit.exit_code == 0, audit.output
        assert git(repo, "rev-parse", "main") != main_before  # git -C <repo> commit landed: not prevented ...
        assert "agent commit" not in git(repo, "log", "--all", "--format=%s")  # ... the worktree's own did not
    finally:
        for pid in alive_with_marker(marker):
            os.kill(pid, signal.SIGKILL)
        Path(f"/tmp/{marker}").unlink(missing_ok=True)


def test_unsandboxed_attempt_still_loses_its_setsid_daemon(cli, repo: Path, write_suite) -> None:
    """--sandbox off keeps the companion guarantee: the token sweep ends daemons that dropped nothing visible."""
    marker = f"wt-nosandbox-{uuid.uuid4().hex}"
    agent = f'setsid {sys.executable} -c "import time; time.sleep(300)" {marker} >/dev/null 2>&1 & touch done.txt'
    suite = write_suite([task("t")])
    try:
        result = cli(["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--sandbox", "off"], cwd=repo)
        assert result.exit_code == 0, result.output
        assert "sandbox: none" in result.stdout
        assert not alive_with_marker(marker)
    finally:
        for pid in alive_with_marker(marker):
            os.kill(pid, signal.SIGKILL)


def test_kill_9_of_the_harness_ends_the_sandboxed_agent(repo: Path, write_suite) -> None:
    marker = f"wt-orphan-{uuid.uuid4().hex}"
    agent = (
        f'setsid env -u WORKTRIAL_PROC_TOKEN {sys.executable} -c "import time; time.sleep(300)" {marker} '
        ">/dev/null 2>&1 & sleep 300"
    )
    suite = write_suite([task("t", timeout_secs=600)])
    env = {**os.environ, "WORKTRIAL_TRUST": "1"}
    command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd", agent]
    harness = subprocess.Popen(
        [*command, "--sandbox", "on", "-q"], cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_until(lambda: bool(alive_with_marker(marker)), "the agent's daemon to start")
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        _wait_until(lambda: not alive_with_marker(marker), "the daemon to die with the harness")
    finally:
        if harness.poll() is None:
            harness.kill()
        for pid in alive_with_marker(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server on 127.0.0.1 in the test process (outside any sandbox), counting connections."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.mark.sandbox
@pytest.mark.parametrize("network", ["off", "on", "host"])
def test_only_network_host_reaches_the_hosts_loopback(
    cli, repo: Path, write_suite, loopback_server: tuple[int, list[int]], network: str
) -> None:
    """off: loopback only; on: a network of the attempt's own, where 127.0.0.1 is its own and the host's loopback
    (10.0.2.2 on slirp4netns) is refused; host: the host's network, as asked."""
    port, accepted = loopback_server
    probe = f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\""
    if network == "on":
        probe += f" || {sys.executable} -c \"import socket; socket.create_connection(('10.0.2.2', {port}), 5)\""
    # The agent claims success only when it reached the server; verify always passes.
    suite = write_suite([task("net", verify_commands=["true"])])
    args = ["eval", "--suite", str(suite), "--agent-cmd", probe, "--trust", "--format", "json", "-q"]
    result = cli([*args, "--sandbox", "on", "--network", network], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    outcome = envelope["report"]["tasks"][0]["attempts"][0]["outcome"]
    assert envelope["run"]["sandbox"]["network"] == network
    if network == "host":
        assert outcome == "pass" and accepted == [1]
    else:
        assert outcome == "fail" and accepted == []


cgroup_only = pytest.mark.skipif(mechanism() != "cgroup", reason="needs a cgroup the harness can create (root)")


@cgroup_only
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_max_procs_ends_a_fork_loop_with_that_reason(cli, repo: Path, write_suite, sandbox: str) -> None:
    pause = f"120.{uuid.uuid4().int % 10**12:012d}"  # a sleep length no other test's process has in its argv
    agent = f"i=0; while [ $i -lt 200 ]; do sleep {pause} & i=$((i+1)); done; wait; touch done.txt"
    suite = write_suite([task("forks", timeout_secs=120)])
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--format", "json", "-q"]
    result = cli([*args, "--max-procs", "24", "--sandbox", sandbox], cwd=repo)
    assert result.exit_code == 1, result.output  # every attempt ended in error: the run measured nothing
    envelope = json.loads(result.stdout)
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "error" and attempt["reason"] == "attempt hit --max-procs 24", attempt
    assert envelope["run"]["sandbox"]["max_procs"] == 24 and envelope["run"]["sandbox"]["limits"] == "cgroup"
    assert not alive_with_marker(pause)


@cgroup_only
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_max_memory_ends_an_allocation_with_that_reason(cli, repo: Path, write_suite, sandbox: str) -> None:
    agent = f"{sys.executable} -c \"b = bytearray(768 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])\""
    suite = write_suite([task("hog", timeout_secs=120)])
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--format", "json", "-q"]
    result = cli([*args, "--max-memory", "96M", "--sandbox", sandbox], cwd=repo)
    assert result.exit_code == 1, result.output  # every attempt ended in error: the run measured nothing
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "error" and attempt["reason"] == "attempt hit --max-memory 96M", attempt


def test_sandbox_on_without_bubblewrap_is_one_line_with_the_fix(
    cli, repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKTRIAL_BWRAP", "/nonexistent/bwrap")
    suite = write_suite([task("t")])
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"]
    refused = cli([*args, "--sandbox", "on"], cwd=repo)
    assert refused.exit_code == 2
    assert "bubblewrap (/nonexistent/bwrap) is not installed" in refused.stderr
    assert "apt-get install bubblewrap" in refused.stderr and "Traceback" not in refused.output
    assert cli([*args, "--network", "off"], cwd=repo).exit_code == 2

    fallback = cli(args, cwd=repo)  # auto: runs, warns once, records that nothing was contained
    assert fallback.exit_code == 0, fallback.output
    assert fallback.stderr.count("running attempts unsandboxed") == 1
    sandbox = json.loads(fallback.stdout)["run"]["sandbox"]
    assert sandbox["kind"] == "none" and "not installed" in sandbox["reason"]


def test_bad_limit_values_are_one_line(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t")])
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust"]
    result = cli([*args, "--max-memory", "lots"], cwd=repo)
    assert result.exit_code == 2 and "--max-memory 'lots' is not a size" in result.stderr
    result = cli([*args, "--sandbox", "off", "--network", "off"], cwd=repo)
    assert result.exit_code == 2 and "--network off needs the sandbox" in result.stderr


@pytest.mark.sandbox
def test_compare_notes_runs_in_different_sandboxes(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t")])
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q"]
    assert cli([*args, "--sandbox", "on"], cwd=repo).exit_code == 0
    assert cli([*args, "--sandbox", "off"], cwd=repo).exit_code == 0
    runs = sorted((repo / ".worktrial" / "runs").iterdir())
    result = cli(["compare", str(runs[0] / "envelope.json"), str(runs[1] / "envelope.json")], cwd=repo)
    assert result.exit_code == 0, result.output
    assert "different sandboxes" in result.stdout


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root to become nobody")
def test_the_same_sandbox_works_for_an_unprivileged_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """What worktrial builds also runs as ``nobody`` (bubblewrap then uses an unprivileged user namespace)."""
    # The sandbox is computed here as root and run as nobody, who cannot search root's own Python install that it
    # would show; this test runs only /bin/sh (test_sandbox_unprivileged.py runs whole evals as a user).
    monkeypatch.setattr(sandbox_module, "_tools", lambda *args: ())
    base = Path(tempfile.mkdtemp(prefix="wt-unpriv-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        worktree, scratch, secret = base / "work", base / "scratch", base / "repo"
        for directory in (worktree, scratch, secret):
            directory.mkdir()
        (secret / "secret.txt").write_text("SECRET\n")
        (secret / "secret.txt").chmod(0o644)
        settings = SandboxSettings(mode="on", hidden=(str(secret),))
        view = AttemptView(writable=(worktree, scratch), readonly=(), home=scratch / "home")
        sandbox = Bubblewrap(settings, view, Enforcer(Limits()), "bwrap")
        sandbox.prepare()
        for path in (worktree, scratch, scratch / "home"):
            os.chown(path, 65534, 65534)
        script = (
            'id -u > out.txt; cat "$S/secret.txt" >> out.txt 2>/dev/null; echo pwned > "$S/new.txt" 2>/dev/null; '
            'echo pwned > ../escape.txt 2>/dev/null; echo $$ >> out.txt; echo "$HOME" >> out.txt'
        )
        wrapped = sandbox.wrap(["/bin/sh", "-c", script], worktree, {"PATH": "/usr/bin:/bin", "S": str(secret)})
        argv, env = wrapped.argv, wrapped.env
        runuser = shutil.which("runuser") or "runuser"
        as_nobody = [runuser, "-u", "nobody", "--", "/usr/bin/env", f"HOME={env['HOME']}"]  # runuser resets HOME
        done = subprocess.run([*as_nobody, *argv], env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        uid, pid, home = (worktree / "out.txt").read_text().split()
        assert uid == "65534" and pid != str(os.getpid()) and int(pid) < 10  # its own PID namespace
        assert home == str(scratch / "home")
        assert sorted(p.name for p in secret.iterdir()) == ["secret.txt"]
        assert not (base / "escape.txt").exists()
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@pytest.mark.parametrize("doc", ["README.md", "docs/security.md"])
def test_every_row_of_the_security_tables_names_a_test_that_exists(doc: str) -> None:
    """The protection tables are only as good as the tests they cite: each cited test must exist."""
    root = Path(__file__).resolve().parent.parent
    text = (root / doc).read_text()
    table = text[text.index("| an agent tries to" if doc == "README.md" else "| attack by the agent") :]
    rows = [line for line in table.split("\n\n")[0].splitlines()[2:] if line.startswith("|")]
    assert len(rows) >= 7, rows
    current = ""
    for row in rows:
        cited = row.rstrip("|").rsplit("|", 1)[1]
        assert "test_" in cited or "the same" in cited or cited.strip() == "—", row
        for name in [w.strip("`,[]") for w in cited.replace("`", " ` ").split() if "test_" in w]:
            module, _, func = name.partition("::")
            if module.endswith(".py"):
                current = module
            func = (func or ("" if module.endswith(".py") else module)).split("[")[0]
            source = (root / "tests" / current).read_text()
            assert not func or f"def {func}(" in source, f"{doc}: {current}::{func} does not exist"


@pytest.mark.sandbox
def test_sandbox_config_is_the_users_and_a_project_cannot_loosen_it(
    cli, repo: Path, write_suite, isolated_state: Path
) -> None:
    config = isolated_state / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    suite = write_suite([task("t")])
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "-q"]
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    # The reason names what turned it off: here the user's config file, not a flag nobody passed.
    reason = json.loads(result.stdout)["run"]["sandbox"]["reason"]
    assert reason == f'off by [sandbox] mode = "off" in {config / "config.toml"}'
    flagged = json.loads(cli([*args, "--sandbox", "off"], cwd=repo).stdout)["run"]["sandbox"]["reason"]
    assert flagged == "off by --sandbox off"
    assert json.loads(cli([*args, "--sandbox", "on"], cwd=repo).stdout)["run"]["sandbox"]["kind"] == "bubblewrap"
    network = cli([*args, "--network", "off"], cwd=repo)
    assert network.exit_code == 2 and "config.toml turned off" in network.stderr, network.output

    (repo / "worktrial.toml").write_text('[sandbox]\nmode = "off"\n')
    refused = cli(args, cwd=repo)
    assert refused.exit_code == 2 and "[sandbox] is a user setting" in refused.stderr, refused.output


@pytest.mark.sandbox
def test_sandbox_show_adds_one_path_read_only_and_nothing_else(
    cli: Callable[..., Result], repo: Path, write_suite, tmp_path: Path
) -> None:
    """The allowlist grows only by what the user names: ``--sandbox-show DIR`` shows that directory read-only."""
    tools = tmp_path / "toolchain"
    tools.mkdir()
    (tools / "data.txt").write_text("from the toolchain\n")
    (tmp_path / "beside.txt").write_text("not shown\n")
    script = tmp_path / "agent.sh"  # paths named in the command line itself would be shown: keep them in a script
    script.write_text(
        f"cat {tools / 'data.txt'} > seen.txt 2>/dev/null; cat {tmp_path / 'beside.txt'} >> seen.txt 2>/dev/null\n"
        f"echo x > {tools / 'new.txt'} 2>/dev/null && echo wrote >> seen.txt; echo done > done.txt\n"
    )
    agent = f"sh {script}"
    suite = write_suite([task("t")])
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "--keep-worktrees", "--sandbox", "on"]
    seen = []
    for extra in ([], ["--sandbox-show", str(tools)]):
        result = cli([*args, *extra, "--format", "json", "-q"], cwd=repo)
        assert result.exit_code == 0, result.output
        worktree = Path(json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]["worktree"])
        seen.append((worktree / "seen.txt").read_text())
    assert seen == ["", "from the toolchain\n"]  # never beside.txt, never writable
    assert not (tools / "new.txt").exists()

    missing = cli([*args, "--sandbox-show", "no/such/dir"], cwd=repo)
    assert missing.exit_code == 2
    [line] = missing.stderr.strip().splitlines()
    assert "--sandbox-show no/such/dir: no such file or directory" in line


def test_a_path_entry_that_is_home_or_holds_a_hidden_path_is_never_shown(tmp_path: Path) -> None:
    """PATH=$HOME:... (or a directory holding the user's repository) must not turn the allowlist back into the
    host: such an entry is left out, while a program's own prefix beside it is shown."""
    home, repo, tools = tmp_path / "home", tmp_path / "work" / "repo", tmp_path / "opt" / "tool"
    for directory in (home / ".ssh", repo, tools / "bin"):
        directory.mkdir(parents=True)
    path_var = os.pathsep.join([str(home), str(tmp_path / "work"), str(tools / "bin"), "/usr/bin"])
    shown = sandbox_module._tools("true", path_var, home, (home, repo))
    assert tools in shown  # /opt/tool for /opt/tool/bin
    assert not any(p == home or home in p.parents or p in (tmp_path / "work", tmp_path) for p in shown), shown


def test_etc_secrets_are_what_another_user_could_not_read(tmp_path: Path) -> None:
    """/etc's covered entries: a directory others cannot list and enter (not what is inside it: it goes whole),
    a regular file others cannot read; never what a symlink points at, nor what everyone may read."""
    etc = tmp_path / "etc"
    private, certs, deep = etc / "ssl" / "private", etc / "ssl" / "certs", etc / "a" / "b"
    for directory in (private, certs, deep):
        directory.mkdir(parents=True)
    (private / "key.pem").write_text("k\n")
    private.chmod(0o710)
    (certs / "ca.pem").write_text("c\n")
    for name, mode in (("shadow", 0o640), ("passwd", 0o644), ("a/b/token", 0o600), ("a/b/motd", 0o444)):
        (etc / name).write_text("x\n")
        (etc / name).chmod(mode)
    (etc / "shadow-link").symlink_to(etc / "shadow")
    (etc / "private-link").symlink_to(private)
    found = etc_secrets.__wrapped__(etc)
    assert sorted(found) == sorted([(private, True), (etc / "shadow", False), (deep / "token", False)])
