"""``--network on``: every sandboxed process gets a network namespace of its own with outbound access.

Attempts run in parallel must never meet on 127.0.0.1: one that holds a port (or an abstract unix socket) another
attempt needs would make that attempt fail without having done anything wrong. And the network must still reach
out: here to a test host in a network namespace this test makes (a veth pair), never to anything off the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builtin_support import write_user_config
from tests.conftest import task
from tests.fakes import share_with_sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (make sandbox installs it)")

SQUAT = r"""
import os, pathlib, socket, sys, time
me, other = os.environ["WORKTRIAL_PROMPT"].split()
shared = pathlib.Path(os.environ["H_SHARED"])
port = int(os.environ["H_PORT"])
held = []
try:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", port))
    tcp.listen(1)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0worktrial-test-" + os.environ["H_PORT"])
    held = [tcp, abstract]
    result = "bound"
except OSError as exc:
    result = f"squatted {exc.errno}"
(shared / me).write_text(result)
deadline = time.monotonic() + 120
while not (shared / other).exists() and time.monotonic() < deadline:  # hold both until the other attempt tried
    time.sleep(0.02)
pathlib.Path("result.txt").write_text(result + "\n")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _squat_run(cli, repo: Path, write_suite, tmp_path: Path, network: str) -> dict[str, str]:
    if not (tmp_path / "shared").is_dir():
        (tmp_path / "shared").mkdir()
        share_with_sandbox(tmp_path / "shared")
    shared = tmp_path / "shared" / network
    shared.mkdir()
    shared.chmod(0o1777)
    script = tmp_path / "squat.py"
    script.write_text(SQUAT)
    suite = write_suite(
        [
            task("a", prompt="a b", verify_commands=["grep -qx bound result.txt"]),
            task("b", prompt="b a", verify_commands=["grep -qx bound result.txt"]),
        ]
    )
    os.environ["H_SHARED"], os.environ["H_PORT"] = str(shared), str(_free_port())
    args = ["eval", "--suite", str(suite), "--agent-cmd", f"{sys.executable} {script}", "--trust", "--jobs", "2"]
    args += ["--attempts", "1", "--pass-env", "H_*", "--format", "json", "-q", "--sandbox", "on"]
    result = cli([*args, "--network", network], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["run"]["sandbox"]["network"] == network, envelope["run"]["sandbox"]
    # Both attempts ran at the same time: each waited until the other had tried its bind.
    assert sorted(p.name for p in shared.iterdir()) == ["a", "b"]
    return {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}


def test_parallel_attempts_never_share_a_port_or_an_abstract_socket(
    cli, repo: Path, write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("H_SHARED", "")
    monkeypatch.setenv("H_PORT", "")
    # The attack, on the host's network: whichever attempt binds second fails through no fault of its own.
    assert sorted(_squat_run(cli, repo, write_suite, tmp_path, "host").values()) == ["fail", "pass"]
    # Each attempt on a network of its own: both hold the same port and the same abstract socket name.
    assert _squat_run(cli, repo, write_suite, tmp_path, "on") == {"a": "pass", "b": "pass"}


@pytest.fixture
def test_host() -> Iterator[str]:
    """A host in a network namespace of this test's own, reached over a veth pair: its address."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a test host (make ray-tools installs iproute2)")
    name = f"wt-net-{uuid.uuid4().hex[:8]}"
    outside, inside = f"wto{name[-6:]}", f"wti{name[-6:]}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", name],
        ["ip", "addr", "add", "10.231.77.1/30", "dev", outside],
        ["ip", "link", "set", outside, "up"],
        ["ip", "-n", name, "addr", "add", "10.231.77.2/30", "dev", inside],
        ["ip", "-n", name, "link", "set", inside, "up"],
        ["ip", "-n", name, "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a test host here: {' '.join(step)}: {done.stderr.strip()}")
        os.environ["WT_TEST_NETNS"] = name
        yield "10.231.77.2"
    finally:
        subprocess.run(["ip", "link", "del", outside], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


SERVER = r"""
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(1)
s.settimeout(120)
print(s.getsockname()[1], flush=True)
try:
    conn, _ = s.accept()
    conn.sendall(b"hello from the test host\n")
    conn.close()
    print("accepted", flush=True)
except OSError:
    print("none", flush=True)
"""


def test_network_on_reaches_out_but_not_the_hosts_loopback(
    cli, repo: Path, write_suite, test_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = subprocess.Popen(
        ["ip", "netns", "exec", os.environ["WT_TEST_NETNS"], sys.executable, "-c", SERVER, test_host],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with socket.socket() as local:  # a service on the host's own loopback
            local.bind(("127.0.0.1", 0))
            local.listen(1)
            local_port = local.getsockname()[1]
            probe = (
                "import socket\n"
                f"data = socket.create_connection(({test_host!r}, {port}), 30).recv(100)\n"
                "open('outbound.txt', 'wb').write(data)\n"
                "for host in ('127.0.0.1', '10.0.2.2'):\n"
                "    try:\n"
                f"        socket.create_connection((host, {local_port}), 5)\n"
                "        open('reached-host-loopback.txt', 'w').write(host)\n"
                "    except OSError:\n"
                "        pass\n"
            )
            script = repo.parent / "probe.py"
            script.write_text(probe)
            suite = write_suite(
                [task("out", verify_commands=[{"sh": "grep -q 'hello from the test host' outbound.txt"}])]
            )
            args = ["eval", "--suite", str(suite), "--agent-cmd", f"{sys.executable} {script}", "--trust"]
            args += ["--attempts", "1", "--format", "json", "-q", "--sandbox", "on", "--keep-worktrees"]
            result = cli(args, cwd=repo)
        assert result.exit_code == 0, result.output
        envelope = json.loads(result.stdout)
        sandbox = envelope["run"]["sandbox"]
        assert sandbox["network"] == "on" and "slirp4netns" in sandbox["network_detail"], sandbox
        attempt = envelope["report"]["tasks"][0]["attempts"][0]
        assert attempt["outcome"] == "pass", attempt["reason"]
        assert not (Path(attempt["worktree"]) / "reached-host-loopback.txt").exists()
        assert server.wait(timeout=60) == 0 and server.stdout.read().strip() == "accepted"
    finally:
        server.kill()
        server.wait()


def test_without_slirp4netns_network_on_falls_back_with_one_warning(
    cli, repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worktrial.isolation import sandbox

    monkeypatch.setenv("WORKTRIAL_SLIRP4NETNS", "/nonexistent/slirp4netns")
    sandbox._probe_network.cache_clear()
    try:
        suite = write_suite([task("t")])
        args = ["eval", "--suite", str(suite), "--agent-cmd", "touch done.txt", "--trust", "--format", "json"]
        result = cli([*args, "-q", "--sandbox", "on", "--attempts", "1"], cwd=repo)
    finally:
        sandbox._probe_network.cache_clear()
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["run"]["sandbox"]["network"] == "host"
    assert "slirp4netns is not installed" in envelope["run"]["sandbox"]["network_detail"]
    warnings = [line for line in result.stderr.splitlines() if "share this host's network" in line]
    assert len(warnings) == 1 and "apt-get install slirp4netns" in warnings[0], result.stderr


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:11434/v1", "http://localhost:8000/v1", "http://[::1]:8080", "http://127.1.2.3/"]
)
def test_an_agent_in_the_sandbox_on_a_loopback_model_server_is_told_to_use_network_host(
    cli, repo: Path, write_suite, url: str
) -> None:
    """Its model calls would all be refused inside the attempt's own network, and scored as the agent failing.
    A custom agent is not routed through the model gateway; the command agent is (docs/gateway.md), so for it the
    loopback server is reachable through the gateway's socket."""
    write_user_config('[agents.mine]\ncommand = "true"\n')
    suite = write_suite([task("t", verify_commands=["true"])])
    args = ["eval", "--suite", str(suite), "--agent", "mine", "--trust", "--base-url", url]
    result = cli([*args, "--sandbox", "on"], cwd=repo)
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "is on this host's loopback" in line and "pass --network host" in line, result.stderr
    assert cli([*args, "--sandbox", "on", "--network", "host", "-q"], cwd=repo).exit_code == 0
    routed = ["eval", "--suite", str(suite), "--agent-cmd", "true", "--trust", "--base-url", url]
    assert cli([*routed, "--sandbox", "on", "-q"], cwd=repo).exit_code == 0


def test_a_public_model_server_needs_nothing(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t", verify_commands=["true"])])
    args = ["eval", "--suite", str(suite), "--agent-cmd", "true", "--trust", "--base-url", "https://api.example.com/v1"]
    assert cli([*args, "--sandbox", "on", "-q"], cwd=repo).exit_code == 0


def test_a_shared_writable_directory_the_sandbox_uid_cannot_write_is_one_warning(
    cli, repo: Path, write_suite, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root harness runs its sandboxed programs as another uid")
    shared = tmp_path / "cache"
    shared.mkdir(mode=0o755)
    from worktrial.state.config import USER_FILE, config_dir

    (config_dir() / USER_FILE).parent.mkdir(parents=True, exist_ok=True)
    (config_dir() / USER_FILE).write_text(f"[sandbox]\nwritable = [{json.dumps(str(shared))}]\n")
    write = {"sh": f"echo hi > {shared}/written"}
    suite = write_suite([task("t", verify_commands=["true"], solution=[write])])
    args = ["eval", "--suite", str(suite), "--agent-cmd", f"sh -c 'echo hi > {shared}/x'", "--trust", "-q"]
    result = cli([*args, "--sandbox", "on"], cwd=repo)
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if "[sandbox] writable" in line]
    assert len(warnings) == 1 and f"chmod 1777 {shared}" in warnings[0], result.stderr
    assert not (shared / "x").exists()  # indeed: the agent could not write it
    shared.chmod(0o1777)
    result = cli([*args, "--sandbox", "on"], cwd=repo)
    assert "[sandbox] writable" not in result.stderr and (shared / "x").read_text() == "hi\n"


def test_a_network_that_cannot_come_up_means_the_program_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network stack is attached while bubblewrap holds the program back: when that fails (here the stack
    exits at once), the program must not run offline as if nothing happened, and the command says why."""
    from worktrial.isolation import proc
    from worktrial.isolation.limits import Enforcer, Limits
    from worktrial.isolation.sandbox import AttemptView, Bubblewrap, SandboxDecision, SandboxSettings, _probe_network

    if (why := _probe_network("bwrap")[1]) is not None:
        pytest.skip(f"no network of its own for a sandbox here: {why}")
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    work.chmod(0o777)
    settings = SandboxSettings(mode="on", network="on")
    decision = SandboxDecision("bubblewrap", "on", Limits(), version="test", netstack="slirp4netns")
    view = AttemptView(writable=(work, scratch), readonly=(), home=scratch / "home", scratch=scratch)
    sandbox = Bubblewrap(settings, view, Enforcer(Limits()), "bwrap", decision)
    sandbox.prepare()
    scope = proc.ProcessScope().confined(sandbox)
    ran = proc.run(["/bin/sh", "-c", "echo ran > ran.txt"], cwd=work, scope=scope, timeout=30)
    assert ran.ok and (work / "ran.txt").exists(), ran  # the real stack: the program runs
    (work / "ran.txt").unlink()
    monkeypatch.setenv("WORKTRIAL_SLIRP4NETNS", shutil.which("false") or "/bin/false")
    failed = proc.run(["/bin/sh", "-c", "echo ran > ran.txt"], cwd=work, scope=scope, timeout=30)
    assert not failed.ok and failed.start_error is not None
    assert "could not set up the attempt's network" in failed.start_error
    assert not (work / "ran.txt").exists()


@pytest.mark.slow
def test_many_sandboxes_coming_up_at_once_all_get_their_network() -> None:
    """bubblewrap brings up the namespace's loopback while the harness attaches slirp4netns; racing the two made
    about 4% of commands fail ("loopback: Failed RTM_NEWADDR") when four started at once. 4 x 40 must all work."""
    from worktrial.isolation import netstack, proc
    from worktrial.isolation.sandbox import _probe_network

    if (why := _probe_network("bwrap")[1]) is not None:
        pytest.skip(f"no network of its own for a sandbox here: {why}")
    slirp = netstack.slirp_program()
    assert slirp is not None
    failures: list[str] = []

    def launch() -> None:
        for _ in range(40):
            link = netstack.Link(slirp)
            argv = ["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
            result = proc.run([*argv, *link.bwrap_args(), "--", "/bin/true"], cwd="/", timeout=60, link=link)
            if not result.ok:
                failures.append(result.start_error or result.stderr_tail.decode(errors="replace"))

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_repository_the_sandbox_uid_cannot_read_is_one_warning_with_the_fix(cli, repo: Path, write_suite) -> None:
    """A repository cloned with umask 077: its object store is root's alone, and every attempt's git would fail."""
    if os.geteuid() != 0:
        pytest.skip("only a root harness runs its sandboxed programs as another uid")
    objects = repo / ".git" / "objects"
    objects.chmod(0o700)
    suite = write_suite([task("t", verify_commands=["true"])])
    args = ["eval", "--suite", str(suite), "--agent-cmd", "git log -1", "--trust", "-q", "--sandbox", "on"]
    result = cli(args, cwd=repo)
    warnings = [line for line in result.stderr.splitlines() if "cannot be read by uid" in line]
    assert len(warnings) == 1 and f"chmod -R o+rX {objects}" in warnings[0], result.stderr
    objects.chmod(0o755)
    result = cli(args, cwd=repo)
    assert "cannot be read by uid" not in result.stderr
