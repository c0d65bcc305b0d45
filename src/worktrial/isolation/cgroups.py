"""One cgroup v2 per tracked process tree, where the harness can create one: the kernel then ends all of it.

A process cannot leave a cgroup without write access to the cgroup filesystem, whatever it does to its session,
parent or environment; so writing ``1`` to ``cgroup.kill`` (Linux 5.14+; older kernels: freeze, SIGKILL every
member, thaw) ends every process of an agent, setup or verify command, including daemons that dropped the
``WORKTRIAL_PROC_TOKEN`` marker and called ``setsid``. It complements ``tracking.py`` rather than replacing it: a
child that forks in the instant between its start and its move into the cgroup, and an agent running as root that
writes itself into another cgroup, are still found by the process tree and the marker.

Only unsandboxed processes get one: a sandboxed process has a PID namespace of its own, which the kernel ends
with its first process (and bubblewrap's ``--die-with-parent`` with the harness), so a cgroup would add nothing
but the cost of moving the process into it.

The harness keeps its cgroups under one parent named after itself (``worktrial-<pid namespace>-<pid>-<start>``)
below its own cgroup. A harness killed with ``kill -9`` leaves that parent behind with whatever still runs in
it; the next ``eval`` or ``resume`` on the machine ends those processes and removes it (``end_stale``): a parent
whose harness no longer runs can only hold leftovers.

Where there is no writable cgroup v2 hierarchy (no root and no delegated subtree, cgroup v1 only, macOS) or with
``WORKTRIAL_PROC_DISABLE=cgroup``, nothing is created and tracking works as before.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import select
import signal
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
_PREFIX = "worktrial-"
_KILL_WAIT_SECS = 5.0


def _v2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on a hybrid system)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split()[:1] == ["cgroup2"]:
            before = fields[0].split()
            if len(before) >= 5 and before[3] == "/":
                return Path(before[4].replace("\\040", " "))
    return None


def _own_v2_cgroup() -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def _write(path: Path, value: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.write(fd, value.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def members(cgroup: Path) -> list[int]:
    """The live processes in ``cgroup`` (exited ones are no longer listed)."""
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill(cgroup: Path) -> list[int]:
    """End every process in ``cgroup`` and wait (bounded) until none is left; the pids that were in it."""
    pids = members(cgroup)
    if not pids:
        return []
    if not _write(cgroup / "cgroup.kill", "1"):  # before Linux 5.14: freeze so nothing forks, kill, thaw
        frozen = _write(cgroup / "cgroup.freeze", "1")
        for pid in members(cgroup):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if frozen:
            _write(cgroup / "cgroup.freeze", "0")
    if not wait_empty(cgroup, _KILL_WAIT_SECS):
        log.debug("cgroup %s still holds processes %.0f s after they were killed", cgroup, _KILL_WAIT_SECS)
    return pids


def wait_empty(cgroup: Path, timeout: float) -> bool:
    """Wait until no process is left in ``cgroup`` (True), or ``timeout`` seconds (False).

    ``cgroup.events`` says ``populated 0`` once the last process has gone, and the kernel wakes a ``poll`` on it
    when that changes: no looking at ``cgroup.procs`` in a loop. Where it cannot be opened (a cgroup v1 directory,
    a plain one in a test), ``cgroup.procs`` is looked at every 5 ms.
    """
    deadline = time.monotonic() + timeout
    try:
        fd = os.open(cgroup / "cgroup.events", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        while members(cgroup):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        while True:
            try:
                populated = b"populated 1" in os.pread(fd, 4096, 0)
            except OSError:  # the cgroup was removed: nothing is left in it
                return True
            left = deadline - time.monotonic()
            if not populated:
                return True
            if left <= 0:
                return False
            poller.poll(max(1, math.ceil(left * 1000)))
    finally:
        os.close(fd)


def remove(cgroup: Path) -> None:
    """Remove an emptied cgroup (and any children an agent with write access made in it)."""
    with contextlib.suppress(OSError):
        for child in cgroup.iterdir():
            if child.is_dir() and not child.is_symlink():
                kill(child)
                remove(child)
    with contextlib.suppress(OSError):
        os.rmdir(cgroup)


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _name() -> str:
    """``worktrial-<pid namespace>-<pid>-<start time>``: who made a parent cgroup, checkable by a later harness."""
    import psutil  # imported where used: every command imports this module, --help too

    try:
        start = int(psutil.Process().create_time() * 100)
    except psutil.Error as exc:
        raise OSError(f"cannot read this process's start time: {exc}") from exc
    return f"{_PREFIX}{_pid_namespace()}-{os.getpid()}-{start}"


def _stale(name: str) -> bool:
    """Whether the harness that made the parent cgroup ``name`` is gone.

    Only parents made in this PID namespace are judged: a pid from another namespace (a container, a Ray test's
    namespace) says nothing here, and its harness may well be running.
    """
    import psutil

    try:
        ns_text, pid_text, start_text = name[len(_PREFIX) :].split("-")
        ns, pid, start = int(ns_text), int(pid_text), int(start_text)
    except ValueError:
        return False
    if ns != _pid_namespace():
        return False
    try:
        return int(psutil.Process(pid).create_time() * 100) != start
    except psutil.Error:
        return True


class Cgroups:
    """The harness's parent cgroup, created on first use; ``None`` from ``create`` where that is impossible."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parent: Path | None = None
        self._tried = False

    def _ensure(self) -> Path | None:
        with self._lock:
            if self._tried:
                return self._parent
            self._tried = True
            if "cgroup" in {f.strip() for f in os.environ.get("WORKTRIAL_PROC_DISABLE", "").split(",")}:
                return None
            mount, own = _v2_mount(), _own_v2_cgroup()
            if mount is None or own is None:
                return None
            base = mount / own.lstrip("/")
            try:
                parent = base / _name()
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                log.debug("no cgroup for attempts under %s: %s", base, exc)
                return None
            self._parent = parent
            atexit.register(remove, parent)  # empty by then: every root's cgroup goes when the root ends
            return parent

    def create(self, token: str) -> Path | None:
        """A fresh cgroup for one tracked process tree, or ``None`` (tracking alone then)."""
        parent = self._ensure()
        if parent is None:
            return None
        cgroup = parent / token
        try:
            cgroup.mkdir()
        except OSError as exc:
            log.debug("cannot create cgroup %s: %s", cgroup, exc)
            return None
        return cgroup

    def join(self, cgroup: Path, pid: int) -> bool:
        """Move ``pid`` (a child just spawned) into ``cgroup``; False if the kernel refused."""
        return _write(cgroup / "cgroup.procs", str(pid))


def end_stale() -> int:
    """End what killed harnesses left in their cgroups on this machine, and remove those; how many processes."""
    if "cgroup" in {f.strip() for f in os.environ.get("WORKTRIAL_PROC_DISABLE", "").split(",")}:
        return 0
    mount, own = _v2_mount(), _own_v2_cgroup()
    return 0 if mount is None or own is None else sweep_stale(mount / own.lstrip("/"))


def sweep_stale(base: Path) -> int:
    """End the processes left in parent cgroups of harnesses that no longer run, and remove those cgroups."""
    ended = 0
    try:
        stale = [d for d in base.iterdir() if d.name.startswith(_PREFIX) and d.is_dir() and not d.is_symlink()]
    except OSError:
        return 0
    for parent in stale:
        if not _stale(parent.name):
            continue
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                if child.is_dir():
                    ended += len(kill(child))
        ended += len(kill(parent))
        remove(parent)
    return ended


CGROUPS = Cgroups()
