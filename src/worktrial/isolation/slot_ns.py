"""A slot's own namespaces, made once: its rooms' overlays are mounted there, and its sandboxed programs enter them.

Without this every sandboxed program of an overlay room paid its own start of ``unshare`` -> ``sh`` -> ``mount -t
overlay`` in front of bubblewrap, and (``--network on``) its own slirp4netns: about two thirds of what a sandboxed
``true`` cost. Here one helper process per slot holds a private mount namespace and, unless the sandbox shares the
host's network, a network namespace of its own (``--network on``: with slirp4netns attached once, as
``netstack.py`` does per program otherwise; ``off``: loopback only). The slot asks it to mount a room's overlay when
the room is made and to unmount it when the room is done (``mount``/``unmount``: a line each on a pipe, answered
by the ``mount(2)``/``umount2(2)`` system calls, no program started); each sandboxed program then starts as
``nsenter`` into those namespaces in front of bubblewrap, which builds the program's own sandbox there exactly as
before (its own PID and IPC namespaces, mounts, uid; ``Sandbox.wrap``).

The helper is also the init of a PID namespace of the slot's, and every sandboxed program of the slot is born in it
(``proc.py`` forks it there, ``Wrapped.pid_namespace``); bubblewrap's own PID namespace is nested inside. That is
what ends an agent with a harness killed with ``kill -9``, whenever the kill comes: bubblewrap's
``--die-with-parent`` alone leaves two windows open. Its outer process arms ``PR_SET_PDEATHSIG`` only after its
``clone``, so a harness killed between its fork and then leaves it running; and the sandbox's first process (the
namespace's init to be) arms its own only once its mounts are made, so when the outer one dies of its signal in
between (as it does when the harness is killed just as a program starts), that init and the program it then starts
outlive everyone. The helper sees its request pipe end however the harness went, and when it exits the kernel ends
every process in its namespace, nested ones included; one forked after that cannot even start (the namespace takes
no new processes once its init is gone).

What is shared and why it is safe: one room's overlay is mounted at a time, at a mount point only that room's
sandboxes show, and a room is made only once every process of the last one is gone (``Sandbox.end_processes``, the
PID namespace each program ends with). The network namespace is the slot's, so the attempts of one slot (one after
the other) and an attempt's phases share it: what a program could leave there is what dies with it (sockets,
listeners); its configuration (addresses, routes, filters) needs ``CAP_NET_ADMIN``, which no sandboxed program has.
Parallel attempts are in different slots and never share one. Root only, as overlay rooms are.

The helper is a few lines of Python (``-I -S``: nothing of the user's site) started under ``unshare``; it ends when
the harness closes its request pipe (also when the harness is killed), and with it every program still in the
slot's PID namespace, and the mount and network namespaces once nothing holds them.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

from worktrial.isolation import netstack, proc

NetworkMode = Literal["on", "off", "host"]
DISABLE_VAR = "WORKTRIAL_SLOT_NAMESPACES"
"""``WORKTRIAL_SLOT_NAMESPACES=off``: every sandboxed program mounts its room's overlay and brings its network up
itself, as without a holder (how the benchmark measures what the holder saves, and the tests run both ways)."""
_START_TIMEOUT_SECS = 30.0
MARKER = "worktrial-slot-namespaces"
"""The helper's last argument: names it in ``ps``."""
_REPLY_TIMEOUT_SECS = 30.0

_HOLDER = r"""
import ctypes, fcntl, json, os, signal, socket, struct, sys
requests, replies, net = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
out = os.fdopen(replies, "w", buffering=1)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the namespace's init: its orphans (bwrap's inits) reaped as they end
if net:  # the namespace's loopback, up, as bubblewrap brings up its own
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
    s.close()
out.write("ready\n")
for line in os.fdopen(requests):
    request = json.loads(line)
    rc = 0
    if request["op"] == "mount":
        os.chdir(request["base"])
        rc = libc.mount(b"overlay", request["target"].encode(), b"overlay", 0, request["options"].encode())
    elif request["op"] == "umount":
        os.chdir(request["base"])
        rc = libc.umount2(request["target"].encode(), 8)  # UMOUNT_NOFOLLOW
        if rc != 0 and ctypes.get_errno() == 16:  # EBUSY: detach it; it goes once its last user is gone
            rc = libc.umount2(request["target"].encode(), 8 | 2)
    errno = ctypes.get_errno() if rc != 0 else 0
    out.write(("ok" if rc == 0 else "error %d %s" % (errno, os.strerror(errno))) + "\n")
"""


def enabled() -> bool:
    return os.environ.get(DISABLE_VAR, "").strip().lower() not in ("off", "0", "no", "false")


class SlotNamespaces:
    """One slot's mount namespace (and network namespace), held by a helper process for the slot's life."""

    def __init__(self, network: NetworkMode) -> None:
        self.network = network
        """The network its programs get: ``on`` (the slot's namespace with slirp4netns), ``off`` (the slot's, with
        loopback only) or ``host`` (the host's: no namespace of its own)."""
        self.own_network = False
        """Whether programs enter the slot's network namespace (``on`` and ``off``; ``host``: the host's)."""
        self._lock = threading.Lock()
        self._requests = self._replies = -1
        self._mnt = self._net = self._pid = -1
        self._stack: netstack.Stack | None = None
        self.mounted: set[tuple[str, str]] = set()
        """(base, mount point) of each overlay mounted now."""
        unshare = ["unshare", "--mount", "--propagation", "private", *(["--net"] if network != "host" else [])]
        # The helper is the init of the slot's PID namespace, with a /proc of it in the slot's mounts: bubblewrap, born
        # there, finds its child by the pid it knows.
        unshare += ["--pid", "--fork", "--kill-child", "--mount-proc", "--"]
        requests_r, self._requests = os.pipe()
        self._replies, replies_w = os.pipe()
        argv = [*unshare, sys.executable, "-I", "-S", "-c", _HOLDER, str(requests_r), str(replies_w)]
        argv += ["1" if network != "host" else "0", MARKER]
        try:
            self.helper: subprocess.Popen[bytes] | None = proc.spawn_helper(argv, pass_fds=(requests_r, replies_w))
        finally:
            os.close(requests_r)
            os.close(replies_w)
        try:
            said = self._read_line(_START_TIMEOUT_SECS)
            if said != "ready":
                raise OSError(f"the slot's namespace holder did not start ({said or 'no answer'})")
            pid = self.helper.pid
            self._mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            self._pid = os.open(f"/proc/{pid}/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
            if network != "host":
                self._net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                self._attach(pid)
                self.own_network = True
        except BaseException:
            self.close()
            raise

    def _attach(self, pid: int) -> None:
        """``--network on``: slirp4netns on the slot's namespace (``off``: loopback only, already up). Raises OSError
        when it cannot be had: the slot's programs then mount their rooms themselves, each with its own network
        (one with a network of its own is never born in the slot's PID namespace: bubblewrap would name it to the
        network stack by a pid of that namespace)."""
        if self.network == "off":
            return
        program = netstack.slirp_program()
        stack, why = netstack.Stack.start(program, pid) if program is not None else (None, "no slirp4netns")
        if stack is None:
            raise OSError(f"the slot's network could not be brought up: {why}")
        self._stack = stack

    # -- the rooms' overlays ---------------------------------------------------------------------------------------

    def mount(self, base: Path, options: str, target: str) -> None:
        """Mount an overlay at ``base/target`` with ``options`` (layer paths relative to ``base``). Raises OSError."""
        self._ask({"op": "mount", "base": str(base), "options": options, "target": target})
        self.mounted.add((str(base), target))

    def unmount(self, base: Path, target: str) -> None:
        """Unmount the overlay at ``base/target`` (detached if something still uses it). Raises OSError."""
        if (str(base), target) not in self.mounted:
            return
        self._ask({"op": "umount", "base": str(base), "target": target})
        self.mounted.discard((str(base), target))

    def unmount_all(self) -> None:
        for base, target in sorted(self.mounted):
            self.unmount(Path(base), target)

    def holds(self, base: Path, target: str) -> bool:
        return self.alive and (str(base), target) in self.mounted

    @property
    def alive(self) -> bool:
        return self.helper is not None and self.helper.poll() is None and self._mnt >= 0

    # -- entering them ----------------------------------------------------------------------------------------------

    def enter(self) -> tuple[list[str], tuple[int, ...]]:
        """The argv in front of bubblewrap's that runs it in the slot's namespaces, and the descriptors it needs."""
        argv = ["nsenter", f"--mount=/proc/self/fd/{self._mnt}"]
        fds = [self._mnt]
        if self.own_network:
            argv.append(f"--net=/proc/self/fd/{self._net}")
            fds.append(self._net)
        return [*argv, "--"], tuple(fds)

    @property
    def pid_namespace(self) -> int:
        """A descriptor of the slot's PID namespace, which the slot's sandboxed programs are forked into: they end
        when the helper does (``proc.py``; the module docstring says why)."""
        return self._pid

    # -- the helper -------------------------------------------------------------------------------------------------

    def _ask(self, request: dict[str, str]) -> None:
        with self._lock:
            if not self.alive:
                raise OSError("the slot's namespace holder is gone")
            os.write(self._requests, (json.dumps(request) + "\n").encode())
            said = self._read_line(_REPLY_TIMEOUT_SECS)
        if said != "ok":
            raise OSError(f"{request['op']} of a room's overlay failed: {said or 'no answer'}")

    def _read_line(self, seconds: float) -> str:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([self._replies], [], [], seconds)
            if not ready:
                return ""
            chunk = os.read(self._replies, 4096)
            if not chunk:
                return ""
            data += chunk
        return data.decode("utf-8", "replace").strip()

    def close(self) -> None:
        """End the helper (its namespaces go once the last program in them ended). Safe to call twice."""
        if self._stack is not None:
            self._stack.release()
            self._stack = None
        for name in ("_requests", "_replies", "_mnt", "_net", "_pid"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)
        helper, self.helper = getattr(self, "helper", None), None
        if helper is not None:
            proc.reap_helper(helper, grace=2.0)
        self.mounted.clear()
