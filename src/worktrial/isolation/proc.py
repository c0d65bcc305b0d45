"""The one place that spawns processes.

Every process gets its own session (so its group can be killed at once) and a per-call token in its
environment, and is followed by ``tracking`` for its whole life: when it ends, or at its deadline, every
process it started is ended too (its descendants, orphans re-parented to the harness, token carriers), even one
that dropped the token and left its session. Output is captured into bounded tail buffers; a process printing
gigabytes costs constant memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import math
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from worktrial.isolation import cgroups
from worktrial.isolation.cgroups import CGROUPS
from worktrial.isolation.tracking import TOKEN_VAR, TRACKER, ProcIdentity, descendants, kill_all
from worktrial.model.commands import Command, to_argv

if TYPE_CHECKING:
    from worktrial.isolation.netstack import Link
    from worktrial.isolation.sandbox import Sandbox

log = logging.getLogger(__name__)
__all__ = ["TOKEN_VAR", "ProcIdentity", "ProcResult", "ProcessScope", "clean_env", "kill_tree", "run", "run_command"]
DEFAULT_TAIL_BYTES = 64 * 1024
TERM_GRACE_SECS = 1.0
LIMIT_POLL_SECS = 0.05
CANCEL_POLL_SECS = 0.05
"""How soon a process notices its ``cancel`` event (an agent's cost cap) at first; the wait between looks doubles up
to ``MAX_POLL_SECS``, so a process that runs for minutes costs the harness one wake-up a second, not twenty."""
MAX_POLL_SECS = 1.0
_CHUNK = 64 * 1024

# Variables that would point a child's git at some other repository than its worktree.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
)


Ended = Literal["exit", "sigterm", "killed"]


@dataclass(frozen=True)
class ProcResult:
    """What happened to one process."""

    argv: tuple[str, ...]
    returncode: int | None
    timed_out: bool
    duration_secs: float
    stdout_tail: bytes = b""
    stderr_tail: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    not_found: str | None = None
    start_error: str | None = None
    interrupted: bool = False
    limit: str | None = None
    """The attempt's resource limit this process ran into (it was ended for it), e.g. ``attempt hit --max-procs 64``."""
    ended: Ended | None = None
    """How the process ended: by itself (``exit``), within the grace after SIGTERM (``sigterm``) or by SIGKILL
    (``killed``); None when it never started."""
    cancelled: bool = False
    """The caller's ``cancel`` event ended it (e.g. the attempt's cost cap), not its deadline."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def output_bytes(self) -> int:
        return self.stdout_bytes + self.stderr_bytes

    def missing_command(self) -> str | None:
        """The program that could not be found, directly or as reported by /bin/sh (exit 127)."""
        if self.not_found:
            return self.not_found
        if self.returncode == 127:
            text = self.stderr_tail.decode("utf-8", "replace")
            match = re.search(r"(?:^|\n)[^\n]*?:\s*(?:\d+:\s*)?([^\s:]+): (?:command )?not found", text)
            if match:
                return match.group(1)
        return None

    def describe_failure(self, label: str) -> str:
        """A short, output-free reason such as ``grep -q x f exited 1``."""
        if self.start_error:
            return f"{label}: {self.start_error}"
        if self.limit:
            return f"{label} ended: {self.limit}"
        missing = self.missing_command()
        if missing:
            return f"command not found: {missing}"
        if self.timed_out:
            return f"{label} timed out after {self.duration_secs:.0f}s"
        if self.returncode is not None and self.returncode < 0:
            return f"{label} killed by signal {-self.returncode}"
        return f"{label} exited {self.returncode}"


class _Tail:
    """Keeps the last ``limit`` bytes of a stream and counts all of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._chunks.append(data)
        self._size += len(data)
        while self._chunks and self._size - len(self._chunks[0]) >= self.limit:
            self._size -= len(self._chunks.popleft())

    def value(self) -> bytes:
        return b"".join(self._chunks)[-self.limit :] if self.limit else b""


def _pump(stream: IO[bytes], tail: _Tail, sink: Callable[[bytes], None] | None) -> None:
    try:
        while chunk := stream.read1(_CHUNK):  # type: ignore[attr-defined]
            tail.feed(chunk)
            if sink is not None:
                sink(chunk)
    except (OSError, ValueError) as exc:  # the child closed its end in a surprising way: keep what was read
        log.debug("reading a child's output stopped early: %s", exc)
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def _feed_stdin(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.write(data)
    with contextlib.suppress(OSError, ValueError):
        stream.close()


class ProcessScope:
    """The processes of one run (or one check): what an interrupt of that run ends, and nothing else.

    Two runs in one process each have their own scope, so stopping one never touches the other's agents.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()
        """Set while the run is being stopped: no new process may start in this scope."""
        self.sandbox: Sandbox | None = None
        """Set on an attempt's view of the scope: every process started in it runs inside this sandbox."""
        self.journal: Callable[[list[ProcIdentity]], None] | None = None
        """Told every live process of the scope whenever that changes, so a harness killed with ``kill -9``
        leaves a record from which the next one can end them (see ``state/leftovers.py``)."""
        self._journal_lock = threading.Lock()

    def changed(self) -> None:
        """A process of this scope started, ended or started another: update the journal."""
        if self.journal is None:
            return
        with self._journal_lock:
            tokens = [token for token, _ in self.snapshot()]
            try:
                self.journal(TRACKER.identities(tokens))
            except OSError as exc:  # a full disk costs the record of leftovers, never the run
                log.warning("could not record the run's live processes: %s", exc)

    def confined(self, sandbox: Sandbox | None) -> ProcessScope:
        """The same scope (same processes, same stop) whose processes all start inside ``sandbox``."""
        view = ProcessScope.__new__(ProcessScope)
        view._lock, view._procs, view.stopping, view.sandbox = self._lock, self._procs, self.stopping, sandbox
        view.journal, view._journal_lock = self.journal, self._journal_lock
        return view

    def add(self, token: str, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs[token] = proc

    def remove(self, token: str) -> None:
        with self._lock:
            self._procs.pop(token, None)
        self.changed()

    def snapshot(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        with self._lock:
            return list(self._procs.items())

    def kill_all(self) -> None:
        """End every process of this scope that is still running (and its descendants)."""
        for token, proc in self.snapshot():
            kill_tree(proc, token)

    def stop(self) -> None:
        """Refuse new processes and end the running ones: the first step of a stopped run."""
        self.stopping.set()
        self.kill_all()


def clean_env(base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: the given (or current) one without git location overrides."""
    env = dict(os.environ if base is None else base)
    for var in _GIT_LOCATION_VARS:
        env.pop(var, None)
    env.pop(TOKEN_VAR, None)
    if extra:
        env.update(extra)
    return env


def kill_tree(
    proc: subprocess.Popen[bytes],
    token: str,
    *,
    grace: float = 0.0,
    sweep: bool = True,
    contained: bool = False,
    sandboxed: bool = False,
) -> Ended:
    """End the process, its group and (with ``sweep``) every process it started, however it left.

    With ``grace`` the tree gets SIGTERM first and that long to exit. Without ``sweep`` only the process
    group is signalled: enough for the harness's own short git commands, and it skips the process-table scans.
    ``contained`` says the process was a sandbox with its own PID namespace that exited by itself: the kernel
    ended everything in it before that exit was reported, so only its cgroup is cleaned up, with no table scan.
    Returns how the process itself ended (what it started is ended either way).

    A ``sandboxed`` process is bubblewrap: SIGTERM would end bubblewrap itself, which kills what runs inside at
    once, so the polite SIGTERM goes to the processes inside only (the namespace's init ignores it) and bubblewrap
    exits when they do.
    """
    ended: Ended = "exit" if proc.poll() is not None else "killed"
    if grace > 0 and proc.poll() is None:
        if sandboxed:
            TRACKER.signal(token, signal.SIGTERM, exclude=frozenset({proc.pid}))
        else:
            _signal_group(proc, signal.SIGTERM)
            if sweep:
                TRACKER.signal(token, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        if proc.poll() is not None:
            ended = "sigterm"
    if sweep:
        if TRACKER.tracked(token):
            survivors = TRACKER.end(token, contained=contained)
        else:  # started without tracking (a harness command that then timed out): its tree and its token
            _, survivors = kill_all(lambda table: descendants([proc.pid], table), [token])
        if survivors:
            log.warning("processes %s survived SIGKILL (uninterruptible sleep?); they may hold files", survivors)
    _signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    return ended


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, sig)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.send_signal(sig)


_JOIN_CGROUP = ("/bin/sh", "-c", '{ echo 0 >"$0"; } 2>/dev/null; exec "$@"')
"""Joins the cgroup named by ``$0`` (its ``cgroup.procs``), then becomes the real program (same pid): a child that
joined before it ran cannot fork anything outside it. Best effort: the program runs even if the kernel refuses."""


def _kill_cgroup(token: str, sandbox: Sandbox | None, sweep: bool) -> tuple[Path | None, bool]:
    """The cgroup that ends a tracked process's tree, and whether it is the process's own (made, joined and removed
    here) rather than the attempt's cgroup v2 of limits, which the limits' prefix joins and the attempt removes.

    A sandbox with its own PID namespace gets none: the kernel ends everything in it when its first process ends
    (and when the harness is killed), and moving each process into a cgroup costs a kernel RCU grace period
    (10-20 ms per process between bursts of migrations), more than the sandbox itself.
    """
    if not sweep or (sandbox is not None and sandbox.own_pid_namespace):
        return None, False
    if sandbox is not None and (limits := sandbox.limits_cgroup()) is not None:
        return limits, False
    return CGROUPS.create(token), True


def _unstartable(args: tuple[str, ...], cwd: str | Path, env: Mapping[str, str]) -> ProcResult | None:
    """What Popen would have refused (missing or non-executable program), for a spawn that goes through a shell."""
    program = args[0]
    path = os.path.join(cwd, program) if "/" in program else shutil.which(program, path=env.get("PATH", os.defpath))
    if path is None or not os.path.exists(path):
        return ProcResult(args, None, False, 0.0, not_found=program)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        return ProcResult(args, None, False, 0.0, start_error=f"permission denied: {program}")
    return None


def run(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stdin: bytes | None = None,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    on_stdout: Callable[[bytes], None] | None = None,
    term_grace: float = TERM_GRACE_SECS,
    sweep: bool = True,
    scope: ProcessScope | None = None,
    link: Link | None = None,
    cancel: threading.Event | None = None,
) -> ProcResult:
    """Run argv to completion or to ``timeout`` seconds, then make sure nothing of it is left running.

    At the deadline (or once ``cancel`` is set, e.g. by an agent's cost cap) the process tree gets SIGTERM and
    ``term_grace`` seconds to exit before SIGKILL; ``ended`` in the result says which ended it.

    ``sweep=False`` is for trusted short commands (the harness's git): after a normal exit only the
    process group is killed, skipping the /proc scan; a timeout still sweeps. A process started in a run's
    ``scope`` is ended when that run is stopped; one without a scope (the harness's own git) only by its deadline.
    ``link`` brings up the network of a bubblewrap argv made with its arguments (a sandbox's ``wrap`` brings its
    own). Whatever the spawn took (its cgroup, its network) is given back on every way out.
    """
    args = tuple(str(a) for a in argv)
    if scope is not None and scope.stopping.is_set():
        return ProcResult(args, None, False, 0.0, start_error="interrupted", interrupted=True)
    if not Path(cwd).is_dir():
        return ProcResult(args, None, False, 0.0, start_error=f"working directory does not exist: {cwd}")
    start = time.monotonic()
    spawn = _Spawn.plan(args, cwd, env, scope.sandbox if scope is not None else None, sweep, link)
    try:
        if (refused := spawn.refused()) is not None:
            return refused
        spawn.wrap()
        try:
            proc = spawn.popen(stdin is not None)
        except OSError as exc:
            return _not_started(args, exc, time.monotonic() - start)
        spawn.track(proc, scope)
        return _supervise(proc, spawn, scope, stdin, tail_bytes, on_stdout, timeout, cancel, term_grace, start)
    finally:
        spawn.release()


def _supervise(
    proc: subprocess.Popen[bytes],
    spawn: _Spawn,
    scope: ProcessScope | None,
    stdin: bytes | None,
    tail_bytes: int,
    on_stdout: Callable[[bytes], None] | None,
    timeout: float | None,
    cancel: threading.Event | None,
    term_grace: float,
    start: float,
) -> ProcResult:
    """A started process, from its first byte of output to its end and that of everything it started."""
    out, err = _Tail(tail_bytes), _Tail(tail_bytes)
    pumps = _pumps(proc, out, err, on_stdout, stdin)
    waited, interrupted = _Waited(), False
    try:
        waited = _await(proc, spawn, timeout, cancel)
    except BaseException:
        interrupted = True
        raise
    finally:
        polite = waited.timed_out or waited.cancelled
        ended = _end(
            proc, spawn, scope, pumps, grace=term_grace if polite else 0.0, sweep=spawn.sweep or polite or interrupted
        )
        spawn.exited = ended == "exit" and not (polite or interrupted or waited.limit)
    return waited.result(proc, spawn, scope, out, err, ended, time.monotonic() - start)


@dataclass
class _Spawn:
    """One process about to start: what runs, where, in which sandbox and cgroup; what it holds until released."""

    args: tuple[str, ...]
    cwd: str | Path
    env: dict[str, str]
    token: str
    sandbox: Sandbox | None
    cgroup: Path | None
    own_cgroup: bool
    """The cgroup is the process's own (made here, removed by the tracking once it started, else by ``release``)."""
    link: Link | None
    sweep: bool
    argv: tuple[str, ...] = ()
    fds: tuple[int, ...] = ()
    pid_namespace: int | None = None
    """The PID namespace it is forked into (``Wrapped.pid_namespace``); None: the harness's."""
    tracked: bool = False
    on_release: Callable[[bool], None] | None = None
    """What the sandbox's ``wrap`` took for this program, given back once it has ended (``Wrapped.release``)."""
    exited: bool = False
    """The program exited by itself (no deadline, cancel, limit or interrupt ended it)."""

    @classmethod
    def plan(
        cls,
        args: tuple[str, ...],
        cwd: str | Path,
        env: Mapping[str, str] | None,
        sandbox: Sandbox | None,
        sweep: bool,
        link: Link | None,
    ) -> _Spawn:
        token = uuid.uuid4().hex
        child_env = clean_env(env)
        child_env[TOKEN_VAR] = token
        # Tools such as OpenCode take their project directory from $PWD, not from getcwd(): a stale PWD
        # inherited from the harness would point them at the user's own checkout instead of the worktree.
        child_env["PWD"] = os.path.abspath(cwd)
        cgroup, own = _kill_cgroup(token, sandbox, sweep)
        return cls(args, cwd, child_env, token, sandbox, cgroup, own, link, sweep, argv=args)

    def refused(self) -> ProcResult | None:
        """bwrap and the cgroup's shell would report a missing program as their own failure: keep "not found" and
        "permission denied" the same inside and out."""
        if (self.sandbox is None and self.cgroup is None) or (self.sandbox and not self.sandbox.host_programs):
            return None
        return _unstartable(self.args, self.cwd, self.env)

    def wrap(self) -> None:
        """The argv that runs the program in its sandbox, in its own cgroup."""
        if self.sandbox is not None:
            wrapped = self.sandbox.wrap(self.args, Path(self.cwd), self.env)
            self.argv, self.env, self.link, self.fds = tuple(wrapped.argv), wrapped.env, wrapped.link, wrapped.fds
            self.pid_namespace = wrapped.pid_namespace
            self.on_release = wrapped.release
        if self.cgroup is not None and self.own_cgroup:  # outermost: the sandbox and all in it start inside the cgroup
            self.argv = (*_JOIN_CGROUP, str(self.cgroup / "cgroup.procs"), *self.argv)

    def popen(self, with_stdin: bool) -> subprocess.Popen[bytes]:
        with TRACKER.spawning() as spawned, _children_in(self.pid_namespace):
            proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(*(self.link.child_fds if self.link is not None else ()), *self.fds),
            )
            spawned(proc.pid)
        return proc

    def track(self, proc: subprocess.Popen[bytes], scope: ProcessScope | None) -> None:
        """The process joins its scope and, when swept, the tracking, which from now on owns its cgroup."""
        if scope is not None:
            scope.add(self.token, proc)
        if self.sweep:
            on_change = scope.changed if scope is not None else None
            outside = self.sandbox is not None and self.sandbox.outside_tree
            TRACKER.start(
                self.token,
                proc.pid,
                on_change=on_change,
                cgroup=self.cgroup,
                owns_cgroup=self.own_cgroup,
                sandboxed=self.sandbox is not None and self.sandbox.own_pid_namespace and not outside,
                by_token=outside,
            )
            self.tracked = True

    def release(self) -> None:
        """What the spawn holds and nothing else owns: its cgroup when the process never started, its network."""
        if self.cgroup is not None and self.own_cgroup and not self.tracked:
            cgroups.remove(self.cgroup)
        if self.link is not None:
            self.link.release()
        if self.on_release is not None:
            release, self.on_release = self.on_release, None
            release(self.exited)


_CLONE_NEWPID = 0x20000000


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def _own_pid_namespace() -> int:
    """A descriptor of the harness's own PID namespace, kept open: where a thread's children go back to."""
    return os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)


@contextlib.contextmanager
def _children_in(pid_namespace: int | None) -> Iterator[None]:
    """The calling thread's children are born in ``pid_namespace`` (``setns(2)`` moves only the thread's children,
    never the harness itself or its other threads), and in the harness's own again after. A process forked there
    ends when that namespace's init does, even if the harness is killed the instant after the fork."""
    if pid_namespace is None:
        yield
        return
    libc = _libc()
    if libc.setns(pid_namespace, _CLONE_NEWPID) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot enter the slot's PID namespace: {os.strerror(errno)}")
    try:
        yield
    finally:
        if libc.setns(_own_pid_namespace(), _CLONE_NEWPID) != 0:  # one's own namespace is always allowed
            errno = ctypes.get_errno()
            raise OSError(errno, f"cannot leave the slot's PID namespace: {os.strerror(errno)}")


def _not_started(args: tuple[str, ...], exc: OSError, secs: float) -> ProcResult:
    if isinstance(exc, FileNotFoundError):
        return ProcResult(args, None, False, secs, not_found=args[0])
    why = f"permission denied: {args[0]}" if isinstance(exc, PermissionError) else f"cannot start: {exc.strerror}"
    return ProcResult(args, None, False, secs, start_error=why)


def _pumps(
    proc: subprocess.Popen[bytes],
    out: _Tail,
    err: _Tail,
    on_stdout: Callable[[bytes], None] | None,
    stdin: bytes | None,
) -> list[threading.Thread]:
    """Threads that read the process's output into bounded tails (and feed its input), started."""
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_pump, args=(proc.stdout, out, on_stdout), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err, None), daemon=True),
    ]
    if stdin is not None:
        assert proc.stdin is not None
        threads.append(threading.Thread(target=_feed_stdin, args=(proc.stdin, stdin), daemon=True))
    for t in threads:
        t.start()
    return threads


@dataclass(frozen=True)
class _Waited:
    """How the wait for a process ended."""

    timed_out: bool = False
    cancelled: bool = False
    limit: str | None = None
    network_error: str | None = None

    def result(
        self,
        proc: subprocess.Popen[bytes],
        spawn: _Spawn,
        scope: ProcessScope | None,
        out: _Tail,
        err: _Tail,
        ended: Ended,
        secs: float,
    ) -> ProcResult:
        if self.network_error is not None:
            return ProcResult(spawn.args, None, False, secs, start_error=self.network_error)
        sandbox = spawn.sandbox
        return ProcResult(
            spawn.args,
            None if self.timed_out else proc.returncode,
            self.timed_out,
            secs,
            stdout_tail=out.value(),
            stderr_tail=err.value(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            interrupted=scope is not None and scope.stopping.is_set(),
            limit=self.limit or (sandbox.limit_hit() if sandbox is not None else None),
            ended=ended,
            cancelled=self.cancelled,
        )


def _await(
    proc: subprocess.Popen[bytes], spawn: _Spawn, timeout: float | None, cancel: threading.Event | None
) -> _Waited:
    """Wait for the process to exit, or for its deadline, the caller's ``cancel`` or the attempt's limit."""
    network_error = None
    # The sandbox's own network comes up while bubblewrap holds its program back; if it cannot, the program never
    # runs (it would have run offline, or on nothing), and the command fails with the reason.
    if spawn.link is not None and (network_error := spawn.link.attach()) is not None:
        _signal_group(proc, signal.SIGKILL)
    try:
        limit = _wait(proc, timeout, spawn.sandbox, cancel)
    except subprocess.TimeoutExpired:
        return _Waited(timed_out=True, network_error=network_error)
    cancelled = limit == _CANCELLED
    return _Waited(cancelled=cancelled, limit=None if cancelled else limit, network_error=network_error)


def _end(
    proc: subprocess.Popen[bytes],
    spawn: _Spawn,
    scope: ProcessScope | None,
    pumps: list[threading.Thread],
    *,
    grace: float,
    sweep: bool,
) -> Ended:
    """End the process and everything it started, collect its output, and take it out of its scope."""
    sandbox = spawn.sandbox
    try:
        return kill_tree(
            proc,
            spawn.token,
            grace=grace,
            sweep=sweep,
            contained=_ended_its_namespace(proc, sandbox),
            sandboxed=sandbox is not None and sandbox.own_pid_namespace,
        )
    finally:
        if proc.returncode is not None:
            TRACKER.reaped(proc.pid)
        for t in pumps:
            t.join(timeout=2.0)
        if scope is not None:
            scope.remove(spawn.token)


def spawn_helper(argv: Sequence[str], *, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start one of the harness's own helper programs (an attempt's network stack) beside a sandbox: in a session of
    its own, so ending the attempt's processes never ends it first, and with no output kept. The caller ends it
    (``reap_helper``); it is told to stop by a descriptor the harness holds, so it also ends with the harness."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=pass_fds,
        start_new_session=True,
        env=clean_env(None),
    )


def reap_helper(helper: subprocess.Popen[bytes], grace: float = 2.0, *, background: bool = False) -> None:
    """End a helper that was told to stop: wait ``grace`` seconds for it (0: not at all), then kill it; with
    ``background`` its exit is collected by a thread of its own instead of the caller."""
    if grace > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.wait(timeout=grace)
            return
    with contextlib.suppress(OSError):
        os.killpg(helper.pid, signal.SIGKILL)  # its own session: anything it started goes too
    if background:
        threading.Thread(target=_collect, args=(helper,), daemon=True, name="reap-helper").start()
    else:
        _collect(helper)


def _collect(helper: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        helper.wait(timeout=30)


def _ended_its_namespace(proc: subprocess.Popen[bytes], sandbox: Sandbox | None) -> bool:
    """Whether ``proc`` was a sandbox with its own PID namespace that exited by itself (bwrap reports its init's
    status, so a negative code means bwrap itself was killed and the namespace may still be ending)."""
    code = proc.returncode
    return sandbox is not None and sandbox.own_pid_namespace and code is not None and code >= 0


_CANCELLED = "\0cancelled"


def _wait(
    proc: subprocess.Popen[bytes], timeout: float | None, sandbox: Sandbox | None, cancel: threading.Event | None
) -> str | None:
    """Wait for the process; inside a sandbox, return early with the reason once the attempt hits a limit, and
    with ``_CANCELLED`` once ``cancel`` is set."""
    with _exit_watch(proc) as exited:
        if sandbox is None and cancel is None:
            exited(timeout)
            return None
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        poll = LIMIT_POLL_SECS if sandbox is not None else CANCEL_POLL_SECS
        while True:
            step = poll if deadline is None else min(poll, deadline - time.monotonic())
            try:
                exited(max(0.0, step))
                return None
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            if sandbox is not None and (hit := sandbox.limit_hit()):
                return hit
            if cancel is not None and cancel.is_set():
                return _CANCELLED
            poll = min(poll * 2, MAX_POLL_SECS)


@contextlib.contextmanager
def _exit_watch(proc: subprocess.Popen[bytes]) -> Iterator[Callable[[float | None], None]]:
    """``exited(seconds)`` returns as soon as the process has exited (and reaps it), or raises TimeoutExpired.

    ``Popen.wait(timeout)`` polls with sleeps that double up to 50 ms, so a 10 ms command is noticed after 15 ms
    and a 20 ms one after 31: most of the harness's per-attempt cost in a small repository. A pidfd (Linux 5.3+)
    wakes the wait at the exit itself; elsewhere Popen's own wait is used.
    """

    def waited(seconds: float | None) -> None:
        proc.wait(timeout=seconds)

    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        yield waited
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def exited(seconds: float | None) -> None:
        if seconds is None:
            proc.wait()
            return
        deadline = time.monotonic() + seconds
        while not poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, seconds)
        proc.wait()

    try:
        yield exited
    finally:
        os.close(fd)


def run_command(
    command: Command,
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    timeout: float,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    scope: ProcessScope | None = None,
) -> ProcResult:
    """Run one suite command (any of its three forms) in ``cwd`` with its own deadline."""
    return run(to_argv(command), cwd=cwd, env=env, timeout=timeout, tail_bytes=tail_bytes, scope=scope)
