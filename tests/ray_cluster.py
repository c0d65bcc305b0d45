"""A real multi-node Ray cluster contained in its own network and PID namespace (tests and benchmarks).

On a normal host Ray swaps 127.0.0.1 for the machine's external address, listens on every interface and probes a
public resolver; and ``ray stop --force`` kills every Ray process on the machine by name, other people's too. So
the cluster lives inside ``unshare -n -p -f --mount-proc``: loopback is its only network (both nodes register as
127.0.0.1), and the namespace's first process is its init. ``unshare --kill-child`` kills that init when we end
``unshare``, and the kernel then kills every process of the namespace — ours, and nothing else. Drivers run inside
with ``nsenter``. Each node is a separate ``ray start`` whose processes carry ``WORKTRIAL_TEST_NODE=<name>`` in
their environment, so a node can be killed by PID (never by name).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODE_VAR = "WORKTRIAL_TEST_NODE"
START_DEADLINE_SECS = 240.0
RAY_PORT = 6379
OBJECT_STORE_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int = 2
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    """Variables of this node's processes only (a node's own container storage, say)."""


def unavailable_reason() -> str | None:
    """Why a contained cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for network and PID namespaces (unshare -n -p)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux / iproute2)"
    if not (Path(sys.executable).parent / "ray").exists():
        return "Ray is not installed (pip install 'worktrial[ray]')"
    probe = subprocess.run(
        ["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        return f"namespaces unavailable: {probe.stderr.decode(errors='replace').strip()[:200]}"
    return None


class ContainedCluster:
    """Head node plus worker nodes, started once; ``run`` executes a command inside the cluster's namespaces."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.root = Path(tempfile.mkdtemp(prefix="wtray-", dir="/tmp"))  # short: Ray's socket paths live under it
        self.address = f"127.0.0.1:{RAY_PORT}"
        self._unshare: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None
        self.start_secs: float | None = None

    def _script(self) -> str:
        ray = Path(sys.executable).parent / "ray"
        common = (
            f"--node-ip-address=127.0.0.1 --object-store-memory={OBJECT_STORE_BYTES} "
            f"--temp-dir={self.root / 't'} --disable-usage-stats"
        )
        # The nodes' workers import this checkout, not the one the venv was installed from (as the tests' harness).
        src = shlex.quote(str(Path(__file__).resolve().parent.parent / "src"))
        lines = ["set -e", "ip link set lo up", "export RAY_USAGE_STATS_ENABLED=0", f"export PYTHONPATH={src}"]
        for i, node in enumerate(self.nodes):
            resources = json.dumps({f"node_{node.name}": 1, **node.resources})
            role = f"--head --port={RAY_PORT} --include-dashboard=false" if i == 0 else f"--address={self.address}"
            log = self.root / f"{node.name}.log"
            own = "".join(f"{k}={shlex.quote(v)} " for k, v in node.env.items())
            lines.append(
                f"{own}{NODE_VAR}={node.name} {ray} start {role} {common} --num-cpus={node.cpus} "
                f"--resources='{resources}' >{log} 2>&1"
            )
        lines += [f"touch {self.root / 'ready'}", "exec sleep infinity"]
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        script = self.root / "init.sh"
        script.write_text(self._script())
        began = time.monotonic()
        self._unshare = subprocess.Popen(
            ["unshare", "-n", "-p", "-f", "--mount-proc", "--kill-child=SIGKILL", "bash", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=open(self.root / "init.out", "wb"),  # noqa: SIM115 - the child owns it
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_DEADLINE_SECS
        while not (self.root / "ready").exists():
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                logs = "".join(p.read_text(errors="replace")[-1500:] for p in sorted(self.root.glob("*.log")))
                self.stop()
                raise RuntimeError(f"the contained Ray cluster did not start:\n{logs}")
            time.sleep(0.2)
        self.start_secs = time.monotonic() - began
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children").read_text().split()
        self.init_pid = int(children[0])

    def _nsenter(self, argv: list[str], cwd: Path) -> list[str]:
        assert self.init_pid is not None, "start() first"
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", f"--wd={cwd}", "--", *argv]

    def run(
        self, argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._nsenter(argv, cwd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def popen(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self._nsenter(argv, cwd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    @staticmethod
    def _ns_of(pid: int) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            return None

    def _in_namespace(self, pid: int) -> bool:
        mine = self._ns_of(self.init_pid) if self.init_pid is not None else None
        return mine is not None and self._ns_of(pid) == mine

    def node_pids(self, name: str) -> list[int]:
        """Host PIDs of one node's processes: in this cluster's PID namespace and started for that node."""
        needle = f"{NODE_VAR}={name}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or not self._in_namespace(int(entry)):
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in environ:
                found.append(int(entry))
        return found

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of one node (raylet, its workers, their agents); how many were signalled."""
        pids = self.node_pids(name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def stop(self) -> None:
        """End the namespace's init: the kernel then kills every process of the cluster, and only those."""
        proc = self._unshare
        ns = None
        if self.init_pid is not None:
            try:
                ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
            except OSError:
                ns = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=60)
        if ns is not None and self.init_pid is not None and self._ns_of(self.init_pid) == ns:
            os.kill(self.init_pid, signal.SIGKILL)  # unshare itself was killed before it could pass the signal on
        shutil.rmtree(self.root, ignore_errors=True)
