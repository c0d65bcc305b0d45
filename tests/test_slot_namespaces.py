"""One mount (and network) namespace per slot: a room's overlay is mounted there once, its programs enter it, and
nothing of it outlives the room, the slot or a harness killed with kill -9 (``isolation/slot_ns.py``)."""

from __future__ import annotations

import contextlib
import os
import shlex
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

from tests.conftest import SuiteWriter, alive_with_marker, task
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


class _Harness:
    """``worktrial eval --sandbox on`` of one task whose agent sleeps carrying ``marker``, in a process of its own."""

    def __init__(self, repo: Path, write_suite: SuiteWriter, marker: str, env: dict[str, str] | None = None) -> None:
        self.marker = marker
        suite = write_suite([task("t", timeout_secs=600)])
        agent = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
        command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--agent-cmd", agent]
        self.process = subprocess.Popen(
            [*command, "--jobs", "2", "--sandbox", "on", "-q"],
            cwd=repo,
            env={**os.environ, "WORKTRIAL_TRUST": "1", **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.holders: list[int] = []

    def own(self, *patterns: str) -> list[int]:
        """The harness's descendants whose command line holds every pattern (the harness's own holds the marker)."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                cmdline = " ".join(child.cmdline())
                if all(pattern in cmdline for pattern in patterns):
                    found.append(child.pid)
            except psutil.Error:  # gone, or a zombie (the sandbox probes' bwrap) between the listing and the look
                continue
        return found

    def kill_9(self) -> None:
        """``kill -9`` of the harness, once it has a helper holding a slot's namespaces; then wait for the helper
        to see it and end."""
        _wait_until(lambda: bool(self.own(MARKER)), "a helper of the harness to hold the slot's namespaces")
        self.holders = self.own(MARKER)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        _wait_until(lambda: not any(_running(pid) for pid in self.holders), "the holder to end with the harness")

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        for pid in [*_carrying(self.marker), *(p for p in self.holders if _running(p))]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _carrying(marker: str) -> list[int]:
    """Live processes with ``marker`` in their command line, bubblewrap's and its wrappers' included."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        live = process.info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
        if live and any(marker in arg for arg in process.info["cmdline"] or ()):
            found.append(process.pid)
    return found


def _agent(marker: str) -> list[int]:
    """The agent itself: ``python -c '...' MARKER``, not a bubblewrap or shell carrying its command line."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if process.info["status"] != psutil.STATUS_ZOMBIE and cmdline[-1:] == [marker] and cmdline[1:2] == ["-c"]:
            found.append(process.pid)
    return found


def test_kill_9_of_the_harness_ends_its_slots_namespaces(repo: Path, write_suite: SuiteWriter) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    harness = _Harness(repo, write_suite, f"wt-agent-{uuid.uuid4().hex}")
    try:
        _wait_until(lambda: bool(_agent(harness.marker)), "the agent to run")
        harness.kill_9()
        _wait_until(lambda: not _carrying(harness.marker), "the agent to die with the harness")
    finally:
        harness.end()


_HELD = """#!/bin/sh
# bubblewrap, held back at {where} for the agent's program only, until a line arrives on the fifo
case "$*" in *{marker}*) ;; *) exec bwrap "$@" ;; esac
exec 7<>{fifo}
if [ {where} = before ]; then read -r go <&7; exec bwrap "$@" 7<&-; fi
exec bwrap --block-fd 7 "$@"
"""


@pytest.mark.slow  # a harness run each, ~3 s
@pytest.mark.parametrize("where", ["before", "setup"])
def test_kill_9_just_as_the_agent_starts_ends_it_too(
    repo: Path, write_suite: SuiteWriter, tmp_path: Path, where: str
) -> None:
    """bubblewrap's --die-with-parent leaves two windows: before its outer process arms PR_SET_PDEATHSIG
    (``before``: the harness killed before bwrap started), and before the sandbox's init arms its own while its
    mounts are made (``setup``: its outer process then dies of its signal and the init lives on). The harness is
    killed with the agent's sandbox held in each, then the sandbox is let go: nothing of it may go on."""
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    marker = f"wt-agent-{uuid.uuid4().hex}"
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    held = tmp_path / "bwrap-held"
    held.write_text(_HELD.format(where=where, marker=marker, fifo=shlex.quote(str(fifo))))
    held.chmod(0o755)
    harness = _Harness(repo, write_suite, marker, {"WORKTRIAL_BWRAP": str(held)})
    try:
        # before: the wrapper waits (sh running it); setup: bubblewrap's sandbox process, child of its outer one.
        waiting, processes = (f"{held} ", 1) if where == "before" else ("--block-fd 7", 2)
        _wait_until(lambda: len(harness.own(waiting, marker)) == processes, "the agent's sandbox to be held")
        harness.kill_9()
        with contextlib.suppress(OSError):  # ENXIO: nothing reads the fifo any more, nothing is left to let go
            go = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(go, b"go\n")
            os.close(go)

        def ended() -> bool:
            assert not _agent(marker), f"the agent started after the harness was killed ({where})"
            return not _carrying(marker)

        _wait_until(ended, "the agent's sandbox to end with the harness")
    finally:
        harness.end()
