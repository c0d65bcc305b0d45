"""Container environments: the Docker or Podman CLI (one code path, no daemon of worktrial's own) runs a task's
setup, agent and verify commands inside its image.

Each command the attempt runs is one ``run --rm`` of the task's image, so every phase starts from the image plus
the attempt's files: what an agent installed outside the worktree is gone for the verifier, which always runs in a
fresh container once every agent container is gone. What a container sees of the host (docs/environments.md):

- the attempt's worktree at ``environment.workdir`` (default ``/app``, Terminal-Bench's), its current directory;
- the attempt's private git directory, borrowed git objects (read-only) and scratch directory (its HOME, the
  prompt file) at the same paths as on the host, so the worktree's ``.git`` file and the harness's environment
  variables resolve;
- for setup and verify only, the suite's declared files read-only (``$WORKTRIAL_SUITE_DIR``), and for a Harbor
  task its ``tests/`` copied in at ``/tests`` and a fresh ``/logs/verifier`` for the reward file.

Nothing else of the host is mounted. The container's user is a non-root uid unless the task names one
(``environment.user``; Harbor tasks keep their image's ``USER``), its network is ``none`` with ``--network off`` (or
the task's ``allow_internet = false``), and CPU, memory and process limits come from the task and the run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import psutil

from worktrial.errors import BadInputError, WorktrialError
from worktrial.isolation import ownership, proc
from worktrial.isolation.sandbox import AGENT_UIDS, NetworkMode, Sandbox, Wrapped, agent_uid
from worktrial.safe_text import one_line

log = logging.getLogger(__name__)

RuntimeChoice = Literal["auto", "docker", "podman"]
RUNTIME_CHOICES: tuple[RuntimeChoice, ...] = ("auto", "docker", "podman")
IMAGE_TAG_PREFIX = "localhost/worktrial-env"
"""Built images are tagged ``<prefix>:<first 24 hex of the build inputs' digest>``: the cache across runs."""
DEFAULT_WORKDIR = "/app"
TOOLS_VOLUME = "worktrial-tools"
HARNESS_LABEL = "worktrial.harness"
"""Every container an attempt starts carries the starting harness's pid and start time: a harness killed with
``kill -9`` cannot remove its containers, the next run with the same runtime does (``sweep_orphans``)."""


def harness_id(pid: int | None = None) -> str:
    """``<pid>-<start time in ms>`` of this (or that) process: a pid reused by another process never matches."""
    pid = os.getpid() if pid is None else pid
    try:
        return f"{pid}-{int(psutil.Process(pid).create_time() * 1000)}"
    except psutil.Error:
        return f"{pid}-0"


def orphan_containers(runtime: ContainerRuntime) -> list[str]:
    """The containers of harnesses that are gone (killed while an attempt's container ran), by name."""
    template = '{{.Names}}\t{{index .Labels "' + HARNESS_LABEL + '"}}'
    listed = proc.run(
        [runtime.program, "ps", "--all", "--filter", f"label={HARNESS_LABEL}", "--format", template],
        cwd="/",
        timeout=60,
        sweep=False,
    )
    if not listed.ok:
        return []
    stale = []
    for line in listed.stdout_tail.decode("utf-8", "replace").splitlines():
        name, _, owner = line.partition("\t")
        pid, _, _started = owner.strip().partition("-")
        if name and pid.isdigit() and harness_id(int(pid)) != owner.strip():
            stale.append(name.strip())
    return stale


def remove_containers(runtime: ContainerRuntime, names: Sequence[str]) -> None:
    proc.run([runtime.program, "rm", "--force", "--time", "0", *names], cwd="/", timeout=120, sweep=False)


def sweep_orphans(runtime: ContainerRuntime) -> int:
    """Remove the containers of harnesses that are gone (killed while an attempt's container ran); how many."""
    stale = orphan_containers(runtime)
    if stale:
        remove_containers(runtime, stale)
        log.warning("removed %d container(s) left running by a killed worktrial", len(stale))
    return len(stale)


# -- what worktrial made, for `worktrial gc` ----------------------------------------------------------------------


def worktrial_images(runtime: ContainerRuntime) -> list[str]:
    """The tags worktrial gave the images it built (``localhost/worktrial-env:<digest>``); never any other."""
    listed = proc.run(
        [runtime.program, "images", "--format", "{{.Repository}}:{{.Tag}}"], cwd="/", timeout=120, sweep=False
    )
    if not listed.ok:
        return []
    lines = listed.stdout_tail.decode("utf-8", "replace").split()
    return sorted({line for line in lines if _is_worktrial_tag(line)})


def _is_worktrial_tag(reference: str) -> bool:
    repository, _, tag = reference.rpartition(":")
    return repository == IMAGE_TAG_PREFIX and len(tag) == 24 and all(c in "0123456789abcdef" for c in tag)


def image_size(runtime: ContainerRuntime, reference: str) -> int | None:
    result = proc.run(
        [runtime.program, "image", "inspect", "--format", "{{.Size}}", reference], cwd="/", timeout=60, sweep=False
    )
    text = result.stdout_tail.decode("utf-8", "replace").strip()
    return int(text) if result.ok and text.isdigit() else None


def remove_image(runtime: ContainerRuntime, reference: str) -> str | None:
    """Untag ``reference`` (the image goes with its last tag; one the user also tagged stays), never forced: a
    container that uses it keeps it. None when done, else why not."""
    result = proc.run([runtime.program, "rmi", reference], cwd="/", timeout=300, sweep=False)
    return None if result.ok else _first_error(result, f"{runtime.name} rmi")


def has_volume(runtime: ContainerRuntime, name: str) -> bool:
    return proc.run([runtime.program, "volume", "inspect", name], cwd="/", timeout=60, sweep=False).ok


def remove_volume(runtime: ContainerRuntime, name: str) -> str | None:
    """Remove a volume, never forced (one a container uses stays); None when done, else why not."""
    result = proc.run([runtime.program, "volume", "rm", name], cwd="/", timeout=120, sweep=False)
    return None if result.ok else _first_error(result, f"{runtime.name} volume rm")


def _first_error(result: proc.ProcResult, what: str) -> str:
    lines = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else result.describe_failure(what)


"""The cached volume of CLIs installed into images (``container_tools.py``)."""
TOOLS_VOLUME_DIR = "/opt/worktrial/venvs"
TOOLS_DIR = "/opt/worktrial/tool"
"""Where the directory of a host program the attempt runs (a preset's CLI) is mounted, read-only."""
MAX_BUILD_LOG = 4000
PULL_TIMEOUT_SECS = 3600


@dataclass(frozen=True)
class ContainerRuntime:
    """The container CLI a run uses and the options this machine needs for ``run`` (found by probing once)."""

    name: Literal["docker", "podman"]
    program: str
    version: str
    run_options: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    """One line per option the probe had to add, saying what to change to not need it."""

    def describe(self) -> str:
        return f"{self.name} {self.version}" + (f" ({' '.join(self.run_options)})" if self.run_options else "")


@dataclass(frozen=True)
class ContainerEnv:
    """One task's container environment, resolved: the image to run and how."""

    image: str
    """What ``run`` starts: the image id (``sha256:...``) pinned for the whole run."""
    digest: str
    """The image id as recorded in the envelope."""
    workdir: str = DEFAULT_WORKDIR
    user: str | None = None
    """``None``: a non-root uid of the harness's choosing; ``"image"``: the image's own USER; else passed as is."""
    network: NetworkMode | None = None
    """The task's own network (a Harbor task's ``allow_internet``); None: the run's ``--network``."""
    cpus: float | None = None
    memory_mb: int | None = None
    tests_dir: str | None = None
    """A Harbor task's ``tests/``, relative to the suite directory: put at ``/tests`` for the verifier only."""
    seed_workdir: bool = False
    """Copy the image's workdir into the worktree before the attempt's first command (Harbor tasks)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The task's own variables for every command (a Harbor task's ``[environment] env``, templates filled)."""
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    """The task's variables for its verifier only (``[verifier] env``)."""
    image_home: bool = False
    """The container's HOME is the image user's own (a Harbor task's test.sh sources ``$HOME/.local/bin/env``), not
    the attempt's scratch directory; a preset's CLI keeps the scratch HOME its configuration is written to."""


@dataclass(frozen=True)
class ContainerPlan:
    """What every container attempt of a run shares: the runtime and each container task's environment."""

    runtime: ContainerRuntime
    tasks: Mapping[str, ContainerEnv] = field(default_factory=dict)
    tools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Image -> {host program -> that program installed in the image's tools volume} (a preset's Python CLI)."""

    def images(self) -> dict[str, str]:
        """Task id -> image digest, for the envelope."""
        return {task_id: env.digest for task_id, env in sorted(self.tasks.items())}


def _version(program: str) -> str | None:
    result = proc.run([program, "version", "--format", "{{.Client.Version}}"], cwd="/", timeout=60, sweep=False)
    if result.not_found:
        return None
    text = result.stdout_tail.decode("utf-8", "replace").strip()
    if result.ok and text:
        return text.splitlines()[0]
    if program.endswith("podman"):  # podman 4 answers `version --format` with its own field names
        again = proc.run([program, "--version"], cwd="/", timeout=60, sweep=False)
        words = again.stdout_tail.decode("utf-8", "replace").split()
        return words[-1] if again.ok and words else None
    return None


def find_runtime(choice: RuntimeChoice) -> ContainerRuntime:
    """The runtime ``--runtime`` names (``auto``: Podman, then Docker), or bad input saying how to get one."""
    names: tuple[Literal["docker", "podman"], ...] = ("podman", "docker") if choice == "auto" else (choice,)
    for name in names:
        program = os.environ.get(f"WORKTRIAL_{name.upper()}") or shutil.which(name)
        if program is None:
            continue
        version = _version(program)
        if version is not None:
            return ContainerRuntime(name, program, version)
        if choice != "auto":
            raise BadInputError(
                f"--runtime {name}: `{program} version` failed; is its daemon running (docker) or its storage set "
                "up? Try it by hand, or pass --runtime auto"
            )
    wanted = "podman or docker" if choice == "auto" else choice
    raise BadInputError(
        f"this suite has container tasks and {wanted} is not installed; install one (Debian/Ubuntu: apt-get install "
        "podman runc; macOS: Docker Desktop or `brew install podman`)"
    )


_FIXES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "cgroups in hybrid mode",
        ("--runtime", "runc"),
        "crun cannot run on this host's hybrid cgroups: using --runtime runc (to make it the default, set "
        'runtime = "runc" under [engine] in /etc/containers/containers.conf)',
    ),
    (
        "rlimit",
        ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"),
        "the runtime's default rlimits cannot be set here (no CAP_SYS_RESOURCE): passing --ulimit nofile=1024:1024 "
        '--ulimit nproc=1024:1024 (to make them the default, set default_ulimits = ["nofile=1024:1024", '
        '"nproc=1024:1024"] under [containers] in /etc/containers/containers.conf)',
    ),
)


def probe(runtime: ContainerRuntime, image: str) -> ContainerRuntime:
    """Start ``image`` once; where it fails for a reason this module knows (crun on hybrid cgroups, rlimits that
    cannot be raised), add the option that avoids it, with a note saying so, and try again. Anything else is one
    line of bad input."""
    options: list[str] = []
    notes: list[str] = []
    for _ in range(len(_FIXES) + 1):
        argv = [runtime.program, "run", "--rm", "--network", "none", *options, image, "/bin/sh", "-c", "exit 0"]
        result = proc.run(argv, cwd="/", timeout=300, sweep=False)
        if result.ok:
            return replace(runtime, run_options=tuple(options), notes=tuple(notes))
        detail = result.stderr_tail.decode("utf-8", "replace")
        fix = next((f for f in _FIXES if f[0] in detail and f[1][0] not in options), None)
        if fix is None:
            last = detail.strip().splitlines()[-1] if detail.strip() else result.describe_failure(runtime.name)
            raise BadInputError(f"{runtime.name} cannot start a container of {image} here: {last[:300]}")
        if runtime.name == "podman" and fix[1][:2] == ("--runtime", "runc") and shutil.which("runc") is None:
            raise BadInputError(f"{runtime.name}: {fix[2].split(':')[0]}; install runc (apt-get install runc)")
        options += fix[1]
        notes.append(f"{runtime.name}: {fix[2]}")
    raise BadInputError(f"{runtime.name} cannot start a container of {image} here")


def inspect_id(runtime: ContainerRuntime, image: str) -> str | None:
    """The local image's id (``sha256:...``), or None when it is not present."""
    result = proc.run(
        [runtime.program, "image", "inspect", "--format", "{{.Id}}", image], cwd="/", timeout=60, sweep=False
    )
    text = result.stdout_tail.decode("utf-8", "replace").strip()
    if not result.ok or not text:
        return None
    return text if text.startswith("sha256:") else f"sha256:{text}"


def context_digest(dockerfile: Path, context: Path) -> str:
    """A digest of everything a build reads: the Dockerfile and every file of the context, by relative name."""
    digest = hashlib.sha256(b"worktrial-image-build 1\n")
    digest.update(b"Dockerfile\0" + dockerfile.read_bytes() + b"\0")
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        name = path.relative_to(context).as_posix().encode()
        body = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(name + b"\0" + hashlib.sha256(body).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def build_image(runtime: ContainerRuntime, dockerfile: Path, context: Path, timeout_secs: float) -> str:
    """Build (or find built by an earlier run) the image of ``dockerfile`` in ``context``; its id."""
    tag = f"{IMAGE_TAG_PREFIX}:{context_digest(dockerfile, context)[:24]}"
    if (found := inspect_id(runtime, tag)) is not None:
        return found
    argv = [runtime.program, "build", "-t", tag, "-f", str(dockerfile), str(context)]
    result = proc.run(argv, cwd=str(context), timeout=timeout_secs, sweep=False, tail_bytes=MAX_BUILD_LOG)
    if not result.ok:
        tail = (result.stderr_tail or result.stdout_tail).decode("utf-8", "replace").strip().splitlines()
        raise BadInputError(
            f"{dockerfile}: the image build failed ({result.describe_failure(runtime.name + ' build')}): "
            f"{tail[-1][:300] if tail else 'no output'}"
        )
    built = inspect_id(runtime, tag)
    if built is None:
        raise BadInputError(f"{dockerfile}: {runtime.name} built {tag} but cannot find it")
    return built


def named_image(runtime: ContainerRuntime, image: str, say: Callable[[str], None] | None = None) -> str:
    """The id of a named image, pulled first when it is not present locally (as Harbor does), with the runtime's
    progress lines given to ``say``. A registry that cannot be reached is one line naming the image and the fix."""
    found = inspect_id(runtime, image)
    if found is not None:
        return found
    if say is not None:
        say(f"pulling {image} ({runtime.name} pull): it is not present locally")
    lines: list[str] = []

    def progress(chunk: bytes) -> None:
        for line in chunk.decode("utf-8", "replace").splitlines():
            if line.strip():
                lines.append(line.strip())
                if say is not None:
                    say(f"{runtime.name} pull {image}: {one_line(line.strip())[:200]}")

    # The runtime writes its progress to stderr: one stream, read as it comes.
    argv = ["/bin/sh", "-c", 'exec "$0" pull "$1" 2>&1', runtime.program, image]
    result = proc.run(argv, cwd="/", timeout=PULL_TIMEOUT_SECS, sweep=False, on_stdout=progress)
    pulled = inspect_id(runtime, image) if result.ok else None
    if pulled is None:
        why = one_line(lines[-1])[:300] if lines else result.describe_failure(f"{runtime.name} pull")
        raise BadInputError(
            f"image {image} is not present locally and {runtime.name} could not pull it ({why}); pull it where its "
            f"registry can be reached and load it here ({runtime.name} save / {runtime.name} load), or build it "
            "(a Harbor task with environment/Dockerfile: --force-build)"
        )
    return pulled


def image_workdir(runtime: ContainerRuntime, image: str) -> str | None:
    """The image's own ``WORKDIR`` (None when it sets none)."""
    result = proc.run(
        [runtime.program, "image", "inspect", "--format", "{{.Config.WorkingDir}}", image],
        cwd="/",
        timeout=60,
        sweep=False,
    )
    text = result.stdout_tail.decode("utf-8", "replace").strip()
    return (
        text if result.ok and text.startswith("/") and ":" not in text and not any(c.isspace() for c in text) else None
    )


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


def _host_tool(program: str) -> Path | None:
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


class ContainerSandbox(Sandbox):
    """Every command of one attempt as a container of the task's image (see the module docstring)."""

    kind = "container"
    own_pid_namespace = True
    reaches_gateway = False
    """A task's container has no forwarder of its own yet: its agents call their providers directly."""

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
        self.plan, self.env, self.mounts = plan, env, mounts
        self.network = env.network or network
        self.max_memory, self.max_procs = max_memory, max_procs
        self.names: list[str] = []
        self.uid = self._container_uid()

    def _container_uid(self) -> int | None:
        """The host uid the attempt's containers run as when the harness picks it (root harness, no task user)."""
        if self.env.user is not None:
            return None
        if os.geteuid() == 0:
            return agent_uid() or AGENT_UIDS.start
        return os.geteuid()

    def prepare(self) -> None:
        self.mounts.scratch.mkdir(parents=True, exist_ok=True)
        if self.env.seed_workdir:
            self._seed()

    def _seed(self) -> None:
        """Copy what the image holds at its workdir into the worktree, which is mounted over it (a Harbor task's
        files are in its image). Nothing there is not an error."""
        rt = self.plan.runtime
        name = f"worktrial-seed-{uuid.uuid4().hex[:12]}"
        created = proc.run(
            [rt.program, "create", "--name", name, self.env.image, "/bin/true"], cwd="/", timeout=120, sweep=False
        )
        if not created.ok:
            detail = created.stderr_tail.decode("utf-8", "replace").strip()
            raise WorktrialError(f"{rt.name} create of {self.env.image} failed: {detail[-300:]}")
        try:
            source = f"{name}:{self.env.workdir.rstrip('/')}/."
            proc.run([rt.program, "cp", source, str(self.mounts.worktree)], cwd="/", timeout=600, sweep=False)
        finally:
            proc.run([rt.program, "rm", "--force", name], cwd="/", timeout=120, sweep=False)
        ownership.strip_privileges(self.mounts.worktree)  # the image's files, copied out as they are

    def widened(self, readonly: Iterable[Path]) -> Sandbox:
        mounts = replace(self.mounts, readonly=(*self.mounts.readonly, *readonly))
        widened = ContainerSandbox(
            self.plan, self.env, mounts, network=self.network, max_memory=self.max_memory, max_procs=self.max_procs
        )
        widened.names = self.names  # one list: ending the attempt's containers ends the verifier's too
        return widened

    def with_verifier_files(self, tests: Path | None, logs: Path) -> ContainerSandbox:
        """The verifier's containers: the task's tests at ``/tests`` and a fresh reward directory at
        ``/logs/verifier``, both made after the agent ended, and the task's verifier variables."""
        extra = [(logs, "/logs/verifier", True)]
        if tests is not None:
            extra.append((tests, "/tests", True))
        mounts = replace(self.mounts, extra=(*self.mounts.extra, *extra))
        env = replace(self.env, env={**self.env.env, **self.env.verifier_env}) if self.env.verifier_env else self.env
        widened = ContainerSandbox(
            self.plan, env, mounts, network=self.network, max_memory=self.max_memory, max_procs=self.max_procs
        )
        widened.names = self.names
        return widened

    def limit_hit(self) -> str | None:
        return None

    def end_containers(self) -> None:
        """Remove every container this attempt started that is still there (a killed ``run`` leaves its container
        running): after the agent, before the verifier, and at cleanup. Then what they wrote is made inert on this
        host (``strip_privileges``): the files have crossed back."""
        if not self.names:
            return
        names, self.names[:] = list(self.names), []
        rt = self.plan.runtime
        proc.run([rt.program, "rm", "--force", "--time", "0", *names], cwd="/", timeout=120, sweep=False)
        self.files_returned()

    def files_returned(self) -> None:
        """Every tree a container of this attempt could write, made inert: no set-uid or set-gid bit, no file
        capability, no device node (a root container user writes them as this host's root)."""
        for path in (self.mounts.worktree, *self.mounts.writable, self.mounts.scratch):
            try:
                ownership.strip_privileges(path)
            except OSError as exc:
                log.warning("%s: what a container wrote could not be checked for set-uid files: %s", path, exc)

    def end_processes(self) -> None:
        self.end_containers()

    def cleanup(self) -> None:
        self.end_containers()

    def _map(self, text: str) -> str:
        """A host path inside the worktree as the container sees it."""
        root = str(self.mounts.worktree)
        if text == root:
            return self.env.workdir
        if text.startswith(root + "/"):
            return self.env.workdir + text[len(root) :]
        return text

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Wrapped:
        rt = self.plan.runtime
        name = f"worktrial-{uuid.uuid4().hex[:16]}"
        self.names.append(name)
        args = [rt.program, "run", "--rm", "--name", name, "--interactive", *rt.run_options]
        args += ["--label", f"{HARNESS_LABEL}={harness_id()}"]  # found again if this harness is killed (-9)
        args += ["--network", {"off": "none", "on": "bridge", "host": "host"}[self.network]]
        # Never more privileges than it started with; a user worktrial picked gets no capabilities either (a task's
        # own user, root in most Harbor images, keeps the runtime's default set: its verifiers install packages).
        args += ["--security-opt", "no-new-privileges"]
        args += [*self._user_args(), *self._limit_args(), *self._volume_args()]
        tool_args, argv = self._tool(list(argv))
        args += tool_args
        host_program = bool(tool_args)  # a preset's CLI keeps the scratch HOME its configuration is written to
        # What the runtime itself reads (where its storage and configuration are) is the harness's; the container
        # gets its own values of those it needs, which are no secrets, on the command line, and the image's PATH.
        # Every other variable goes by name only: its value travels in the runtime's environment, never on a
        # command line.
        own_home = self.env.image_home and not host_program
        inline = {k: self._map(env[k]) for k in _INLINE if k in env and not (own_home and k != "TMPDIR")}
        inline["TMPDIR"] = "/tmp"
        child = {k: self._map(v) for k, v in env.items() if k not in RUNTIME_ENV}
        child.update({k: v for k, v in self.env.env.items() if k not in RUNTIME_ENV})
        args += [arg for k, v in sorted(inline.items()) for arg in ("--env", f"{k}={v}")]
        args += [arg for k in sorted(child) for arg in ("--env", k)]
        args += ["--workdir", self._map(str(cwd)), self.env.image, *(self._map(a) for a in argv)]
        host_env = {**child, **{k: v for k, v in os.environ.items() if k in RUNTIME_ENV}}
        host_env.setdefault("PATH", os.defpath)
        return Wrapped(args, host_env)

    def _user_args(self) -> list[str]:
        """Who the container runs as: a uid worktrial picked (no capabilities), or the task's own user."""
        if self.uid is not None and os.geteuid() == 0:
            for path in (self.mounts.worktree, *self.mounts.writable, self.mounts.scratch):
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
        return args

    def _tool(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """The agent's CLI inside the container: installed into the image's tools volume, or the host's own."""
        installed = self.plan.tools.get(self.env.image, {})
        if argv and argv[0] in installed:
            return ["--volume", f"{TOOLS_VOLUME}:{TOOLS_VOLUME_DIR}:ro"], [installed[argv[0]], *argv[1:]]
        if argv and (tool := _host_tool(argv[0])) is not None:
            # A program the harness found on this host (a preset's pinned CLI): its directory, read-only, where any
            # user can reach it (the host's may lie under a home no other user may enter, such as /root).
            return ["--volume", f"{tool.parent}:{TOOLS_DIR}:ro"], [f"{TOOLS_DIR}/{tool.name}", *argv[1:]]
        return [], argv
