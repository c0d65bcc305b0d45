"""Per-attempt resource limits: a cgroup when the harness can create one, otherwise rlimits.

A cgroup counts every process of the attempt together (a fork loop across many processes hits ``pids.max``;
memory is charged to the attempt, not per process) and says afterwards which limit was hit, so the attempt can
end with that reason. Creating one needs a writable cgroup directory: root, or a delegated cgroup v2 subtree
(systemd ``Delegate=``). Where there is none, ``ulimit`` in the spawning shell gives each process an address-space
limit and a per-user process limit; those are weaker (per process, not enforced for root) and cannot tell
afterwards that they were hit.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import BadInputError

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MIN_MEMORY = 16 * 1024**2


def parse_size(text: str, flag: str = "--max-memory") -> int:
    """``512M``, ``2G``, ``1.5GiB`` or a byte count -> bytes; one clear line for anything else."""
    match = _SIZE.match(str(text))
    if not match:
        raise BadInputError(f"{flag} {text!r} is not a size; use a number with K, M or G (for example 2G)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size < _MIN_MEMORY:
        raise BadInputError(f"{flag} {text} is below the 16M an attempt needs to start anything; raise it")
    return size


@dataclass(frozen=True)
class Limits:
    """What the user asked for; ``None`` is no limit."""

    max_memory: int | None = None
    max_procs: int | None = None

    @property
    def any(self) -> bool:
        return self.max_memory is not None or self.max_procs is not None


@dataclass(frozen=True)
class _Controller:
    """Where one limit lives in one cgroup hierarchy: the directory to create children in and the file names."""

    parent: Path
    limit_file: str
    events_file: str
    event: str
    """The key in ``events_file`` whose count says the limit was hit."""


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller, or for the v2 hierarchy (``controller=''``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "") or controller in controllers.split(","):
            return path
    return None


def _v2_controller(name: str) -> _Controller | None:
    """A cgroup v2 parent in which this process may create children with ``name`` enabled."""
    own = _own_cgroup("")
    if own is None:
        return None
    for base in (_CGROUP_ROOT, _CGROUP_ROOT / "unified"):
        parent = base / own.lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if name in enabled and os.access(parent, os.W_OK):
            if name == "pids":
                return _Controller(parent, "pids.max", "pids.events", "max")
            return _Controller(parent, "memory.max", "memory.events", "oom_kill")
    return None


def _v1_controller(name: str) -> _Controller | None:
    own = _own_cgroup(name)
    if own is None:
        return None
    parent = _CGROUP_ROOT / name / own.lstrip("/")
    if not (parent / "cgroup.procs").exists() or not os.access(parent, os.W_OK):
        return None
    if name == "pids":
        return _Controller(parent, "pids.max", "pids.events", "max")
    return _Controller(parent, "memory.limit_in_bytes", "memory.oom_control", "oom_kill")


def _controller(name: str) -> _Controller | None:
    return _v2_controller(name) or _v1_controller(name)


def _counts(text: bytes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def mechanism() -> str:
    """How limits are enforced on this machine: ``cgroup`` when both controllers can be created, else ``rlimit``."""
    return "cgroup" if _controller("pids") and _controller("memory") else "rlimit"


class Enforcer:
    """One attempt's limits: created before its first process, removed after its last.

    Every process of the attempt is started through ``prefix`` (a tiny shell that joins the cgroups or sets the
    rlimits, then execs the real program), so the limits cover it and everything it starts.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._groups: list[tuple[str, Path, _Controller]] = []
        self._rlimits: list[str] = []
        self.mechanism = "none"
        self.v2_group: Path | None = None
        """The attempt's one cgroup v2 holding every limit (a pure cgroup v2 machine). It is also the cgroup that
        ends each unsandboxed command of the attempt (they run one at a time), so no command is moved out of it."""
        self._events: dict[Path, int] = {}
        """The events files ``hit`` reads, kept open: a re-read of an open cgroup file (``pread`` at 0) costs a
        twentieth of opening it again, and ``hit`` is asked while every process of the attempt runs."""
        self._events_lock = threading.Lock()

    def prepare(self) -> None:
        if not self.limits.any:
            return
        name = f"worktrial-{uuid.uuid4().hex[:12]}"
        wanted = [
            (c, v) for c, v in (("memory", self.limits.max_memory), ("pids", self.limits.max_procs)) if v is not None
        ]
        if (v2 := self._v2_group(name, wanted)) is not None:
            self.v2_group, self._groups, self.mechanism = v2
            return
        for controller, value in wanted:
            found = _controller(controller)
            group = found.parent / name if found else None
            if found is not None and group is not None and self._create(group, found, value):
                self._groups.append((controller, group, found))
            elif controller == "memory":
                self._rlimits.append(f"ulimit -v {max(1, value // 1024)}")
            else:
                self._rlimits.append(f"ulimit -u {value}")
        self.mechanism = "cgroup" if self._groups and not self._rlimits else "rlimit" if not self._groups else "mixed"

    @staticmethod
    def _v2_group(
        name: str, wanted: list[tuple[str, int]]
    ) -> tuple[Path, list[tuple[str, Path, _Controller]], str] | None:
        """One cgroup v2 with every wanted limit, where the v2 hierarchy has all their controllers.

        In cgroup v2 a process is in exactly one cgroup: a group per controller (as in v1) would have the second
        one take the process out of the first, so both limits live in one group.
        """
        found = [(controller, _v2_controller(controller), value) for controller, value in wanted]
        parents = {f.parent for _, f, _ in found if f is not None}
        if not found or any(f is None for _, f, _ in found) or len(parents) != 1:
            return None
        group = parents.pop() / name
        try:
            group.mkdir()
        except OSError:
            return None
        try:
            for _, f, value in found:
                assert f is not None
                (group / f.limit_file).write_text(str(value))
            if any(c == "memory" for c, _, _ in found):
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return None
        return group, [(c, group, f) for c, f, _ in found if f is not None], "cgroup"

    @staticmethod
    def _create(group: Path, found: _Controller, value: int) -> bool:
        try:
            group.mkdir()
        except OSError:
            return False
        try:
            (group / found.limit_file).write_text(str(value))
            if found.limit_file == "memory.max":
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
            elif found.limit_file == "memory.limit_in_bytes":
                with contextlib.suppress(OSError):
                    (group / "memory.memsw.limit_in_bytes").write_text(str(value))
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return False
        return True

    def prefix(self) -> list[str]:
        """Argv to put before a command so that it runs under these limits (empty when there are none)."""
        if not self._groups and not self._rlimits:
            return []
        groups = dict.fromkeys(group for _, group, _ in self._groups)  # one v2 group holds both limits
        steps = [f"echo 0 > {shlex.quote(str(group / 'cgroup.procs'))}" for group in groups]
        steps += self._rlimits
        return ["/bin/sh", "-c", " && ".join(steps) + ' && exec "$@"', "worktrial-limits"]

    def hit(self) -> str | None:
        """Which limit the attempt ran into, as a reason for its record (cgroups only can tell)."""
        for controller, group, found in self._groups:
            if self._read(group / found.events_file).get(found.event, 0) > 0:
                if controller == "pids":
                    return f"attempt hit --max-procs {self.limits.max_procs}"
                return f"attempt hit --max-memory {_human(self.limits.max_memory or 0)}"
        return None

    def _read(self, path: Path) -> dict[str, int]:
        with self._events_lock:
            fd = self._events.get(path)
            if fd is None:
                try:
                    fd = self._events[path] = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    return {}
            try:
                return _counts(os.pread(fd, 4096, 0))
            except OSError:
                return {}

    def cleanup(self) -> None:
        """Remove the cgroups; a process still in one (it should not be) is killed first."""
        with self._events_lock:
            for fd in self._events.values():
                os.close(fd)
            self._events.clear()
        for _, group, _ in self._groups:
            deadline = time.monotonic() + 5.0
            while True:
                with contextlib.suppress(OSError):
                    for pid in (group / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError, ValueError):
                            os.kill(int(pid), 9)
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        self._groups = []
        self.v2_group = None


def _human(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size >= _UNITS[unit.lower()] and size % _UNITS[unit.lower()] == 0:
            return f"{size // _UNITS[unit.lower()]}{unit}"
    return str(size)
