"""Which processes belong to an attempt's process, so that all of them end with it.

A process token in the environment (``WORKTRIAL_PROC_TOKEN``) finds descendants that kept it, but an agent can
drop it (``env -u``) and leave its session (``setsid``); then nothing about the process says where it came from.
So each tracked process (a *root*: agent, setup or verify command) is also followed by its place in the process
tree. The harness makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``): orphans re-parent to the harness
instead of init and stay findable. A sampler thread records every descendant of every live root while they are
still descendants; an orphan that was never sampled (a fast double fork) is a direct child of the harness that the
harness did not spawn, and it is attributed to the roots that were alive when it was born. At a root's end all of
it is stopped (SIGSTOP, so nothing forks while it is collected), collected again until nothing new turns up, then
killed (SIGKILL) and reaped. Where the subreaper is not available (macOS, or ``WORKTRIAL_PROC_DISABLE=subreaper``),
the process group, the sampled descendants and the token remain, with one warning.

Identities are ``(pid, create time)``: a pid that was reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from worktrial.isolation.cgroups import kill, remove

log = logging.getLogger(__name__)
TOKEN_VAR = "WORKTRIAL_PROC_TOKEN"
DISABLE_VAR = "WORKTRIAL_PROC_DISABLE"
"""Comma-separated features to act as if this platform lacked (``subreaper``): how tests cover other platforms."""
SAMPLE_SECS = 0.1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_ROUNDS = 50
_CTIME_SLACK = 0.02


@dataclass(frozen=True, order=True)
class ProcIdentity:
    """One process, as recorded: its pid, its create time (pids are reused) and the token of the root it came from."""

    pid: int
    create_time: float
    token: str


def disabled(feature: str) -> bool:
    return feature in {f.strip() for f in os.environ.get(DISABLE_VAR, "").split(",")}


_subreaper = False
_degraded: str | None = None
"""Why ``enable_subreaper`` failed; warned about once, when the first tracked process starts."""


def enable_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (the harness calls it once, at start).

    Returns False where that is impossible; the first tracked process then logs one warning: processes that
    leave their session and drop the token may outlive their attempt.
    """
    global _subreaper, _degraded
    if _subreaper:
        return True
    why = ""
    if disabled("subreaper"):
        why = f"disabled by {DISABLE_VAR}"
    elif not sys.platform.startswith("linux"):
        why = f"not available on {sys.platform}"
    else:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                why = os.strerror(ctypes.get_errno())
        except (OSError, AttributeError) as exc:
            why = str(exc)
    _subreaper = not why
    _degraded = why or None
    return _subreaper


def _warn_degraded() -> None:
    global _degraded
    if _degraded is not None:
        log.warning(
            "cannot make worktrial the reaper of its agents' orphans (%s): falling back to process groups and "
            "the %s marker; a process that leaves its session and drops the marker may outlive its attempt",
            _degraded,
            TOKEN_VAR,
        )
        _degraded = None


def is_subreaper() -> bool:
    return _subreaper


@dataclass
class _Entry:
    ppid: int
    create_time: float
    zombie: bool
    sid: int = -1


def _table() -> dict[int, _Entry]:
    """Every visible process: parent, create time, zombie or not (one pass over the process table).

    On Linux this reads each ``/proc/<pid>/stat`` once (psutil's ``process_iter`` reads it three times per process,
    which made a pass ten times slower, and a pass runs at the end of every process); create times are computed
    exactly as psutil computes them, so identities from either source compare equal. Elsewhere, psutil.
    """
    if _PROC_STAT:
        return _proc_table()
    table: dict[int, _Entry] = {}
    for p in psutil.process_iter(["ppid", "create_time", "status"]):
        info = p.info
        if info.get("ppid") is None or info.get("create_time") is None:
            continue
        sid = -1
        with contextlib.suppress(OSError):
            sid = os.getsid(p.pid)
        table[p.pid] = _Entry(info["ppid"], info["create_time"], info.get("status") == psutil.STATUS_ZOMBIE, sid)
    return table


_PROC_STAT = sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")
_TICKS = os.sysconf("SC_CLK_TCK") if _PROC_STAT else 100


def _proc_table() -> dict[int, _Entry]:
    boot = psutil.boot_time()
    table: dict[int, _Entry] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
            # cutime cstime priority nice threads itrealvalue starttime
            ctime = boot + float(fields[19]) / _TICKS
            table[int(name)] = _Entry(int(fields[1]), ctime, fields[0] in (b"Z", b"X"), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def pids_with_token(tokens: Iterable[str]) -> dict[int, str]:
    """Every process whose environment carries one of these tokens (pid -> token)."""
    wanted = {f"{TOKEN_VAR}={t}".encode() for t in tokens}
    if not wanted:
        return {}
    me = os.getpid()
    found: dict[int, str] = {}
    prefix = f"{TOKEN_VAR}=".encode()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            entries = _environ(pid)
        except (psutil.Error, OSError):
            continue
        for entry in entries:
            if entry in wanted:
                found[pid] = entry[len(prefix) :].decode()
                break
    return found


def _environ(pid: int) -> list[bytes]:
    if _PROC_STAT:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    return [f"{k}={v}".encode() for k, v in psutil.Process(pid).environ().items()]


def _children(table: dict[int, _Entry]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.ppid, []).append(pid)
    return children


def descendants(starts: Iterable[int], table: dict[int, _Entry]) -> set[int]:
    """``starts`` (those still in the table) and everything below them."""
    children = _children(table)
    todo = [pid for pid in starts if pid in table]
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, ()))
    return seen


def _same(entry: _Entry | None, create_time: float) -> bool:
    return entry is not None and abs(entry.create_time - create_time) <= _CTIME_SLACK


@dataclass
class _Root:
    token: str
    pid: int
    create_time: float
    members: dict[int, float] = field(default_factory=dict)
    on_change: Callable[[], None] | None = None
    cgroup: Path | None = None
    """The root's cgroup v2 where the harness can create one (see ``cgroups.py``): ended by the kernel."""
    owns_cgroup: bool = True
    """Whether the cgroup is the root's own (removed with it) or the attempt's cgroup of limits (left for it)."""


class Tracker:
    """The harness's process bookkeeping: one per process, shared by every run and thread in it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.spawn_lock = threading.Lock()
        """Held while a child is spawned and registered, so a fresh child is never mistaken for an orphan."""
        self._spawned: set[int] = set()
        self._roots: dict[str, _Root] = {}
        self._reap: set[int] = set()
        self._ambiguous: dict[int, tuple[float, set[str]]] = {}
        """Orphans that could belong to several roots: pid -> (create time, candidate roots), see ``_orphans``."""
        self._sampler: threading.Thread | None = None
        self._windows: list[float] = []
        """Start times of the open ``foreign_births`` blocks: orphans born since the earliest are nobody's yet."""
        self._foreign: dict[int, float] = {}
        """A container runtime's monitors (pid -> create time), adopted in a ``foreign_births`` block: never an
        attempt's orphan, nor anything of their sessions while they live (see ``foreign_births``)."""

    # -- spawning ------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def spawning(self) -> Iterator[Callable[[int], None]]:
        """``with tracker.spawning() as spawned: proc = Popen(...); spawned(proc.pid)``."""
        with self.spawn_lock:
            yield self._spawned.add

    def reaped(self, pid: int) -> None:
        """The spawner has waited for its child: the pid may now be reused."""
        with self.spawn_lock:
            self._spawned.discard(pid)

    @contextlib.contextmanager
    def foreign_births(self) -> Iterator[Callable[[int], None]]:
        """``with tracker.foreign_births() as adopt: ...start a container...; adopt(monitor_pid)``.

        Podman has no daemon: each container's monitor (conmon) double-forks out of the command that started it
        and, the harness being a subreaper, becomes the harness's orphan, born while other attempts' processes
        run. Taken for one of theirs, it would be killed when they end, and the container with it. Orphans born
        while such a block is open are nobody's until it closes; the adopted one (and the processes of its
        session, such as its cleanup command, while it lives) is never an attempt's, and is reaped when it ends.
        """
        opened = time.time()
        with self._lock:
            self._windows.append(opened)
        try:
            yield self._adopt
        finally:
            with self._lock:
                self._windows.remove(opened)

    def _adopt(self, pid: int) -> None:
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error:
            return
        with self._lock:
            self._foreign[pid] = create_time
            for root in self._roots.values():  # a sampler that ran before the adoption may have taken it
                root.members.pop(pid, None)

    def _is_foreign(self, pid: int, entry: _Entry, table: dict[int, _Entry]) -> bool:
        """An adopted monitor, a process of its session while it lives, or an orphan born in an open block."""
        if pid in self._foreign or (
            entry.sid in self._foreign and _same(table.get(entry.sid), self._foreign[entry.sid])
        ):
            return True
        return bool(self._windows) and entry.create_time + _CTIME_SLACK >= min(self._windows)

    # -- roots ---------------------------------------------------------------------------------------------
    def start(
        self,
        token: str,
        pid: int,
        on_change: Callable[[], None] | None = None,
        cgroup: Path | None = None,
        owns_cgroup: bool = True,
    ) -> None:
        """Follow ``pid`` (just spawned with ``token``, in ``cgroup`` if any) and all it starts until ``end(token)``."""
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error:
            create_time = 0.0
        _warn_degraded()
        with self._lock:
            self._roots[token] = _Root(token, pid, create_time, {pid: create_time}, on_change, cgroup, owns_cgroup)
            if self._sampler is None:
                self._sampler = threading.Thread(target=self._sample_loop, name="worktrial-proc-sampler", daemon=True)
                self._sampler.start()
        if on_change is not None:
            on_change()

    def alive_roots(self) -> int:
        """How many tracked processes are running now."""
        with self._lock:
            return len(self._roots)

    def tracked(self, token: str) -> bool:
        with self._lock:
            return token in self._roots

    def identities(self, tokens: Iterable[str]) -> list[ProcIdentity]:
        """The recorded live processes of these roots (for the leftovers file)."""
        with self._lock:
            return sorted(
                ProcIdentity(pid, ctime, root.token)
                for token in tokens
                if (root := self._roots.get(token)) is not None
                for pid, ctime in root.members.items()
            )

    def signal(self, token: str, sig: signal.Signals, *, exclude: frozenset[int] = frozenset()) -> None:
        """Send ``sig`` to every process of the root but ``exclude`` (the polite first step before a deadline's
        SIGKILL), and to every process carrying its token (a command exec'd into a container runs under the
        runtime's monitor, outside the harness's tree)."""
        with self._lock:
            root = self._roots.get(token)
        if root is None:
            return
        table = _table()
        for pid in self._collect(root, table) | (set(pids_with_token([token])) & set(table)):
            if pid not in exclude and not table[pid].zombie:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def alive(self, token: str) -> bool:
        """Whether any process of the root is still running."""
        with self._lock:
            root = self._roots.get(token)
        if root is None:
            return False
        table = _table()
        return any(not table[pid].zombie for pid in self._collect(root, table))

    def end(self, token: str, *, contained: bool = False) -> list[int]:
        """End the root's process and every process attributed to it; the pids that survived SIGKILL.

        ``contained``: the root was the outer process of a sandbox with its own PID namespace and has exited by
        itself. The namespace's init is reaped only after every other process in the namespace has gone, and
        nothing can leave a PID namespace, so there is nothing left to find: the scans of the process table
        (descendants, orphans, token carriers) are skipped, and the cgroup (if any) is still killed and removed.
        """
        with self._lock:
            root = self._roots.get(token)
        if root is None:
            return []
        try:
            if root.cgroup is not None:  # the kernel ends all of it; the tree and marker sweep catch the rest
                self.reap_killed(kill(root.cgroup))
            survivors = [] if contained else kill_all(lambda table: self._collect(root, table), tokens=[token])[1]
        finally:
            if root.cgroup is not None and root.owns_cgroup:
                remove(root.cgroup)
            with self._lock:
                self._roots.pop(token, None)
                live = set(self._roots)
                # Two candidates ending at once each saw the other alive: the last one out ends the orphan.
                left = {pid: c for pid, (c, roots) in self._ambiguous.items() if not roots & live}
                for pid in left:
                    del self._ambiguous[pid]
        if left:
            kill_all(lambda table: {p for p, c in left.items() if _same(table.get(p), c)})
        if root.on_change is not None:
            root.on_change()
        return survivors

    def _collect(self, root: _Root, table: dict[int, _Entry]) -> set[int]:
        """Every process in ``table`` that belongs to ``root`` now (also updates its recorded members)."""
        with self._lock:
            known = [pid for pid, ctime in root.members.items() if _same(table.get(pid), ctime)]
            found = descendants(known, table)
            if _subreaper:
                found |= descendants(self._orphans(root, table), table)
            for pid in found:
                root.members.setdefault(pid, table[pid].create_time)
            for pid in [p for p in root.members if p not in found]:
                del root.members[pid]
            return found

    def _orphans(self, root: _Root, table: dict[int, _Entry]) -> list[int]:
        """Orphans re-parented to the harness that belong to ``root``: nobody recorded them, and ``root`` is the
        last process still alive of those that were alive when they were born.

        With one process at a time that is exact. With several, an orphan nobody saw being born could be any of
        theirs, so it is left alone until every candidate has ended and then ends with the last of them: never
        earlier than its own attempt. Every tracked process starts its own session and nothing can join the
        harness's session from another, so a child still in the harness's session (one a library such as Ray
        started directly) is never an orphan; nor is one born while no tracked process ran.
        """
        taken = []
        for pid, candidates in self._candidates(table).items():
            if root.token in candidates and candidates <= {root.token}:
                taken.append(pid)
        return taken

    def _candidates(self, table: dict[int, _Entry]) -> dict[int, set[str]]:
        """Unrecorded orphans -> the live roots each could have come from (those born before it)."""
        me = os.getpid()
        own_sid = os.getsid(0)
        with self.spawn_lock:
            spawned = set(self._spawned)
        claimed = {pid for root in self._roots.values() for pid in root.members}
        found: dict[int, set[str]] = {}
        for pid, entry in table.items():
            if entry.ppid != me or entry.sid == own_sid or pid in spawned or pid in claimed:
                continue
            if self._is_foreign(pid, entry, table):
                continue
            roots = {r.token for r in self._roots.values() if r.create_time <= entry.create_time + _CTIME_SLACK}
            if roots:
                found[pid] = roots
                if len(roots) > 1:
                    self._ambiguous.setdefault(pid, (entry.create_time, roots))
        return found

    def _sample_loop(self) -> None:
        while True:
            time.sleep(SAMPLE_SECS)
            with self._lock:
                if not self._roots:
                    self._sampler = None
                    return
            try:
                self.sample()
            except Exception:  # never let bookkeeping kill the harness; the end-of-attempt sweep still runs
                log.debug("process sampling failed", exc_info=True)

    def sample(self) -> None:
        """Record the descendants of every live root now, while they are still descendants."""
        table = _table()
        changed: list[Callable[[], None]] = []
        with self._lock:
            roots = list(self._roots.values())
            before = {root.token: set(root.members) for root in roots}
            if _subreaper:  # an orphan that can only be one root's is recorded as that root's now
                for pid, candidates in self._candidates(table).items():
                    if len(candidates) == 1:
                        self._roots[next(iter(candidates))].members[pid] = table[pid].create_time
            for root in roots:
                self._collect_descendants_only(root, table)
                if set(root.members) != before[root.token] and root.on_change is not None:
                    changed.append(root.on_change)
        self._reap_orphans(table)
        for notify in {id(c): c for c in changed}.values():
            notify()

    def _collect_descendants_only(self, root: _Root, table: dict[int, _Entry]) -> None:
        """Like ``_collect`` but without taking orphans whose root is ambiguous (see ``_orphans``)."""
        known = [pid for pid, ctime in root.members.items() if _same(table.get(pid), ctime)]
        found = descendants(known, table)
        for pid in found:
            root.members.setdefault(pid, table[pid].create_time)
        for pid in [p for p in root.members if p not in found]:
            del root.members[pid]
            if table.get(pid) is not None and table[pid].zombie:
                self._reap.add(pid)

    def _reap_orphans(self, table: dict[int, _Entry]) -> None:
        """Wait for orphans that ended while re-parented to the harness (never for a child someone else waits for)."""
        if not _subreaper:
            return
        me = os.getpid()
        with self._lock, self.spawn_lock:
            spawned = set(self._spawned)
            members = {pid for root in self._roots.values() for pid in root.members}
            foreign = set(self._foreign)
            for pid, entry in table.items():
                ours = pid in members or pid in self._reap or pid in foreign or entry.sid in foreign
                if entry.ppid == me and entry.zombie and pid not in spawned and ours:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)
                    self._reap.discard(pid)
            for pid in foreign:  # reaped (here or by init), or its pid is gone: no longer anyone's session
                if not _same(table.get(pid), self._foreign[pid]) or table[pid].zombie:
                    self._foreign.pop(pid, None)

    def reap_killed(self, pids: Iterable[int]) -> None:
        """Wait for killed orphans now re-parented to the harness (ignoring children someone else waits for)."""
        if not _subreaper:
            return
        with self.spawn_lock:
            for pid in pids:
                if pid in self._spawned:
                    continue
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)


TRACKER = Tracker()


def kill_all(
    collect: Callable[[dict[int, _Entry]], set[int]], tokens: Iterable[str] = ()
) -> tuple[set[int], list[int]]:
    """Stop everything ``collect`` finds (and token carriers), collect again until nothing new, then SIGKILL.

    Stopped processes cannot fork, so a process that keeps forking cannot stay ahead of the collection.
    Returns the pids killed and those still alive (not zombies) after SIGKILL: uninterruptible sleep.
    """
    stopped: dict[int, float] = {}
    carriers = set(pids_with_token(tokens))
    never: set[int] | None = None
    for _ in range(_STOP_ROUNDS):
        table = _table()
        found = collect(table) | carriers
        found |= descendants(found, table)
        new = {p for p in found - stopped.keys() if p in table and not table[p].zombie}
        if new and never is None:
            never = _ancestors()
        new -= never or set()
        if not new:
            break
        for pid in new:
            stopped[pid] = table[pid].create_time
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
    if not stopped:
        return set(), []
    table = _table()
    for pid, ctime in stopped.items():
        if _same(table.get(pid), ctime):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    alive: list[int] = []
    while True:
        TRACKER.reap_killed(stopped)
        table = _table()
        alive = [pid for pid, ctime in stopped.items() if _same(table.get(pid), ctime) and not table[pid].zombie]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return set(stopped), alive


def _ancestors() -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(psutil.Error):
        found = {p.pid for p in psutil.Process().parents()}
    return found | {os.getpid(), 0, 1}


def end_leftovers(records: Iterable[ProcIdentity]) -> int:
    """End the processes a killed harness recorded, and everything below them; how many were ended.

    Each record must still name the same process: same pid and create time, and if it carries a token in its
    environment, the recorded one (a process that dropped its token is identified by pid and create time only,
    which is why the record itself must come from the harness: the caller checks its signature). This process,
    its ancestors and init are never touched.
    """
    records = list(records)
    table = _table()
    never = _ancestors()
    verified: set[int] = set()
    for record in records:
        entry = table.get(record.pid)
        if record.pid in never or entry is None or entry.zombie or not _same(entry, record.create_time):
            continue
        try:
            value = psutil.Process(record.pid).environ().get(TOKEN_VAR)
        except (psutil.Error, OSError):
            continue
        if value is not None and value != record.token:
            continue
        verified.add(record.pid)
    tokens = {r.token for r in records}
    if not verified and not pids_with_token(tokens):
        return 0
    idents = {pid: table[pid].create_time for pid in verified}
    killed, survivors = kill_all(lambda t: {p for p, c in idents.items() if _same(t.get(p), c)}, tokens)
    if survivors:
        log.warning("leftover processes %s survived SIGKILL (uninterruptible sleep?)", survivors)
    return len(killed - never)
