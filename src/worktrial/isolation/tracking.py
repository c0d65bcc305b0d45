"""Which processes belong to an attempt's process, so that all of them end with it.

A process token in the environment (``WORKTRIAL_PROC_TOKEN``) finds descendants that kept it, but an agent can
drop it (``env -u``) and leave its session (``setsid``); then nothing about the process says where it came from.
So each tracked process (a *root*: agent, setup or verify command) is followed by what the kernel says about it:

- **A sandbox with its own PID namespace** (bubblewrap): nothing started in it can leave the namespace, and the
  kernel ends all of it with its first process (bubblewrap's ``--die-with-parent`` with the harness). Nothing is
  watched while it runs; ended early, its processes are the sandbox's process tree.
- **Its own cgroup** (``cgroups.py``, unsandboxed, where the harness can make one): its processes are the
  cgroup's ``cgroup.procs``, and ``cgroup.kill`` ends all of them, whatever they did to session, parent or
  environment.
- **Its token, for a command exec'd into a container**: what it starts runs under the container runtime's monitor,
  outside the harness's tree, so when such a command is signalled or ended early (a deadline) the processes carrying
  its token are found and ended too. A runtime's monitor the harness adopts (``foreign_births``) is never an
  attempt's orphan.
- **Its place in the process tree.** The harness makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``):
  orphans re-parent to the harness instead of init and stay findable among its children. An orphan nobody
  recorded is a child of the harness that the harness did not spawn, attributed to the root whose session it
  is still in, or else to the roots that were alive when it was born.

Children are read from ``/proc/<pid>/task/<tid>/children``, so the cost follows the attempt's own processes and
never the number of processes on the machine: nothing here scans the machine's process table while a process
runs or when it ends. A sampler thread looks at each unsandboxed root every ``SAMPLE_SECS`` (its cgroup's
members, or its tree) so that the run's journal of live processes (``state/leftovers.py``) names them and an
orphan is known as its root's; a sandboxed root is not sampled at all.

At a root's end all of it is stopped (SIGSTOP, so nothing forks while it is collected), collected again until
nothing new turns up, then killed (SIGKILL) and reaped. Where the subreaper is not available (macOS, or
``WORKTRIAL_PROC_DISABLE=subreaper``), the process group, the sampled descendants and the token remain, with one
warning; finding token carriers then takes a look at every process's environment, once, when a root ends.
Without ``/proc/<pid>/task/<tid>/children`` (not Linux, or a kernel without ``CONFIG_PROC_CHILDREN``), each look
reads the whole process table instead.

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

from worktrial.isolation.cgroups import kill, members, remove

log = logging.getLogger(__name__)
TOKEN_VAR = "WORKTRIAL_PROC_TOKEN"
DISABLE_VAR = "WORKTRIAL_PROC_DISABLE"
"""Comma-separated features to act as if this platform lacked (``subreaper``): how tests cover other platforms."""
SAMPLE_SECS = 1.0
"""How often each unsandboxed root's processes are looked at while it runs (its cgroup's members, or its tree)."""
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


_PROC_STAT = sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")
_TICKS = os.sysconf("SC_CLK_TCK") if _PROC_STAT else 100
_PER_PROCESS = _PROC_STAT and os.path.exists(f"/proc/self/task/{os.getpid()}/children")
"""Whether a process's children can be read from its own ``/proc`` entry (Linux with ``CONFIG_PROC_CHILDREN``)."""
_boot: float | None = None


def _boot_time() -> float:
    """The boot time psutil computes create times from, read once (it does not change while the machine runs)."""
    global _boot
    if _boot is None:
        import psutil  # only here and where there is no /proc: `worktrial --help` needs none of it

        _boot = psutil.boot_time()
    return _boot


def _stat(pid: int) -> _Entry | None:
    """One process from ``/proc/<pid>/stat`` (None once it is gone), its create time computed exactly as psutil
    computes it, so that identities from either source compare equal."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        # cutime cstime priority nice threads itrealvalue starttime
        ctime = _boot_time() + float(fields[19]) / _TICKS
        return _Entry(int(fields[1]), ctime, fields[0] in (b"Z", b"X"), int(fields[3]))
    except (OSError, IndexError, ValueError):
        return None


def _children_of(pid: int, *, all_threads: bool = True) -> list[int]:
    """The children of ``pid``: each is listed under the thread that forked it, so every thread's list is read
    (only the main thread's with ``all_threads=False``)."""
    tids = [str(pid)]
    if all_threads:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(child) for child in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def _table() -> dict[int, _Entry]:
    """Every visible process (one pass over the whole process table): only where children cannot be read per
    process. psutil where there is no ``/proc``."""
    import psutil

    table: dict[int, _Entry] = {}
    if _PROC_STAT:
        for name in os.listdir("/proc"):
            if name.isdigit() and (entry := _stat(int(name))) is not None:
                table[int(name)] = entry
        return table
    for p in psutil.process_iter(["ppid", "create_time", "status"]):
        info = p.info
        if info.get("ppid") is None or info.get("create_time") is None:
            continue
        sid = -1
        with contextlib.suppress(OSError):
            sid = os.getsid(p.pid)
        table[p.pid] = _Entry(info["ppid"], info["create_time"], info.get("status") == psutil.STATUS_ZOMBIE, sid)
    return table


class Procs:
    """The processes one look at an attempt concerns, as the kernel shows them now: each process's entry and
    children are read when first asked for and kept for the look, so its cost follows the processes looked at, not
    the machine. Where children cannot be read per process, the look starts from the whole process table."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry | None] = {}
        self._children: dict[int, list[int]] = {}
        self._harness: list[int] | None = None
        self._complete = not _PER_PROCESS
        if self._complete:
            table = _table()
            self._entries.update(table)
            for pid, entry in table.items():
                self._children.setdefault(entry.ppid, []).append(pid)

    def get(self, pid: int) -> _Entry | None:
        """The process ``pid`` (None if there is none)."""
        if pid not in self._entries:
            self._entries[pid] = None if self._complete else _stat(pid)
        return self._entries[pid]

    def children(self, pid: int) -> list[int]:
        if pid not in self._children:
            self._children[pid] = [] if self._complete else _children_of(pid)
        return self._children[pid]

    def harness_children(self) -> list[int]:
        """This process's children where orphans are found. An orphan re-parents to the first live thread of its
        reaper, the main thread while the harness runs, so only that thread's list is read: the harness has
        threads for every process it runs, and their children are the ones it spawned itself."""
        if self._harness is None:
            me = os.getpid()
            self._harness = self.children(me) if self._complete else _children_of(me, all_threads=False)
        return self._harness


def _create_time(pid: int) -> float:
    import psutil

    if _PROC_STAT:
        entry = _stat(pid)
        return entry.create_time if entry is not None else 0.0
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def pids_with_token(tokens: Iterable[str]) -> dict[int, str]:
    """Every process whose environment carries one of these tokens (pid -> token).

    This looks at every process of the machine: it is only called where nothing else can find a process (no
    subreaper, or a command exec'd into a container, which runs under the runtime's monitor) when a root is
    signalled or ended early, and for a killed harness's leftovers.
    """
    import psutil

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
    import psutil

    if _PROC_STAT:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    return [f"{k}={v}".encode() for k, v in psutil.Process(pid).environ().items()]


def descendants(starts: Iterable[int], procs: Procs) -> set[int]:
    """``starts`` (those that still exist) and everything below them."""
    todo = list(starts)
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen or procs.get(pid) is None:
            continue
        seen.add(pid)
        todo.extend(procs.children(pid))
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
    sandboxed: bool = False
    """The root is a sandbox with a PID namespace of its own: nothing it starts can leave it, so it is not sampled
    and never the source of an orphan."""
    by_token: bool = False
    """Its processes run outside the harness's tree (a command exec'd into a container, under the runtime's
    monitor): they are found by the token they carry when it is signalled or ended early."""


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
        if not (create_time := _create_time(pid)):
            return
        with self._lock:
            self._foreign[pid] = create_time
            for root in self._roots.values():  # a sampler that ran before the adoption may have taken it
                root.members.pop(pid, None)

    def _is_foreign(self, pid: int, entry: _Entry, procs: Procs) -> bool:
        """An adopted monitor, a process of its session while it lives, or an orphan born in an open block."""
        if pid in self._foreign or (
            entry.sid in self._foreign and _same(procs.get(entry.sid), self._foreign[entry.sid])
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
        sandboxed: bool = False,
        by_token: bool = False,
    ) -> None:
        """Follow ``pid`` (just spawned with ``token``, in ``cgroup`` if any; ``sandboxed``: a sandbox with a PID
        namespace of its own; ``by_token``: what it starts runs outside the harness's tree, found by its token) and
        all it starts until ``end(token)``."""
        create_time = _create_time(pid)
        _warn_degraded()
        root = _Root(token, pid, create_time, {pid: create_time}, on_change, cgroup, owns_cgroup, sandboxed, by_token)
        with self._lock:
            self._roots[token] = root
            if not sandboxed and self._sampler is None:
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
        procs = Procs()
        carriers = set(pids_with_token([token])) if root.by_token else set()
        for pid in self._collect(root, procs) | carriers:
            entry = procs.get(pid)
            if pid not in exclude and entry is not None and not entry.zombie:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def alive(self, token: str) -> bool:
        """Whether any process of the root is still running."""
        with self._lock:
            root = self._roots.get(token)
        if root is None:
            return False
        procs = Procs()
        return any((e := procs.get(pid)) is not None and not e.zombie for pid in self._collect(root, procs))

    def end(self, token: str, *, contained: bool = False) -> list[int]:
        """End the root's process and every process attributed to it; the pids that survived SIGKILL.

        ``contained``: the root was the outer process of a sandbox with its own PID namespace and has exited by
        itself. The namespace's init is reaped only after every other process in the namespace has gone, and
        nothing can leave a PID namespace, so there is nothing left to find; the cgroup (if any) is still killed
        and removed. Without a subreaper, or when the root's processes run outside the harness's tree (``by_token``),
        the processes that still carry the root's token are looked for too.
        """
        with self._lock:
            root = self._roots.get(token)
        if root is None:
            return []
        try:
            if root.cgroup is not None:  # the kernel ends all of it; the tree catches what left it
                self.reap_killed(kill(root.cgroup))
            survivors: list[int] = []
            if not contained:
                tokens = [token] if root.by_token or not (_subreaper or root.sandboxed) else []
                survivors = kill_all(lambda procs: self._collect(root, procs), tokens=tokens)[1]
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
            kill_all(lambda procs: {p for p, c in left.items() if _same(procs.get(p), c)})
        if root.on_change is not None:
            root.on_change()
        return survivors

    def _collect(self, root: _Root, procs: Procs) -> set[int]:
        """Every process that belongs to ``root`` now (also updates its recorded members)."""
        with self._lock:
            orphans = self._orphans(root, procs) if _subreaper and not root.sandboxed else []
            return self._follow(root, procs, orphans)

    def _follow(self, root: _Root, procs: Procs, orphans: Iterable[int] = ()) -> set[int]:
        """The root's recorded members that still run, its cgroup's members, ``orphans``, and all their descendants
        become its members (under the lock)."""
        starts = [pid for pid, ctime in root.members.items() if _same(procs.get(pid), ctime)]
        if root.cgroup is not None:
            starts += members(root.cgroup)
        found = descendants([*starts, *orphans], procs)
        for pid in found:
            entry = procs.get(pid)
            if entry is not None:
                root.members.setdefault(pid, entry.create_time)
        for pid in [p for p in root.members if p not in found]:
            del root.members[pid]
            if (entry := procs.get(pid)) is not None and entry.zombie:
                self._reap.add(pid)
        return found

    def _orphans(self, root: _Root, procs: Procs) -> list[int]:
        """Orphans re-parented to the harness that belong to ``root``: nobody recorded them, and ``root`` is the
        one whose session they are in, or the last process still alive of those that were alive when they were born.

        With one process at a time that is exact. With several, an orphan that left its session before anybody saw
        it could be any of theirs, so it is left alone until every candidate has ended and then ends with the last
        of them: never earlier than its own attempt. Every tracked process starts its own session and nothing can
        join the harness's session from another, so a child still in the harness's session (one a library such as
        Ray started directly) is never an orphan; nor is one born while no tracked process ran.
        """
        return [pid for pid, candidates in self._candidates(procs).items() if candidates == {root.token}]

    def _candidates(self, procs: Procs) -> dict[int, set[str]]:
        """Unrecorded orphans -> the live roots each could have come from."""
        children = procs.harness_children()  # read before the spawned set: a child seen was registered by then
        own_sid = os.getsid(0)
        with self.spawn_lock:
            spawned = set(self._spawned)
        claimed = {pid for root in self._roots.values() for pid in root.members}
        roots = [r for r in self._roots.values() if not r.sandboxed]
        found: dict[int, set[str]] = {}
        for pid in children:
            entry = procs.get(pid)
            if entry is None or entry.sid == own_sid or pid in spawned or pid in claimed:
                continue
            if self._is_foreign(pid, entry, procs):
                continue
            owners = {r.token for r in roots if r.pid == entry.sid}  # still in its root's session: exact
            if not owners:
                owners = {r.token for r in roots if r.create_time <= entry.create_time + _CTIME_SLACK}
            if owners:
                found[pid] = owners
                if len(owners) > 1:
                    self._ambiguous.setdefault(pid, (entry.create_time, owners))
        return found

    def _sample_loop(self) -> None:
        while True:
            time.sleep(SAMPLE_SECS)
            with self._lock:
                if all(root.sandboxed for root in self._roots.values()):
                    self._sampler = None
                    return
            try:
                self.sample()
            except Exception:  # never let bookkeeping kill the harness; the end-of-attempt sweep still runs
                log.debug("process sampling failed", exc_info=True)

    def sample(self) -> None:
        """Record the processes of every unsandboxed root now: its cgroup's, and its descendants while they are
        still descendants."""
        procs = Procs()
        changed: list[Callable[[], None]] = []
        with self._lock:
            roots = [root for root in self._roots.values() if not root.sandboxed]
            before = {root.token: set(root.members) for root in roots}
            if _subreaper:  # an orphan that can only be one root's is recorded as that root's now
                for pid, candidates in self._candidates(procs).items():
                    entry = procs.get(pid)
                    if len(candidates) == 1 and entry is not None:
                        self._roots[next(iter(candidates))].members[pid] = entry.create_time
            for root in roots:
                self._follow(root, procs)
                if set(root.members) != before[root.token] and root.on_change is not None:
                    changed.append(root.on_change)
        self._reap_orphans(procs)
        for notify in {id(c): c for c in changed}.values():
            notify()

    def _reap_orphans(self, procs: Procs) -> None:
        """Wait for orphans that ended while re-parented to the harness (never for a child someone else waits for)."""
        if not _subreaper:
            return
        children = procs.harness_children()
        with self._lock, self.spawn_lock:
            spawned = set(self._spawned)
            recorded = {pid for root in self._roots.values() for pid in root.members}
            foreign = set(self._foreign)
            for pid in children:
                entry = procs.get(pid)
                if entry is None or not entry.zombie or pid in spawned:
                    continue
                if pid in recorded or pid in self._reap or pid in foreign or entry.sid in foreign:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)
                    self._reap.discard(pid)
            for pid in foreign:  # reaped (here or by init), or its pid is gone: no longer anyone's session
                entry = procs.get(pid)
                if not _same(entry, self._foreign[pid]) or (entry is not None and entry.zombie):
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


def kill_all(collect: Callable[[Procs], set[int]], tokens: Iterable[str] = ()) -> tuple[set[int], list[int]]:
    """Stop everything ``collect`` finds (and token carriers), collect again until nothing new, then SIGKILL.

    Stopped processes cannot fork, so a process that keeps forking cannot stay ahead of the collection.
    Returns the pids killed and those still alive (not zombies) after SIGKILL: uninterruptible sleep.
    """
    stopped = _stop_all(collect, set(pids_with_token(tokens)))
    if not stopped:
        return set(), []
    procs = Procs()
    for pid, ctime in stopped.items():
        if _same(procs.get(pid), ctime):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    alive: list[int] = []
    while True:
        TRACKER.reap_killed(stopped)
        procs = Procs()
        alive = [
            pid
            for pid, ctime in stopped.items()
            if _same(entry := procs.get(pid), ctime) and entry is not None and not entry.zombie
        ]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return set(stopped), alive


def _stop_all(collect: Callable[[Procs], set[int]], carriers: set[int]) -> dict[int, float]:
    """SIGSTOP what ``collect`` finds and everything it started, round after round until no new process turns up
    (never the harness or its ancestors): pid -> create time of each process stopped."""
    stopped: dict[int, float] = {}
    never: set[int] | None = None
    for _ in range(_STOP_ROUNDS):
        procs = Procs()
        found = descendants(collect(procs) | carriers, procs)
        new = {
            pid: entry.create_time
            for pid in found - stopped.keys()
            if (entry := procs.get(pid)) is not None and not entry.zombie
        }
        if new and never is None:
            never = _ancestors()
        for pid in never or ():
            new.pop(pid, None)
        if not new:
            break
        for pid, ctime in new.items():
            stopped[pid] = ctime
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
    return stopped


def _ancestors() -> set[int]:
    import psutil

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
    import psutil

    records = list(records)
    procs = Procs()
    never = _ancestors()
    verified: dict[int, float] = {}
    for record in records:
        entry = procs.get(record.pid)
        if record.pid in never or entry is None or entry.zombie or not _same(entry, record.create_time):
            continue
        try:
            value = psutil.Process(record.pid).environ().get(TOKEN_VAR)
        except (psutil.Error, OSError):
            continue
        if value is not None and value != record.token:
            continue
        verified[record.pid] = entry.create_time
    tokens = {r.token for r in records}
    if not verified and not pids_with_token(tokens):
        return 0
    killed, survivors = kill_all(lambda t: {p for p, c in verified.items() if _same(t.get(p), c)}, tokens)
    if survivors:
        log.warning("leftover processes %s survived SIGKILL (uninterruptible sleep?)", survivors)
    return len(killed - never)
