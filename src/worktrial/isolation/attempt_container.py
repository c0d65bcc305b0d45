"""One container per attempt: started once from the task's image, every phase ``exec``'d into it, removed with
everything in it when the attempt is done (as Harbor runs a trial).

``AttemptContainer`` is one container of an attempt: the agent's (setup, the agent, and the verifier when it shares
the agent's environment) or a verifier's of its own (``separate`` and ``fresh`` modes). It starts at the first
command that needs it, as ``run -d --init`` of the image with a ``sleep infinity`` under the runtime's init (which
reaps every orphan), and each command is an ``exec`` into it. A container whose only command is its last one (a
nop agent's verifier) runs that command as its main process instead (``run --rm``): nothing else would ever see the
container, so starting it earlier would only cost a second process of the runtime.

What it sees of the host (docs/environments.md, "What a container sees"), mounted when it starts:

- the attempt's worktree at the task's ``workdir``, its current directory; the private git directory, borrowed git
  objects (read-only) and scratch directory at their host paths, so the worktree's ``.git`` and worktrial's
  variables resolve;
- ``/logs/verifier`` and ``/tests`` (Harbor tasks): directories of the harness's, empty until verification, when
  the harness clears them and puts the tests in (a bind mount shows the host's changes at once);
- the suite's declared files at ``$WORKTRIAL_SUITE_DIR``: a read-only view, empty but while a command that may see
  them runs (setup, verify, the oracle);
- the agent's CLI, read-only (``/opt/worktrial/tool``, or the ``worktrial-tools`` volume).

Every command's process tree inside carries the command's token (``WORKTRIAL_PROC_TOKEN``), so a deadline's SIGTERM
and SIGKILL reach it from the host although it runs under the runtime's monitor, not under the harness; what a
command left running once it returned by itself (a service it started) keeps running until the container goes.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from worktrial.isolation import ownership, proc
from worktrial.isolation.container import (
    HARNESS_LABEL,
    HARNESS_NS_LABEL,
    TOOLS_DIR,
    TOOLS_VOLUME,
    TOOLS_VOLUME_DIR,
    ContainerEnv,
    ContainerPlan,
    harness_id,
    pid_namespace,
)
from worktrial.isolation.sandbox import AGENT_UIDS, NetworkMode, Sandbox, Wrapped, agent_uid
from worktrial.isolation.tracking import TRACKER

log = logging.getLogger(__name__)

START_TIMEOUT_SECS = 300
REMOVE_TIMEOUT_SECS = 120

RUNTIME_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "DOCKER_CONTEXT",
        "CONTAINER_HOST",
        "CONTAINER_CONNECTION",
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "CONTAINERS_REGISTRIES_CONF",
    }
)
"""The runtime CLI's own environment, always the harness's (rootless Podman and Docker find their storage, socket
and configuration through it)."""
_INLINE = ("HOME", "USER", "LOGNAME", "TMPDIR")
"""The container's own values of variables the runtime reads too: given on its command line (they are no secrets)."""
_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/etc/", "/proc/", "/dev/", "/sys/")


NSENTER = "/usr/bin/nsenter"
FORWARD_READY_SECS = 30


def can_forward() -> bool:
    """Whether a forwarder can be entered into a container's network namespace here (root, with nsenter)."""
    return os.geteuid() == 0 and os.access(NSENTER, os.X_OK)


class ContainerStartError(Exception):
    """The attempt's container could not be started (the runtime's own error, one line)."""


def host_tool(program: str) -> Path | None:
    """The real path of ``program`` when it names an executable of this host outside the system's directories
    (those the image has its own of): what the container needs mounted to run it. A node or Python script whose
    interpreter the image lacks still fails, with its own error (docs/environments.md)."""
    if not os.path.isabs(program) or program.startswith(_SYSTEM_PREFIXES):
        return None
    real = Path(os.path.realpath(program))
    if str(real).startswith(_SYSTEM_PREFIXES) or not real.is_file() or not os.access(real, os.X_OK):
        return None
    return real


@dataclass(frozen=True)
class Mounts:
    """The host paths one attempt's containers see."""

    worktree: Path
    writable: tuple[Path, ...]
    readonly: tuple[Path, ...]
    scratch: Path
    extra: tuple[tuple[Path, str, bool], ...] = ()
    """(host path, container path, writable) mounted at a path of their own (``/tests``, ``/logs/verifier``)."""
    views: tuple[tuple[Path, Path], ...] = ()
    """(host path, the harness's directory mounted read-only there in its place): empty but while a command that is
    shown the host path runs (the suite's files for setup, verify and the oracle)."""


class AttemptContainer:
    """One container of an attempt (see the module docstring)."""

    def __init__(
        self,
        plan: ContainerPlan,
        env: ContainerEnv,
        mounts: Mounts,
        *,
        network: NetworkMode,
        max_memory: int | None = None,
        max_procs: int | None = None,
    ) -> None:
        self.plan, self.env, self.mounts, self.network = plan, env, mounts, network
        self.max_memory, self.max_procs = max_memory, max_procs
        self.name = f"worktrial-{uuid.uuid4().hex[:16]}"
        self.running = False
        """Started (``run -d``) and not yet removed."""
        self.leftover = False
        """A ``run --rm`` of it that did not exit by itself may have left it behind."""
        self.uid = self._container_uid()
        self._staged: dict[Path, int] = {}
        self.gateway: Callable[[], tuple[int, str, str] | None] | None = None
        """Where the run's model gateway is, for the forwarder into the container's network (``forward_gateway``)."""
        self._forwarder: subprocess.Popen[bytes] | None = None

    def _container_uid(self) -> int | None:
        """The host uid the container runs as when the harness picks it (root harness, no task user)."""
        if self.env.user is not None:
            return None
        if os.geteuid() == 0:
            return agent_uid() or AGENT_UIDS.start
        return os.geteuid()

    # -- starting and ending ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the container (once): the image's ``sleep infinity`` under the runtime's init, every mount in
        place. Its monitor (Podman's conmon) is adopted as the runtime's: never taken for an attempt's orphan."""
        if self.running:
            return
        rt = self.plan.runtime
        pidfile = self.mounts.scratch.parent / f".{self.name}.conmon"
        monitor = ["--conmon-pidfile", str(pidfile)] if rt.name == "podman" else []
        argv = [rt.program, "run", "--detach", *monitor, *self._run_args(), "--entrypoint", "sleep"]
        argv += [self.env.image, "infinity"]
        with TRACKER.foreign_births() as adopt:
            started = proc.run(argv, cwd="/", timeout=START_TIMEOUT_SECS, sweep=False)
            self.running = True  # whatever the client said, something of it may exist: remove it at the end
            if monitor:
                try:
                    adopt(int(pidfile.read_text().strip()))
                except (OSError, ValueError):
                    log.debug("no monitor pid for %s", self.name)
                pidfile.unlink(missing_ok=True)
        if not started.ok:
            detail = (started.stderr_tail or started.stdout_tail).decode("utf-8", "replace").strip().splitlines()
            why = detail[-1][:300] if detail else started.describe_failure(f"{rt.name} run")
            raise ContainerStartError(f"{rt.name} could not start a container of {self.env.image[:19]}: {why}")

    def remove(self) -> None:
        """Remove the container and every process in it (nothing to do when it never started, or when its only
        command ran it with ``--rm`` and exited by itself); then what it wrote is made inert on this host."""
        if self._forwarder is not None:
            forwarder, self._forwarder = self._forwarder, None
            proc.reap_helper(forwarder, grace=0, background=True)
        if self.running or self.leftover:
            rt = self.plan.runtime
            proc.run(
                [rt.program, "rm", "--force", "--time", "0", self.name],
                cwd="/",
                timeout=REMOVE_TIMEOUT_SECS,
                sweep=False,
            )
            self.running = self.leftover = False
        self.files_returned()

    def files_returned(self) -> None:
        """Every tree the container could write, made inert: no set-uid or set-gid bit, no file capability, no device
        node (a root container user writes them as this host's root)."""
        trees = [self.mounts.worktree, *self.mounts.writable, self.mounts.scratch]
        trees += [host for host, _inside, writable in self.mounts.extra if writable]
        for path in trees:
            try:
                ownership.strip_privileges(path)
            except OSError as exc:
                log.warning("%s: what a container wrote could not be checked for set-uid files: %s", path, exc)

    # -- commands -----------------------------------------------------------------------------------------------

    def wrap(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        *,
        user: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        last: bool = False,
    ) -> Wrapped:
        """How to run ``argv`` in the container: an ``exec`` (starting the container first), or, for ``last`` when
        it has not started, the container itself (``run --rm``)."""
        rt = self.plan.runtime
        tool_args, argv = self._tool(list(argv))
        env_args, host_env = self._env_args(env, extra_env or {}, host_program=bool(tool_args))
        workdir = ["--workdir", self._map(str(cwd))]
        if last and not self.running:
            self.leftover = True
            args = [rt.program, "run", "--rm", "--interactive", *self._run_args(user), *env_args, *workdir]
            args += ["--entrypoint", argv[0], self.env.image, *(self._map(a) for a in argv[1:])]
            return Wrapped(args, host_env, release=self._ran_last)
        self.start()
        self._forward_gateway()
        args = [rt.program, "exec", "--interactive", *env_args, *workdir]
        if user is not None:
            args += ["--user", user]
        return Wrapped([*args, self.name, *(self._map(a) for a in argv)], host_env)

    def _forward_gateway(self) -> None:
        """The run's model gateway at the same ``127.0.0.1`` port inside the container's own network as on this
        host: a forwarder from the host, entered into the container's network namespace (``nsenter --net``),
        relays to the gateway's unix socket. It listens before the command that needs it starts."""
        if self.gateway is None or self._forwarder is not None or self.network == "host":
            return
        target = self.gateway()
        if target is None:
            return
        port, socket_path, script = target
        rt = self.plan.runtime
        found = proc.run(
            [rt.program, "inspect", "--format", "{{.State.Pid}}", self.name], cwd="/", timeout=60, sweep=False
        )
        pid = found.stdout_tail.decode("utf-8", "replace").strip()
        if not found.ok or not pid.isdigit() or pid == "0":
            log.warning("the model gateway cannot be forwarded into container %s: no pid", self.name)
            return
        read, write = os.pipe()
        try:
            argv = [NSENTER, f"--net=/proc/{pid}/ns/net", "--", sys.executable, "-I", "-S", script]
            self._forwarder = proc.spawn_helper(
                [*argv, str(port), socket_path, "--ready", str(write)], pass_fds=(write,)
            )
            os.close(write)
            write = -1
            ready, _, _ = select.select([read], [], [], FORWARD_READY_SECS)
            if not ready or not os.read(read, 1):
                log.warning("the model gateway's forwarder into container %s did not start", self.name)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)

    def _ran_last(self, exited: bool) -> None:
        if exited:  # `run --rm` removed it before its client exited
            self.leftover = False

    def stage(self, shown: Iterable[Path]) -> Callable[[bool], None] | None:
        """Put the host files of ``shown`` in their read-only views for one command; what takes them out again."""
        views = dict(self.mounts.views)
        staged = [p for p in shown if p in views]
        for path in staged:
            if self._staged.get(path, 0) == 0:
                _link_tree(path, views[path])
            self._staged[path] = self._staged.get(path, 0) + 1
        if not staged:
            return None

        def unstage(_exited: bool) -> None:
            for path in staged:
                self._staged[path] -= 1
                if self._staged[path] == 0:
                    _empty(views[path])

        return unstage

    # -- arguments ----------------------------------------------------------------------------------------------

    def _run_args(self, user: str | None = None) -> list[str]:
        rt = self.plan.runtime
        args = ["--name", self.name, "--init", *rt.run_options]
        args += ["--label", f"{HARNESS_LABEL}={harness_id()}"]  # found again if this harness is killed (-9)
        args += ["--label", f"{HARNESS_NS_LABEL}={pid_namespace()}"]
        args += ["--network", {"off": "none", "on": "bridge", "host": "host"}[self.network]]
        # Never more privileges than it started with; a user worktrial picked gets no capabilities either (a task's
        # own user, root in most Harbor images, keeps the runtime's default set: its verifiers install packages).
        args += ["--security-opt", "no-new-privileges"]
        return [*args, *self._user_args(user), *self._limit_args(), *self._volume_args(), *self._tool_mounts()]

    def _env_args(
        self, env: Mapping[str, str], extra: Mapping[str, str], *, host_program: bool
    ) -> tuple[list[str], dict[str, str]]:
        """What the runtime itself reads (where its storage and configuration are) is the harness's; the container
        gets its own values of those it needs, which are no secrets, on the command line, and the image's PATH.
        Every other variable goes by name only: its value travels in the runtime's environment, never on a
        command line. A preset's CLI keeps the scratch HOME its configuration is written to."""
        own_home = self.env.image_home and not host_program
        inline = {k: self._map(env[k]) for k in _INLINE if k in env and not (own_home and k != "TMPDIR")}
        inline["TMPDIR"] = "/tmp"
        child = {k: self._map(v) for k, v in env.items() if k not in RUNTIME_ENV}
        child.update({k: v for k, v in {**self.env.env, **extra}.items() if k not in RUNTIME_ENV})
        args = [arg for k, v in sorted(inline.items()) for arg in ("--env", f"{k}={v}")]
        args += [arg for k in sorted(child) for arg in ("--env", k)]
        host_env = {**child, **{k: v for k, v in os.environ.items() if k in RUNTIME_ENV}}
        host_env.setdefault("PATH", os.defpath)
        return args, host_env

    def _user_args(self, user: str | None = None) -> list[str]:
        """Who the container runs as: a uid worktrial picked (no capabilities), the task's own user, or the phase's
        (a Harbor verifier's ``user``)."""
        if user is not None:
            return ["--user", user]
        if self.uid is not None and os.geteuid() == 0:
            trees = [self.mounts.worktree, *self.mounts.writable, self.mounts.scratch]
            trees += [host for host, _inside, writable in self.mounts.extra if writable]
            for path in trees:
                ownership.hand_over(path, self.uid, only_foreign=True)
            return ["--cap-drop", "ALL", "--user", f"{self.uid}:{self.uid}"]
        if self.uid is not None:
            # An unprivileged harness: the container runs as its own uid, which owns the attempt's files. Rootless
            # Podman maps container uids into the user's subordinate range unless told to keep this one.
            keep = ["--userns", "keep-id"] if self.plan.runtime.name == "podman" else []
            return ["--cap-drop", "ALL", *keep, "--user", f"{self.uid}:{os.getegid()}"]
        return ["--user", str(self.env.user)] if self.env.user not in (None, "image") else []

    def _limit_args(self) -> list[str]:
        args = ["--cpus", f"{self.env.cpus:g}"] if self.env.cpus is not None else []
        limits = [m for m in (self.env.memory_mb * 2**20 if self.env.memory_mb else None, self.max_memory) if m]
        if limits:
            args += ["--memory", str(min(limits))]
        if self.max_procs is not None:
            args += ["--pids-limit", str(self.max_procs)]
        return args

    def _volume_args(self) -> list[str]:
        # Podman mounts what the attempt writes nosuid,nodev: a root container user cannot leave a set-uid program
        # on this host (Docker's --volume has no such option).
        rw = "rw,nosuid,nodev" if self.plan.runtime.name == "podman" else "rw"
        args = ["--volume", f"{self.mounts.worktree}:{self.env.workdir}:{rw}"]
        for path in (*self.mounts.writable, self.mounts.scratch):
            if path.exists():
                args += ["--volume", f"{path}:{path}:{rw}"]
        for path in self.mounts.readonly:
            if path.exists():
                args += ["--volume", f"{path}:{path}:ro"]
        for host, inside, writable in self.mounts.extra:
            args += ["--volume", f"{host}:{inside}:{rw if writable else 'ro'}"]
        for host, view in self.mounts.views:
            view.mkdir(parents=True, exist_ok=True)
            args += ["--volume", f"{view}:{host}:ro"]
        return args

    def _tool_mounts(self) -> list[str]:
        """The agent's CLI, mounted for the container's whole life: the image's tools volume, and the directory of
        a native executable of this host."""
        args = ["--volume", f"{TOOLS_VOLUME}:{TOOLS_VOLUME_DIR}:ro"] if self.plan.tools.get(self.env.image) else []
        if self.plan.host_tool is not None:
            args += ["--volume", f"{Path(self.plan.host_tool).parent}:{TOOLS_DIR}:ro"]
        return args

    def _tool(self, argv: list[str]) -> tuple[bool, list[str]]:
        """The agent's CLI inside the container: installed into the image's tools volume, or the host's own."""
        installed = self.plan.tools.get(self.env.image, {})
        if argv and argv[0] in installed:
            return True, [installed[argv[0]], *argv[1:]]
        tool = host_tool(argv[0]) if argv else None
        if tool is not None and self.plan.host_tool is not None and tool.parent == Path(self.plan.host_tool).parent:
            # A program the harness found on this host (a preset's pinned CLI): its directory, read-only, where any
            # user can reach it (the host's may lie under a home no other user may enter, such as /root).
            return True, [f"{TOOLS_DIR}/{tool.name}", *argv[1:]]
        return False, argv

    def _map(self, text: str) -> str:
        """A host path inside the worktree as the container sees it."""
        root = str(self.mounts.worktree)
        if text == root:
            return self.env.workdir
        if text.startswith(root + "/"):
            return self.env.workdir + text[len(root) :]
        return text


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s files in ``target`` (empty): hard links where they share a filesystem, copies elsewhere. The view
    is mounted read-only, so no command can change the files through it."""
    target.mkdir(parents=True, exist_ok=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, copy_function=link, dirs_exist_ok=True)


def _empty(directory: Path) -> None:
    """Remove what is in ``directory``, keeping it (it is a mount point in the container)."""
    for entry in list(directory.iterdir()) if directory.is_dir() else []:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


class ContainerView(Sandbox):
    """What one phase's commands run in: an attempt's container, as a given user with given variables, seeing the
    host paths it is shown (staged in their views for each command)."""

    kind = "container"
    own_pid_namespace = True
    host_programs = False
    outside_tree = True

    def __init__(
        self,
        box: AttemptContainer,
        *,
        user: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        shown: tuple[Path, ...] = (),
        last: bool = False,
    ) -> None:
        self.box, self.user, self.extra_env, self.shown, self.last = box, user, dict(extra_env or {}), shown, last
        self.reaches_gateway = box.network == "host" or can_forward()
        """An agent inside reaches the run's model gateway: on the host's network as it is, else through a
        forwarder entered into the container's network from this host (root, nsenter)."""

    def reach_gateway(self, target: Callable[[], tuple[int, str, str] | None]) -> None:
        self.box.gateway = target

    def _copy(self, **changes: object) -> ContainerView:
        view = ContainerView(self.box, user=self.user, extra_env=self.extra_env, shown=self.shown, last=self.last)
        for name, value in changes.items():
            setattr(view, name, value)
        return view

    @property
    def network(self) -> NetworkMode:
        return self.box.network

    def prepare(self) -> None:
        return None

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Wrapped:
        unstage = self.box.stage(self.shown)
        try:
            wrapped = self.box.wrap(argv, cwd, env, user=self.user, extra_env=self.extra_env, last=self.last)
        except ContainerStartError as exc:  # the command fails with the runtime's reason, as a command does
            if unstage is not None:
                unstage(False)
            return Wrapped(["/bin/sh", "-c", 'echo "$0" >&2; exit 125', str(exc)], {"PATH": os.defpath})
        except BaseException:
            if unstage is not None:
                unstage(False)
            raise
        if unstage is not None:
            ran = wrapped.release

            def release(exited: bool) -> None:
                unstage(exited)
                if ran is not None:
                    ran(exited)

            wrapped = replace(wrapped, release=release)
        return wrapped

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        return self._copy(shown=(*self.shown, *readonly))

    def limit_hit(self) -> str | None:
        return None

    def cleanup(self) -> None:
        return None
