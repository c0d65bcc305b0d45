"""An attempt's own network with outbound access (``--network on``): slirp4netns on a sandbox's network namespace.

bubblewrap makes the namespace (``--unshare-net``: loopback only) and reports its first process on ``--info-fd``,
holding it on ``--block-fd`` until the harness lets it go. In between the harness attaches slirp4netns, a userspace
TCP/IP stack (Debian's package), to that namespace: the sandbox gets ``tap0`` (10.0.2.100/24, gateway 10.0.2.2, DNS
at 10.0.2.3) and its connections leave through the harness's own sockets. ``--disable-host-loopback`` keeps the
host's 127.0.0.1 out of reach, so no attempt shares a port, an abstract socket or a loopback service with the host
or with another attempt. slirp4netns ends when the harness closes its ``--exit-fd`` (or dies).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from worktrial.isolation import proc

SLIRP = "slirp4netns"
SLIRP_ENV = "WORKTRIAL_SLIRP4NETNS"
"""Names the slirp4netns program (default on PATH); tests point it at nothing to see the fallback."""
DNS = "10.0.2.3"
RESOLV_CONF = f"nameserver {DNS}\n"
"""The sandbox's /etc/resolv.conf: slirp4netns answers DNS there with the host's resolver."""
_ATTACH_TIMEOUT_SECS = 10.0
_MTU = "65520"


def slirp_program() -> str | None:
    """The slirp4netns to use, or None when this machine has none."""
    name = os.environ.get(SLIRP_ENV) or SLIRP
    return shutil.which(name)


@dataclass
class Link:
    """The network of one sandboxed process: the pipes bubblewrap reports and waits on, and the stack attached."""

    program: str
    info_r: int = -1
    info_w: int = -1
    block_r: int = -1
    block_w: int = -1
    stack: Stack | None = None
    _fds: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.info_r, self.info_w = os.pipe()
        self.block_r, self.block_w = os.pipe()
        self._fds = [self.info_r, self.info_w, self.block_r, self.block_w]

    def bwrap_args(self) -> list[str]:
        return ["--unshare-net", "--info-fd", str(self.info_w), "--block-fd", str(self.block_r)]

    @property
    def child_fds(self) -> tuple[int, ...]:
        """The descriptors bubblewrap inherits."""
        return (self.info_w, self.block_r)

    def attach(self) -> str | None:
        """Once bubblewrap started: bring the namespace's network up and let its program run. None when that
        worked (or bubblewrap ended before it made the namespace, which it reports itself), else why not."""
        self._close(self.info_w, self.block_r)
        pid = self._child_pid()
        if pid is None:
            return None  # bubblewrap failed before making the namespace: its own error says why
        # bubblewrap's child brings up the namespace's loopback itself; configuring tap0 at the same moment makes
        # that fail now and then ("loopback: Failed RTM_NEWADDR", 4% of commands with 4 running at once).
        _await_loopback(pid, time.monotonic() + _ATTACH_TIMEOUT_SECS)
        self.stack, why = Stack.start(self.program, pid, userns=os.geteuid() != 0)
        if self.stack is None:
            return why
        with contextlib.suppress(OSError):  # bubblewrap already ended (a mount it could not make): its exit says why
            os.write(self.block_w, b"1")
        self._close(self.block_w)
        return None

    def release(self) -> None:
        """After the sandbox ended: stop the stack and close every descriptor. Safe to call twice."""
        self._close(*self._fds)
        if self.stack is not None:
            self.stack.release()
            self.stack = None

    def _child_pid(self) -> int | None:
        data = b""
        deadline = time.monotonic() + _ATTACH_TIMEOUT_SECS
        while time.monotonic() < deadline:
            chunk = _read_within(self.info_r, 4096, deadline - time.monotonic())
            if not chunk:
                return None
            data += chunk
            with contextlib.suppress(ValueError):
                pid = json.loads(data).get("child-pid")
                return pid if isinstance(pid, int) and pid > 0 else None
        return None

    def _close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self._fds:
                self._fds.remove(fd)
                self._close_now(fd)

    @staticmethod
    def _close_now(*fds: int) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class Stack:
    """slirp4netns attached to the network namespace of one process: the namespace gets ``tap0`` and its way out."""

    helper: subprocess.Popen[bytes]
    exit_w: int

    @classmethod
    def start(cls, program: str, pid: int, *, userns: bool = False) -> tuple[Stack | None, str | None]:
        """Attach to the namespace of ``pid`` (``userns``: enter its user namespace first); the stack once it is up,
        else None and why."""
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        argv = [program, "--configure", f"--mtu={_MTU}", "--disable-host-loopback"]
        argv += [f"--ready-fd={ready_w}", f"--exit-fd={exit_r}"]
        if userns:  # bubblewrap made a user namespace too: slirp4netns must enter it first
            argv.append(f"--userns-path=/proc/{pid}/ns/user")
        try:
            helper = proc.spawn_helper([*argv, str(pid), "tap0"], pass_fds=(ready_w, exit_r))
        except OSError as exc:
            Link._close_now(ready_r, exit_w)
            return None, f"{program} could not start: {exc.strerror}"
        finally:
            Link._close_now(ready_w, exit_r)
        try:
            ready = _read_within(ready_r, 1, _ATTACH_TIMEOUT_SECS)
        finally:
            os.close(ready_r)
        stack = cls(helper, exit_w)
        if ready != b"1":
            code = helper.poll()
            stack.release()
            return None, f"{program} could not set up the attempt's network" + (f" (exit {code})" if code else "")
        return stack, None

    def release(self) -> None:
        """Stop the stack. Safe to call twice."""
        if self.exit_w >= 0:
            Link._close_now(self.exit_w)
            self.exit_w = -1
        # The namespace's programs are gone: nothing is left to flush. slirp4netns holds the namespace's last
        # reference, and the kernel's teardown of it makes its exit take 20-45 ms, which no sandboxed command should
        # wait for: it is killed at once and reaped in the background.
        proc.reap_helper(self.helper, grace=0.0, background=True)


def _await_loopback(pid: int, deadline: float) -> None:
    """Wait until the namespace of ``pid`` has its loopback address routed (bubblewrap's last step in setting it
    up: the local route exists once ``lo`` is up), or the process is gone, or the deadline passed."""
    pause = 0.0002
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/net/fib_trie", "rb") as f:
                if b"127.0.0.1" in f.read():
                    return
        except OSError:
            return  # gone: bubblewrap reports why
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def _read_within(fd: int, size: int, seconds: float) -> bytes:
    """Up to ``size`` bytes from ``fd``, or b"" at its end or after ``seconds``."""
    ready, _, _ = select.select([fd], [], [], max(0.0, seconds))
    if not ready:
        return b""
    try:
        return os.read(fd, size)
    except OSError:
        return b""
