"""One mount (and network) namespace per slot: a room's overlay is mounted there once, its programs enter it, and
nothing of it outlives the room, the slot or a harness killed with kill -9 (``isolation/slot_ns.py``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import alive_with_marker, task
from worktrial.isolation import overlay, proc
from worktrial.isolation.limits import Enforcer, Limits
from worktrial.isolation.overlay import Layers
from worktrial.isolation.sandbox import AttemptView, Bubblewrap, SandboxSettings, decide
from worktrial.isolation.slot_ns import MARKER, SlotNamespaces

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (make sandbox)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="overlay rooms are root's (an unprivileged harness copies)"),
]


def _wait_until(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _room(base: Path, name: str, lowers: tuple[str, ...]) -> Layers:
    for part in (f"up-{name}", f"wk-{name}", f"m-{name}"):
        (base / part).mkdir()
    uid = decide(SandboxSettings(mode="on")).uid
    if uid is not None:  # the merged root takes the upper root's owner: the sandbox's uid, as a slot hands it over
        os.chown(base / f"up-{name}", uid, uid)
    return Layers(base, lowers, f"up-{name}", f"wk-{name}", f"m-{name}")


def _sandbox(network: str, layers: Layers, scratch: Path) -> Bubblewrap:
    settings = SandboxSettings(mode="on", network=network)  # type: ignore[arg-type]
    view = AttemptView(writable=(layers.mount_path, scratch), readonly=(), home=scratch / "home", overlay=layers)
    sandbox = Bubblewrap(settings, view, Enforcer(Limits()), "bwrap", decide(settings))
    sandbox.prepare()
    return sandbox


def _run(sandbox: Bubblewrap, layers: Layers, script: str) -> str:
    scope = proc.ProcessScope().confined(sandbox)
    result = proc.run(["/bin/sh", "-c", script], cwd=layers.mount_path, env={"PATH": "/usr/bin:/bin"}, scope=scope)
    assert result.ok, result.stderr_tail.decode()
    return result.stdout_tail.decode()


@pytest.mark.parametrize("network", ["on", "off"])
def test_a_rooms_programs_enter_the_slots_namespaces_and_nothing_outlives_the_room(
    tmp_path: Path, network: str
) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    base = tmp_path / "build"
    (base / "lower").mkdir(parents=True)
    (base / "lower" / "base.txt").write_text("base\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o777)
    scratch.chmod(0o777)
    marker = f"wt-left-{uuid.uuid4().hex}"
    held = SlotNamespaces(network)  # type: ignore[arg-type]
    try:
        assert held.helper is not None
        holder_net = os.readlink(f"/proc/{held.helper.pid}/ns/net")
        holder_mnt = os.readlink(f"/proc/{held.helper.pid}/ns/mnt")
        agent = _room(base, "a", ("lower",))
        held.mount(base, agent.options(), agent.mountpoint)
        agent = Layers(agent.base, agent.lowers, agent.upper, agent.work, agent.mountpoint, held=held)
        sandbox = _sandbox(network, agent, scratch)
        probe = "readlink /proc/self/ns/net; readlink /proc/self/ns/mnt; cat base.txt; cat /proc/net/dev"
        # A daemon the first program leaves behind: its PID namespace ends with it, as without the holder.
        first = _run(sandbox, agent, f"{probe}; echo agent > new.txt; setsid sleep 300 {marker} >/dev/null 2>&1 &")
        second = _run(sandbox, agent, probe)
        assert not alive_with_marker(marker)
        net, mnt, text = first.split("\n")[:3]
        assert net == second.split("\n")[0] == holder_net  # one network for the room's programs: the slot's
        assert mnt != holder_mnt and second.split("\n")[1] != holder_mnt  # each program's own mounts, as before
        assert text == "base"
        assert ("tap0" in first) == (network == "on") and "lo:" in first
        assert (base / "up-a" / "new.txt").read_text() == "agent\n"  # the write landed in the room's upper layer
        assert str(agent.mount_path) not in Path("/proc/self/mountinfo").read_text()  # never the host's mount
        # The verifier's room: the agent's overlay gone, its upper directory a layer under a fresh one.
        held.unmount(base, agent.mountpoint)
        assert not agent.mounted()
        verifier = _room(base, "v", ("up-a", "lower"))
        held.mount(base, verifier.options(), verifier.mountpoint)
        verifier = Layers(base, verifier.lowers, verifier.upper, verifier.work, verifier.mountpoint, held=held)
        seen = _run(_sandbox(network, verifier, scratch), verifier, "cat new.txt base.txt && echo v > v.txt")
        assert seen == "agent\nbase\n" and (base / "up-v" / "v.txt").exists() and not (base / "up-a" / "v.txt").exists()
        held.unmount_all()
        assert held.mounted == set()
        pid = held.helper.pid
    finally:
        held.close()
    assert not _running(pid)


def test_kill_9_of_the_harness_ends_its_slots_namespaces(repo: Path, write_suite) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    marker = f"wt-agent-{uuid.uuid4().hex}"
    suite = write_suite([task("t", timeout_secs=600)])
    env = {**os.environ, "WORKTRIAL_TRUST": "1"}
    agent = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
    command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd", agent, "--jobs", "2"]
    harness = subprocess.Popen(
        [*command, "--sandbox", "on", "-q"], cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    holders: list[int] = []

    def own(pattern: str) -> list[int]:
        """The harness's descendants whose command line holds ``pattern`` (the harness's own holds the marker)."""
        try:
            children = psutil.Process(harness.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                if pattern in " ".join(child.cmdline()):
                    found.append(child.pid)
            except psutil.Error:  # gone, or a zombie (the sandbox probes' bwrap) between the listing and the look
                continue
        return found

    try:
        # Both at once: a process of the harness's that names the agent's command may start before the slot does.
        _wait_until(
            lambda: bool(own("time.sleep(300)") and own(MARKER)),
            "the agent to run while a helper of the harness holds the slot's namespaces",
        )
        holders = own(MARKER)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        _wait_until(lambda: not alive_with_marker(marker), "the agent to die with the harness")  # the harness too
        _wait_until(lambda: not any(_running(pid) for pid in holders), "the holder to end with the harness")
    finally:
        if harness.poll() is None:
            harness.kill()
        for pid in [*alive_with_marker(marker), *(p for p in holders if _running(p))]:
            os.kill(pid, signal.SIGKILL)
