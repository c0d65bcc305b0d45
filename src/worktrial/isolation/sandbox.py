"""The sandbox every process of an attempt runs in: setup commands, the agent (and its tools), verify commands.

Mechanism: bubblewrap (``bwrap``), which needs no daemon and starts in a few milliseconds. Each wrapped
process gets its own mount namespace built from an allowlist (docs/security.md, "The sandbox"): the system's runtime
(``/usr``, ``/bin``, ``/lib*``) and an ``/etc`` without what other users cannot read, read-only; the attempt's
worktree, private git directory and scratch directory writable; the borrowed git objects read-only; each program
the attempt runs by its own install prefix; ``/proc`` (with ``sys`` read-only), ``/sys`` read-only, and empty private
``/tmp``, ``/var/tmp`` and ``/run``. Nothing else of the host exists inside, and a path the harness hides that lies
inside something shown is covered by an empty read-only mount. A fresh ``HOME``; its own PID namespace (ending the
wrapped process ends everything it started, ``setsid`` or not, and ``--die-with-parent`` ends it when the harness is
killed); all capabilities dropped; its own network namespace: loopback only with ``--network off``, outbound
through a userspace stack with ``--network on`` (``netstack.py``), the host's with ``--network host``.
Resource limits (``limits.py``) apply with or without it.

Never root inside: when the harness runs as root, the wrapped program runs as an unprivileged host uid with no
account (``agent_uid``), switched to by ``setpriv`` right after bubblewrap built the mounts (the only capabilities
bubblewrap keeps are the two that switch, and ``setpriv`` drops them with the bounding set, under no-new-privs).
Root-owned files are then unreadable whatever is shown, and the attempt's own trees are handed to that uid
(``ownership.py``). An unprivileged harness's processes run as its own uid, as before.

Works as root (CI) and as an unprivileged user where the kernel allows user namespaces. Where it cannot work,
``auto`` runs unsandboxed with one warning and ``on`` refuses to start.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import shutil
import stat
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from worktrial.errors import BadInputError
from worktrial.isolation import netstack, ownership, proc
from worktrial.isolation.limits import Enforcer, Limits
from worktrial.isolation.overlay import Layers

SandboxMode = Literal["auto", "on", "off"]
NetworkMode = Literal["on", "off", "host"]
"""``off``: loopback only; ``on``: the attempt's own namespace with outbound access; ``host``: the host's network."""
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
    """The network attempts actually get (``host`` when ``on`` was asked for but cannot be had here)."""
    limits: Limits
    version: str | None = None
    reason: str | None = None
    """Why there is no sandbox (``off`` by choice, or what this machine lacks)."""
    by_choice: bool = False
    """The user turned it off (no warning then)."""
    uid: int | None = None
    """The host uid sandboxed programs run as when the harness is root; None: the harness's own uid."""
    uid_reason: str | None = None
    """Why a root harness's sandboxed programs keep uid 0 (no ``setpriv`` here)."""
    netstack: str | None = None
    """What gives ``--network on`` its own namespace (``slirp4netns 1.2.0``)."""
    network_reason: str | None = None
    """Why ``--network on`` fell back to the host's network."""

    @property
    def warning(self) -> str | None:
        if self.kind != "none" and self.network_reason:
            return (
                f"attempts share this host's network: {self.network_reason}. Parallel attempts share 127.0.0.1 "
                f"and its ports, and reach the host's loopback services; install slirp4netns (Debian/Ubuntu: "
                f"apt-get install slirp4netns) for a network of their own, or pass --network host to say so"
            )
        if self.kind != "none" or self.by_choice:
            return None
        return (
            f"running attempts unsandboxed: {self.reason}. Agents can read your home directory, write anywhere "
            f"you can and leave processes behind; to contain them, {FIX}"
        )

    def uid_mode(self) -> str:
        """Who sandboxed processes run as (``run.sandbox.uid``)."""
        if self.uid is not None:
            return f"uid {self.uid} (no account; worktrial runs as root), no capabilities"
        return uid_mode() + (f": {self.uid_reason}" if self.uid_reason else "")

    def network_mode(self) -> str:
        """The network attempts got, for ``run.sandbox.network_detail``."""
        if self.network == "off":
            return "loopback only"
        if self.network == "on":
            return f"own namespace, outbound through {self.netstack}, no host loopback"
        return "the host's network" + (f" ({self.network_reason})" if self.network_reason else "")


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


AGENT_UIDS = range(60_901, 61_000)
"""Where a root harness looks for the uid its sandboxed programs run as: the first with no account here."""
SETPRIV = "/usr/bin/setpriv"


def agent_uid() -> int | None:
    """A host uid no account uses (so it owns nothing of anyone's), the same for every attempt of a run."""
    for uid in AGENT_UIDS:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            try:
                grp.getgrgid(uid)
            except KeyError:
                return uid
    return None


def _drop_to(uid: int) -> list[str]:
    """The program that becomes ``uid`` inside the sandbox and then runs the command, with nothing to get back."""
    ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return [SETPRIV, *ids, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


_SWITCH_CAPS = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")


@functools.lru_cache(maxsize=8)
def _probe_uid(program: str) -> tuple[int | None, str | None]:
    """(uid, None) when a root harness can run sandboxed programs as an unprivileged uid here, else (None, why)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None, None
    uid = agent_uid()
    if uid is None:
        return None, f"every uid from {AGENT_UIDS.start} to {AGENT_UIDS.stop - 1} has an account"
    if not os.access(SETPRIV, os.X_OK):
        return None, f"{SETPRIV} is missing (Debian/Ubuntu: apt-get install util-linux)"
    argv = [program, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL", *_SWITCH_CAPS]
    result = proc.run([*argv, "--", *_drop_to(uid), "/bin/true"], cwd="/", timeout=30, sweep=False)
    if not result.ok:
        detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        return None, f"setpriv could not switch to uid {uid} ({detail[-1] if detail else result.describe_failure('')})"
    return uid, None


@functools.lru_cache(maxsize=8)
def _probe_network(program: str) -> tuple[str | None, str | None]:
    """(stack, None) when an attempt can have its own network with outbound access here, else (None, why)."""
    slirp = netstack.slirp_program()
    if slirp is None:
        return None, "slirp4netns is not installed"
    link = netstack.Link(slirp)
    argv = [program, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    result = proc.run([*argv, *link.bwrap_args(), "--", "/bin/true"], cwd="/", timeout=30, sweep=False, link=link)
    if not result.ok:
        return None, result.start_error or result.describe_failure("bubblewrap with slirp4netns")
    version = proc.run([slirp, "--version"], cwd="/", timeout=30, sweep=False)
    words = version.stdout_tail.decode("utf-8", "replace").split()
    return (f"slirp4netns {words[2]}" if len(words) > 2 else "slirp4netns"), None


def decide(settings: SandboxSettings) -> SandboxDecision:
    """Resolve ``auto``/``on``/``off`` on this machine; ``on`` without a sandbox is bad input (exit 2)."""
    if settings.mode == "off":
        if settings.network == "off":
            raise BadInputError(
                f"--network off needs the sandbox, which {settings.mode_from} turned off; turn it back on (or use "
                "--network host)"
            )
        off = f"off by {settings.mode_from}"
        return SandboxDecision("none", "host", settings.limits, reason=off, by_choice=True)
    program = bwrap_program()
    version, reason = _probe(program, "off" if settings.network == "off" else "on")
    if version is not None:
        uid, uid_reason = _probe_uid(program)
        stack = network_reason = None
        network = settings.network
        if network == "on":
            stack, network_reason = _probe_network(program)
            network = "on" if stack is not None else "host"
        return SandboxDecision(
            "bubblewrap",
            network,
            settings.limits,
            version=version,
            uid=uid,
            uid_reason=uid_reason,
            netstack=stack,
            network_reason=network_reason,
        )
    if settings.mode == "on":
        raise BadInputError(f"--sandbox on: {reason}; {FIX} (or run with --sandbox auto/off)")
    if settings.network == "off":
        raise BadInputError(f"--network off needs the sandbox, which is unavailable: {reason}; {FIX}")
    return SandboxDecision("none", "host", settings.limits, reason=reason)


@dataclass(frozen=True)
class AttemptView:
    """What one attempt's processes may see of the host: these paths, the read-only root, nothing hidden."""

    writable: tuple[Path, ...]
    readonly: tuple[Path, ...]
    home: Path
    """The attempt's fresh HOME (created empty; presets copy their CLI's configuration into it)."""
    scratch: Path | None = None
    """The attempt's scratch directory: what the harness writes there (homes, the prompt file, a preset's
    configuration) is handed to the sandbox's uid before each program starts."""
    private: Path | None = None
    """A directory only the harness writes, for the files the sandbox is given in place of the host's (``/etc/passwd``
    naming its uid, ``/etc/resolv.conf`` for its own network)."""
    overlay: Layers | None = None
    """The worktree as an overlay room (``overlay.py``): mounted at its mount point (one of ``writable``) in each
    program's own mount namespace before bubblewrap starts."""


@dataclass
class Wrapped:
    """How to start one program inside a sandbox."""

    argv: list[str]
    env: dict[str, str]
    link: netstack.Link | None = None
    """The network to bring up once bubblewrap has started (``--network on``)."""
    release: Callable[[bool], None] | None = None
    """Called once the program and everything it started are gone, told whether it exited by itself: gives back
    what ``wrap`` took for this one program (files put where a container sees them, a container to remove)."""
    fds: tuple[int, ...] = ()
    """Descriptors the program inherits besides the link's (the slot's namespaces it enters)."""
    pid_namespace: int | None = None
    """A descriptor of the PID namespace the program is forked into (the slot's, whose init is the slot's helper:
    the program ends with it however early the harness is killed, ``slot_ns.py``); None: the harness's."""


class Sandbox(ABC):
    """The lifecycle one attempt's processes go through: prepare once, wrap every spawn, clean up once."""

    kind: str
    own_pid_namespace = False
    """Whether every process started in it lives in a PID namespace of its own, which ends with its first process."""
    reaches_gateway = True
    """Whether an agent in it can reach the run's model gateway (its socket shown read-only)."""
    host_programs = True
    """Whether the programs it runs are this host's (so a missing one is reported before anything starts); a
    container's are its image's."""
    outside_tree = False
    """Whether its processes run outside the harness's process tree (a command exec'd into a container runs under
    the runtime's monitor): they are found by the token they carry, when the process is signalled or ended early."""

    @abstractmethod
    def prepare(self) -> None:
        """Create what the attempt needs before its first process (the limits' cgroups, the fresh HOME)."""

    @abstractmethod
    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Wrapped:
        """How to run ``argv`` in ``cwd`` inside the sandbox."""

    @abstractmethod
    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        """The same sandbox (same limits) seeing more paths read-only: setup and verify see the suite's files."""

    def in_room(self, old: Path, worktree: Path, layers: Layers | None) -> Sandbox:
        """The same sandbox with the worktree ``old`` replaced by another room's (the verifier's)."""
        return self

    def reach_gateway(self, target: Callable[[], tuple[int, str, str] | None]) -> None:
        """Make the run's model gateway reachable where it is not by itself (a container's own network): ``target``
        says, once the gateway listens, its port, unix socket and forwarding script. Nothing to do elsewhere."""
        return None

    def limits_cgroup(self) -> Path | None:
        """The attempt's cgroup v2 of limits that each unsandboxed command joins (and is ended with), if any."""
        return None

    @abstractmethod
    def limit_hit(self) -> str | None:
        """The limit the attempt ran into, as a record reason, once it has."""

    def end_processes(self) -> None:
        """End what of the attempt still runs in it once the agent's command returned: the verifier starts only
        once it is gone. Nothing to do where a command's processes end with it."""
        return None

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

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Wrapped:
        return Wrapped([*self.enforcer.prefix(), *argv], dict(env))

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        return self

    def limits_cgroup(self) -> Path | None:
        return self.enforcer.v2_group

    def limit_hit(self) -> str | None:
        return self.enforcer.hit()

    def cleanup(self) -> None:
        self.enforcer.cleanup()


_TMP = Path("/tmp")
"""Private in every sandbox (an empty tmpfs): programs installed under it are shown like any other."""
_OWN_MOUNTS = frozenset({Path("/"), _TMP, Path("/var/tmp"), Path("/run")})
"""The sandbox's own root and its empty private directories: never a mount's skeleton."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system's read-only runtime, shown whole (on merged-/usr systems most are symlinks into /usr)."""
ETC = Path("/etc")


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
    """``path`` is ``root`` or below it (both absolute and normalised; compared as text, which is what a mount
    table does, and much cheaper than walking ``path.parents`` for every bind of every program started)."""
    p, r = str(path), str(root)
    return p == r or p.startswith(r if r.endswith("/") else r + "/")


def _system(path: Path) -> bool:
    return any(_under(path, Path(d)) for d in SYSTEM_DIRS)


@functools.lru_cache(maxsize=4)
def etc_secrets(etc: Path = ETC) -> tuple[tuple[Path, bool], ...]:
    """What of ``/etc`` is covered: every entry another user could not read (``shadow``, ``gshadow``, ``sudoers``,
    ssh host keys, ``ssl/private``, machine credentials), as (path, is_dir). An unprivileged program needs only
    what is world-readable there (passwd, group, hosts, resolv.conf, nsswitch.conf, ld.so.cache, ssl/certs,
    alternatives), so the rule is by construction, not a list of known names. Walked once per process (with
    ``scandir`` and one ``lstat`` per entry, and a ``Path`` only for what is found: every ``eval`` pays it)."""
    found: list[tuple[Path, bool]] = []

    def visit(directory: str) -> None:  # top-down, as os.walk: a directory's entries, then its subdirectories
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:
            return
        subdirectories, files = [], []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if (entry.stat(follow_symlinks=False).st_mode & 0o005) != 0o005:
                        found.append((Path(entry.path), True))  # its contents are covered with it
                    else:
                        subdirectories.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry)
            except OSError:
                continue
        for entry in files:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) and not mode & 0o004:
                found.append((Path(entry.path), False))
        for subdirectory in subdirectories:
            visit(subdirectory)

    visit(str(etc))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def _system_args() -> tuple[str, ...]:
    """The mounts every sandboxed process starts from: the system's runtime read-only and an ``/etc`` without
    secrets; ``/dev``, ``/proc`` (its ``sys`` read-only), ``/sys`` read-only and empty private ``/tmp``,
    ``/var/tmp`` and ``/run``. Nothing else of the host exists inside until it is shown."""
    args: list[str] = []
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--ro-bind", str(ETC), str(ETC)]
    covered: list[str] = []
    for path, is_dir in etc_secrets():
        if is_dir:
            args += ["--tmpfs", str(path)]
            covered += ["--remount-ro", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    resolv = _real(ETC / "resolv.conf")  # often a symlink into /run (systemd-resolved): DNS must still work
    if not _under(resolv, ETC) and os.path.isfile(resolv) and os.access(resolv, os.R_OK):
        args += ["--ro-bind", str(resolv), str(resolv)]
    args += ["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    if os.path.isdir("/sys"):
        args += ["--ro-bind", "/sys", "/sys"]
    # Sticky and world-writable like the host's: the sandbox's programs may run as another uid than bubblewrap.
    args += ["--perms", "1777", "--tmpfs", "/tmp", "--dir", "/var", "--perms", "1777", "--tmpfs", "/var/tmp"]
    args += ["--tmpfs", "/run", *covered]
    return tuple(args)


KEEPS_SECRETS = frozenset(
    {".cargo", ".local", ".config", ".ssh", ".gnupg", ".aws", ".azure", ".docker", ".kube", ".gem", ".m2"}
    | {".gradle", ".npm", ".password-store", ".terraform.d", ".cache", ".mozilla", ".pki", ".vscode-server"}
)
"""Directories right under ``$HOME`` that hold credentials, keyrings or history next to their ``bin``
(``~/.cargo/credentials.toml``, ``~/.local/share/keyrings``): of these only the ``bin`` PATH names is shown."""


def _prefix_of_bin(entry: Path, home: Path, never: tuple[Path, ...]) -> Path:
    """A PATH entry's install prefix (``/opt/node`` for ``/opt/node/bin``, ``~/.pyenv`` for its ``shims``, a venv
    for its ``bin``, ``node_modules`` for ``node_modules/.bin``), or the entry alone when its parent could hold more
    than programs: ``/``, ``$HOME``, a directory under ``$HOME`` known to keep secrets (``KEEPS_SECRETS``), or any
    parent of a path no attempt may see."""
    parent = entry.parent
    if entry.name == ".bin" and parent.name != "node_modules":
        return entry
    if parent == Path("/") or parent == home or any(_under(n, parent) for n in never):
        return entry
    if entry.name == ".bin":
        return parent  # node_modules: the packages its programs run from, nothing else
    if _under(parent, home) and parent != home:
        top = parent.relative_to(home).parts[0]
        if top in KEEPS_SECRETS and not os.path.isfile(parent / "pyvenv.cfg"):
            return entry
    return parent


def _package_root(program: Path) -> Path:
    """The directory a program's real file belongs to: its npm package (``node_modules/@scope/name``) or its own
    directory."""
    parts = program.parts
    if "node_modules" in parts:
        i = len(parts) - 1 - parts[::-1].index("node_modules")
        depth = 3 if i + 1 < len(parts) and parts[i + 1].startswith("@") else 2
        if i + depth < len(parts):
            return Path(*parts[: i + depth])
    return program.parent


@functools.lru_cache(maxsize=256)
def _tools(argv0: str, path_var: str, home: Path, never: tuple[Path, ...]) -> tuple[Path, ...]:
    """The programs an attempt needs beyond the system's runtime, each by its own install prefix only.

    Every absolute PATH entry outside ``/usr`` (shown as its prefix, see ``_prefix_of_bin``); the program itself
    and its ``#!`` interpreter by their package; worktrial's own Python (``sys.prefix``, and its base when that is
    not the system's), which agents and verify commands call by path. Remembered per (program, PATH, never):
    every verify command of every attempt asks the same question.
    """
    shown: list[Path] = []

    def add(path: Path) -> None:
        # Never $HOME or a parent of anything hidden, even when PATH names it (PATH=~:... happens).
        if any(_under(n, path) for n in (*never, home, Path("/"))):
            return
        if os.path.isdir(path) and not _system(path) and path not in shown:
            shown.append(path)

    entries = [Path(p) for p in path_var.split(os.pathsep) if p.startswith("/")]
    for entry in entries:
        for candidate in {_real(entry), Path(os.path.normpath(entry))}:
            if os.path.isdir(candidate) and not _system(candidate):
                add(_prefix_of_bin(candidate, home, never))
    program = argv0 if argv0.startswith("/") else shutil.which(argv0, path=path_var) if argv0 else None
    if program is not None:
        real = _real(program)
        if not _system(real):
            add(_package_root(real))
        interpreter = _interpreter(program)
        if interpreter is not None and not _system(_real(interpreter)):
            add(_prefix_of_bin(interpreter.parent, home, never))
            add(_package_root(_real(interpreter)))
    for prefix in {Path(sys.prefix), Path(sys.base_prefix)}:
        if not _system(_real(prefix)):
            add(prefix)
    return tuple(shown)


def allowlist(settings: SandboxSettings, decision: SandboxDecision | None = None) -> list[str]:
    """What every attempt sees of the host, for ``run.sandbox.shown``: the same rules ``Bubblewrap.wrap`` applies."""
    shown = [
        f"{name} -> {os.readlink(name)}" if os.path.islink(name) else name
        for name in SYSTEM_DIRS
        if os.path.lexists(name)
    ]
    shown.append(f"/etc (read-only; {len(etc_secrets())} entries other users cannot read covered)")
    if decision is not None and decision.uid is not None:
        shown.append(f"/etc/passwd and /etc/group with an account for uid {decision.uid}")
    shown += ["/dev (minimal)", "/proc (sys read-only)", "/sys (read-only)", "/tmp, /var/tmp, /run (private, empty)"]
    shown += [
        "the attempt's worktree, private git dir and scratch with a fresh HOME (writable)",
        "the borrowed git objects (read-only)",
        "each program the attempt runs, by its install prefix (read-only)",
    ]
    shown += [f"{path} (read-only, [sandbox] readable or the agent's command)" for path in settings.readable]
    shown += [f"{path} (writable, [sandbox] writable)" for path in settings.writable]
    network = decision.network if decision is not None else settings.network
    if network == "off":
        shown.append("network: loopback only")
    elif network == "on":
        shown.append("network: its own namespace, outbound only (no host loopback); /etc/resolv.conf its own")
    else:
        shown.append("network: the host's")
    return shown


def uid_mode() -> str:
    """Who sandboxed processes run as (``run.sandbox.uid``)."""
    euid = os.geteuid() if hasattr(os, "geteuid") else -1
    return f"uid {euid} without capabilities" + (" (root: files are protected by not being shown)" if euid == 0 else "")


class Bubblewrap(Sandbox):
    """One attempt's bubblewrap sandbox (see the module docstring for what it gives)."""

    kind = "bubblewrap"
    own_pid_namespace = True

    def __init__(
        self,
        settings: SandboxSettings,
        view: AttemptView,
        enforcer: Enforcer,
        program: str,
        decision: SandboxDecision | None = None,
    ) -> None:
        self.settings = settings
        self.view = view
        self.enforcer = enforcer
        self.program = program
        # Without a decision nothing was probed: no uid switch, and no network stack (the host's, or loopback only).
        network: NetworkMode = "off" if settings.network == "off" else "host"
        self.decision = decision or SandboxDecision("bubblewrap", network, settings.limits)
        self.uid = self.decision.uid
        self._hidden = [p for p in (_real(h) for h in settings.hidden) if p != Path("/") and os.path.exists(p)]
        self._never = tuple(sorted({_real(h) for h in settings.hidden}))
        """Every hidden path, existing or not: nothing shown may be one of them or hold one."""
        self._etc: list[str] = []

    def _like(self, view: AttemptView) -> Bubblewrap:
        """The same sandbox over another view: the same settings, so the hidden paths resolved once and the files
        of its own ``/etc`` are its too."""
        other = Bubblewrap.__new__(Bubblewrap)
        other.__dict__.update(self.__dict__)
        other.view = view
        return other

    def prepare(self) -> None:
        self.view.home.mkdir(parents=True, exist_ok=True)
        self._etc = self._own_etc()
        self.enforcer.prepare()

    def _own_etc(self) -> list[str]:
        """Files of ``/etc`` the sandbox gets in place of the host's: an account for its uid (programs that look
        their user up, such as ``whoami`` or Node's ``os.userInfo()``, fail without one) and, on its own network,
        a resolver it can reach. Written once per attempt where only the harness writes."""
        private = self.view.private
        if private is None or (self.uid is None and self.decision.network != "on"):
            return []
        shutil.rmtree(private, ignore_errors=True)  # made anew: the harness's, whatever a slot build handed over
        private.mkdir(parents=True)
        files: dict[str, str] = {}
        if self.uid is not None:
            files["passwd"] = _readable(ETC / "passwd") + f"worktrial:x:{self.uid}:{self.uid}:worktrial agent:"
            files["passwd"] += f"{self.view.home}:/bin/sh\n"
            files["group"] = _readable(ETC / "group") + f"worktrial:x:{self.uid}:\n"
        if self.decision.network == "on":
            files["resolv.conf"] = netstack.RESOLV_CONF
        args: list[str] = []
        for name, text in files.items():
            path = private / name
            path.write_text(text)
            path.chmod(0o644)
            args += ["--ro-bind", str(path), str(ETC / name)]
        return args

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        return self._like(replace(self.view, readonly=(*self.view.readonly, *readonly)))

    def in_room(self, old: Path, worktree: Path, layers: Layers | None) -> Sandbox:
        writable = tuple(worktree if p == old else p for p in self.view.writable)
        return self._like(replace(self.view, writable=writable, overlay=layers))

    def limit_hit(self) -> str | None:
        return self.enforcer.hit()

    def cleanup(self) -> None:
        self.enforcer.cleanup()

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Wrapped:
        child = self._child_env(env)
        ops = self._mounts(argv[0] if argv else "", child.get("PATH", ""))
        args = [self.program, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--new-session"]
        args += ["--cap-drop", "ALL", *(_SWITCH_CAPS if self.uid is not None else ()), *_system_args(), *self._etc]
        link = None
        overlay = self.view.overlay
        held = overlay.held if overlay is not None and overlay.mounted() else None
        if held is not None and held.own_network:
            pass  # the slot's network namespace, entered below: up already (slot_ns.py)
        elif self.decision.network == "on" and (slirp := netstack.slirp_program()) is not None:
            link = netstack.Link(slirp)
            args += link.bwrap_args()
        elif self.decision.network == "off":
            args.append("--unshare-net")
        binds, remount = _bind_args(ops)
        args += [*binds, *remount, *_skeleton_args(ops), "--remount-ro", "/", "--chdir", str(_real(cwd)), "--"]
        drop = _drop_to(self.uid) if self.uid is not None else []
        fds: tuple[int, ...] = ()
        pid_namespace = None
        if held is not None:  # the room's overlay is mounted in the slot's namespaces: enter them
            mount, fds = held.enter()
            pid_namespace = held.pid_namespace  # born there: it ends with the slot's helper, as the harness's end
        else:
            mount = overlay.prefix() if overlay is not None else []
        argv = [*self.enforcer.prefix(), *mount, *args, *drop, *argv]
        return Wrapped(argv, child, link, fds=fds, pid_namespace=pid_namespace)

    def _child_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The program's environment: a home of the attempt's (not the harness's), its own /tmp, its own user."""
        child = dict(env)
        if child.get("HOME") in (None, "", str(Path.home())):
            child["HOME"] = str(self.view.home)
        child["TMPDIR"] = "/tmp"
        if self.uid is not None:
            self._hand_over(Path(child["HOME"]))
            child["USER"] = child["LOGNAME"] = "worktrial"
        return child

    def _mounts(self, program: str, path_var: str) -> dict[Path, str]:
        """Every host path the program sees -> how: ``ro``, ``rw``, or hidden (``hide``, ``hide-file``)."""
        ops: dict[Path, str] = {}
        tools = _tools(program, path_var, _real(Path.home()), self._never)
        readonly = [*self.view.readonly, *tools, *(Path(p) for p in self.settings.readable)]
        for path in (_real(p) for p in readonly):
            if os.path.exists(path):
                ops[path] = "ro"
        for path in (_real(p) for p in [*self.view.writable, *map(Path, self.settings.writable)]):
            if os.path.exists(path):
                ops[path] = "rw"
        shown = list(ops)
        for hidden in self._hidden:  # a hidden path inside something shown (a repository's .venv) stays hidden
            if hidden not in ops and any(_under(hidden, s) for s in shown):
                ops[hidden] = "hide" if os.path.isdir(hidden) else "hide-file"
        return ops

    def _hand_over(self, home: Path) -> None:
        """What the harness wrote for this program (scratch's new entries, what a preset put in the home it runs
        with) becomes the sandbox uid's, before the program starts. Only what is not the uid's yet is visited, so
        the cost follows the harness's writes, not what the agent's programs left there."""
        scratch = self.view.scratch
        if scratch is not None:
            ownership.hand_over(scratch, self.uid, only_foreign=True)
            if _under(home, scratch):
                ownership.hand_over(home, self.uid, only_foreign=True)


def _bind_args(ops: dict[Path, str]) -> tuple[list[str], list[str]]:
    """bubblewrap's mounts of ``ops``, parents first, and the remounts that make hidden directories read-only."""
    args: list[str] = []
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
    return args, remount


def _skeleton_args(ops: dict[Path, str]) -> list[str]:
    """bwrap creates the directories leading to each mount, mode 0700: searchable by the sandbox's uid only with a
    chmod, and never writable (inside the writable private /tmp, "$REPO/README.md" could otherwise be written there
    and look like the repository to the agent)."""
    binds = {str(p) for p in ops} | {*SYSTEM_DIRS, str(ETC), "/proc", "/dev", "/sys"}
    own = {str(p) for p in _OWN_MOUNTS}
    skeleton: set[str] = set()
    for path in ops:
        # The directories leading to it, from the top: each is under a mount once one of them (or it) is mounted.
        leading = _leading(str(path))[:-1]
        for depth, parent in enumerate(leading):
            if parent in own or parent in skeleton:
                continue
            if any(lead in binds for lead in leading[: depth + 1]):
                continue
            skeleton.add(parent)
    return [arg for path in sorted(skeleton, key=lambda p: p.count("/")) for arg in ("--chmod", "0555", path)]


def _leading(path: str) -> list[str]:
    """``/a/b/c`` -> ``/a``, ``/a/b``, ``/a/b/c``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts) + 1)]


def _readable(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text if not text or text.endswith("\n") else text + "\n"


def open_sandbox(settings: SandboxSettings, decision: SandboxDecision, view: AttemptView) -> Sandbox:
    """The sandbox of one attempt, not yet prepared."""
    enforcer = Enforcer(settings.limits)
    if decision.kind == "bubblewrap":
        return Bubblewrap(settings, view, enforcer, bwrap_program(), decision)
    return Unconfined(enforcer)
