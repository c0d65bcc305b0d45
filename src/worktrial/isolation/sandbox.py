"""The sandbox every process of an attempt runs in: setup commands, the agent (and its tools), verify commands.

Mechanism: bubblewrap (``bwrap``), which needs no daemon and starts in a few milliseconds. Each wrapped
process gets its own mount namespace built from the host's root mounted read-only, with the attempt's worktree,
private git directory and scratch directory bound writable, the borrowed git objects read-only, and the paths the
harness names hidden under empty read-only tmpfs mounts (the user's repository, the run store, worktrial's
config, cache and trust files, the run's other slots, the user's home); a private ``/tmp``; a fresh ``HOME``;
its own PID namespace (ending the wrapped process ends everything it started, ``setsid`` or not, and
``--die-with-parent`` ends it when the harness is killed); all capabilities dropped; and, with ``--network off``,
its own network namespace with loopback only. Resource limits (``limits.py``) apply with or without it.

Works as root (CI) and as an unprivileged user where the kernel allows user namespaces. Where it cannot work,
``auto`` runs unsandboxed with one warning and ``on`` refuses to start.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.isolation.limits import Enforcer, Limits

SandboxMode = Literal["auto", "on", "off"]
NetworkMode = Literal["on", "off"]
BWRAP_ENV = "WORKTRIAL_BWRAP"
"""Names the bubblewrap program (default ``bwrap`` on PATH); tests point it at nothing to see the fallback."""

FIX = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and allow "
    "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ "
    "kernel.apparmor_restrict_unprivileged_userns=0)"
)


@dataclass(frozen=True)
class SandboxSettings:
    """The run's choice (``--sandbox``, ``--network``, ``--max-memory``, ``--max-procs``) and what to hide."""

    mode: SandboxMode = "auto"
    network: NetworkMode = "on"
    limits: Limits = field(default_factory=Limits)
    hidden: tuple[str, ...] = ()
    """Host paths no attempt may see: the user's repository, run store, worktrial's config and cache, other slots."""
    readable: tuple[str, ...] = ()
    """Host paths the user shows read-only (``[sandbox] readable``, and files named in the agent's own command)."""
    writable: tuple[str, ...] = ()
    """Host directories the user shares writable with every attempt (``[sandbox] writable``, e.g. a package cache)."""
    mode_from: str = "--sandbox off"
    """What chose ``mode``: the flag, or the line of the user's config file (named in ``run.sandbox.reason``)."""


@dataclass(frozen=True)
class SandboxDecision:
    """What a run will actually use, for the envelope and the one-line warning."""

    kind: Literal["bubblewrap", "none"]
    network: NetworkMode
    limits: Limits
    version: str | None = None
    reason: str | None = None
    """Why there is no sandbox (``off`` by choice, or what this machine lacks)."""
    by_choice: bool = False
    """The user turned it off (no warning then)."""

    @property
    def warning(self) -> str | None:
        if self.kind != "none" or self.by_choice:
            return None
        return (
            f"running attempts unsandboxed: {self.reason}. Agents can read your home directory, write anywhere "
            f"you can and leave processes behind; to contain them, {FIX}"
        )

    def describe(self, limits_mechanism: str) -> dict[str, Any]:
        """``run.sandbox`` in the envelope."""
        return {
            "kind": self.kind,
            "version": self.version,
            "network": self.network,
            "max_memory": self.limits.max_memory,
            "max_procs": self.limits.max_procs,
            "limits": limits_mechanism if self.limits.any else None,
            "reason": self.reason,
        }


def bwrap_program() -> str:
    return os.environ.get(BWRAP_ENV) or "bwrap"


@functools.lru_cache(maxsize=8)
def _probe(program: str, network: NetworkMode) -> tuple[str | None, str | None]:
    """(version, None) when a sandbox like the real one starts here, else (None, reason)."""
    if not sys.platform.startswith("linux"):
        return None, f"sandboxing needs Linux namespaces and this is {sys.platform}"
    argv = [program, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    argv += ["--unshare-net"] if network == "off" else []
    result = proc.run([*argv, "--", "/bin/true"], cwd="/", timeout=30, sweep=False)
    if result.not_found or result.missing_command():
        return None, f"bubblewrap ({program}) is not installed"
    if not result.ok:
        detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        return (
            None,
            f"bubblewrap cannot create namespaces here ({detail[-1] if detail else result.describe_failure(program)})",
        )
    version = proc.run([program, "--version"], cwd="/", timeout=30, sweep=False)
    words = version.stdout_tail.decode("utf-8", "replace").split()
    return (words[-1] if words else "unknown"), None


def decide(settings: SandboxSettings) -> SandboxDecision:
    """Resolve ``auto``/``on``/``off`` on this machine; ``on`` without a sandbox is bad input (exit 2)."""
    if settings.mode == "off":
        if settings.network == "off":
            raise BadInputError(
                f"--network off needs the sandbox, which {settings.mode_from} turned off; turn it back on (or use "
                "--network on)"
            )
        off = f"off by {settings.mode_from}"
        return SandboxDecision("none", settings.network, settings.limits, reason=off, by_choice=True)
    version, reason = _probe(bwrap_program(), settings.network)
    if version is not None:
        return SandboxDecision("bubblewrap", settings.network, settings.limits, version=version)
    if settings.mode == "on":
        raise BadInputError(f"--sandbox on: {reason}; {FIX} (or run with --sandbox auto/off)")
    if settings.network == "off":
        raise BadInputError(f"--network off needs the sandbox, which is unavailable: {reason}; {FIX}")
    return SandboxDecision("none", settings.network, settings.limits, reason=reason)


@dataclass(frozen=True)
class AttemptView:
    """What one attempt's processes may see of the host: these paths, the read-only root, nothing hidden."""

    writable: tuple[Path, ...]
    readonly: tuple[Path, ...]
    home: Path
    """The attempt's fresh HOME (created empty; presets copy their CLI's configuration into it)."""


class Sandbox(ABC):
    """The lifecycle one attempt's processes go through: prepare once, wrap every spawn, clean up once."""

    kind: str
    own_pid_namespace = False
    """Whether every process started in it lives in a PID namespace of its own, which ends with its first process."""

    @abstractmethod
    def prepare(self) -> None:
        """Create what the attempt needs before its first process (the limits' cgroups, the fresh HOME)."""

    @abstractmethod
    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run ``argv`` in ``cwd`` inside the sandbox."""

    @abstractmethod
    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        """The same sandbox (same limits) seeing more paths read-only: setup and verify see the suite's files."""

    def limits_cgroup(self) -> Path | None:
        """The attempt's cgroup v2 of limits that each unsandboxed command joins (and is ended with), if any."""
        return None

    @abstractmethod
    def limit_hit(self) -> str | None:
        """The limit the attempt ran into, as a record reason, once it has."""

    @abstractmethod
    def cleanup(self) -> None:
        """Undo ``prepare``; safe to call twice."""


class Unconfined(Sandbox):
    """No namespaces (``--sandbox off``, or nothing to build one with): only the resource limits."""

    kind = "none"

    def __init__(self, enforcer: Enforcer) -> None:
        self.enforcer = enforcer

    def prepare(self) -> None:
        self.enforcer.prepare()

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        return [*self.enforcer.prefix(), *argv], dict(env)

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        return self

    def limits_cgroup(self) -> Path | None:
        return self.enforcer.v2_group

    def limit_hit(self) -> str | None:
        return self.enforcer.hit()

    def cleanup(self) -> None:
        self.enforcer.cleanup()


_TMP = Path("/tmp")
"""Private in every sandbox (an empty tmpfs): programs installed under it are shown like hidden ones."""


def _real(path: Path | str) -> Path:
    """The resolved path; ``os.path`` (not ``Path.exists``/``is_dir``) is used on what it names, because a PATH
    entry or hidden path this user may not search (``/root/.cargo/bin`` seen by a non-root user) must count as
    absent, not crash the attempt."""
    return Path(os.path.realpath(path))


def _interpreter(program: str) -> Path | None:
    """The absolute interpreter a script names on its ``#!`` line, if any (e.g. a venv's python)."""
    try:
        with open(program, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    return Path(os.fsdecode(words[0])) if words and words[0].startswith(b"/") else None


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@functools.lru_cache(maxsize=256)
def _tools(argv0: str, path_var: str, hidden: tuple[Path, ...]) -> tuple[Path, ...]:
    """Programs the attempt needs that live under a hidden path or /tmp (a CLI in ``~/.local``, node under nvm).

    Each such PATH entry's install prefix (its parent, unless that is a hidden root itself) is shown
    read-only, so the program and the runtime next to it work while the rest of that tree stays hidden.
    Remembered per (program, PATH, hidden paths): every verify command of every attempt asks the same question,
    and the answer (a dozen realpath calls) cost a few milliseconds each time.
    """
    entries = [Path(p) for p in path_var.split(os.pathsep) if p.startswith("/")]
    if argv0.startswith("/"):
        entries.append(Path(argv0).parent)
    program = argv0 if argv0.startswith("/") else shutil.which(argv0, path=path_var) if argv0 else None
    if program is not None and (interpreter := _interpreter(program)) is not None:
        entries.append(interpreter.parent)  # a script's interpreter (a venv's python) must run too
    entries.append(Path(sys.executable).parent)  # worktrial's own Python: agents and verify call it by path
    roots = [*hidden, _TMP]
    shown: list[Path] = []
    for entry in entries:
        for candidate in {_real(entry), Path(os.path.normpath(entry))}:
            if not os.path.isdir(candidate) or not any(_under(candidate, h) for h in roots):
                continue
            prefix = candidate.parent
            shown.append(candidate if prefix in roots or prefix == Path("/") else prefix)
    return tuple(shown)


class Bubblewrap(Sandbox):
    """One attempt's bubblewrap sandbox (see the module docstring for what it gives)."""

    kind = "bubblewrap"
    own_pid_namespace = True

    def __init__(self, settings: SandboxSettings, view: AttemptView, enforcer: Enforcer, program: str) -> None:
        self.settings = settings
        self.view = view
        self.enforcer = enforcer
        self.program = program
        self._hidden = [p for p in (_real(h) for h in settings.hidden) if p != Path("/") and os.path.exists(p)]

    def prepare(self) -> None:
        self.view.home.mkdir(parents=True, exist_ok=True)
        self.enforcer.prepare()

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        view = replace(self.view, readonly=(*self.view.readonly, *readonly))
        return Bubblewrap(self.settings, view, self.enforcer, self.program)

    def limit_hit(self) -> str | None:
        return self.enforcer.hit()

    def cleanup(self) -> None:
        self.enforcer.cleanup()

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        child = dict(env)
        if child.get("HOME") in (None, "", str(Path.home())):
            child["HOME"] = str(self.view.home)
        child["TMPDIR"] = "/tmp"
        ops: dict[Path, str] = {}
        for hidden in self._hidden:
            ops[hidden] = "hide" if os.path.isdir(hidden) else "hide-file"
        tools = _tools(argv[0] if argv else "", child.get("PATH", ""), tuple(self._hidden))
        readonly = [*self.view.readonly, *tools, *(Path(p) for p in self.settings.readable)]
        for path in (_real(p) for p in readonly):
            if os.path.exists(path):
                ops[path] = "ro"
        for path in (_real(p) for p in [*self.view.writable, *map(Path, self.settings.writable)]):
            if os.path.exists(path):
                ops[path] = "rw"
        args = [self.program, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--new-session"]
        args += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        if self.settings.network == "off":
            args.append("--unshare-net")
        remount: list[str] = []
        for path in sorted(ops, key=lambda p: len(p.parts)):
            kind = ops[path]
            if kind == "hide":
                args += ["--tmpfs", str(path)]
                remount += ["--remount-ro", str(path)]
            elif kind == "hide-file":
                args += ["--ro-bind", "/dev/null", str(path)]
            elif kind == "ro":
                args += ["--ro-bind", str(path), str(path)]
            else:
                args += ["--bind", str(path), str(path)]
        args += [*remount, "--chdir", str(_real(cwd)), "--"]
        return [*self.enforcer.prefix(), *args, *argv], child


def open_sandbox(settings: SandboxSettings, decision: SandboxDecision, view: AttemptView) -> Sandbox:
    """The sandbox of one attempt, not yet prepared."""
    enforcer = Enforcer(settings.limits)
    if decision.kind == "bubblewrap":
        return Bubblewrap(settings, view, enforcer, bwrap_program())
    return Unconfined(enforcer)
