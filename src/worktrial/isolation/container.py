"""Container environments: the Docker or Podman CLI (one code path, no daemon of worktrial's own) finds or builds a
task's image, pins its id, and probes once what this machine's runtime needs to start a container.

An attempt's containers themselves (one per attempt, every phase exec'd into it) are ``attempt_container.py``'s;
what they see of the host is described there and in docs/environments.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import psutil

from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.isolation.sandbox import NetworkMode
from worktrial.model.harbor_config import Artifact, Healthcheck
from worktrial.safe_text import one_line

log = logging.getLogger(__name__)

RuntimeChoice = Literal["auto", "docker", "podman"]
VerifierRoom = Literal["shared", "separate", "fresh"]
RUNTIME_CHOICES: tuple[RuntimeChoice, ...] = ("auto", "docker", "podman")
IMAGE_TAG_PREFIX = "localhost/worktrial-env"
"""Built images are tagged ``<prefix>:<first 24 hex of the build inputs' digest>``: the cache across runs."""
DEFAULT_WORKDIR = "/app"
TOOLS_VOLUME = "worktrial-tools"
HARNESS_LABEL = "worktrial.harness"
HARNESS_NS_LABEL = "worktrial.harness.pidns"
"""Every container an attempt starts carries the starting harness's pid and start time: a harness killed with
``kill -9`` cannot remove its containers, the next run with the same runtime does (``sweep_orphans``); and the
PID namespace it ran in (``HARNESS_NS_LABEL``), since its pid means something only there."""


def harness_id(pid: int | None = None) -> str:
    """``<pid>-<start time in ms>`` of this (or that) process: a pid reused by another process never matches."""
    pid = os.getpid() if pid is None else pid
    try:
        return f"{pid}-{int(psutil.Process(pid).create_time() * 1000)}"
    except psutil.Error:
        return f"{pid}-0"


INITIAL_PID_NAMESPACE = "4026531836"
"""The kernel's fixed inode number of the machine's own PID namespace (``PROC_PID_INIT_INO``)."""


def pid_namespace() -> str:
    """This process's PID namespace (its inode number): the ``HARNESS_NS_LABEL`` of the containers it starts."""
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return "?"


def orphan_containers(runtime: ContainerRuntime) -> list[str]:
    """The containers of harnesses that are gone (killed while an attempt's container ran), by name. Only those
    started from this PID namespace are judged: a harness in another one (a Ray node's namespace sharing this
    machine's runtime) has pids this one cannot see. A container without the namespace label (started by an
    earlier version) is judged only from the machine's own namespace, where such harnesses ran."""
    template = '{{.Names}}\t{{index .Labels "' + HARNESS_LABEL + '"}}\t{{index .Labels "' + HARNESS_NS_LABEL + '"}}'
    listed = proc.run(
        [runtime.program, "ps", "--all", "--filter", f"label={HARNESS_LABEL}", "--format", template],
        cwd="/",
        timeout=60,
        sweep=False,
    )
    if not listed.ok:
        return []
    here = pid_namespace()
    stale = []
    for line in listed.stdout_tail.decode("utf-8", "replace").splitlines():
        name, owner, namespace = ([*line.split("\t"), "", ""])[:3]
        owner, namespace = owner.strip(), namespace.strip()
        if namespace in ("", "<no value>"):
            namespace = INITIAL_PID_NAMESPACE
        pid, _, _started = owner.partition("-")
        if namespace == here and name and pid.isdigit() and harness_id(int(pid)) != owner:
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
    image_user: str | None = None
    """The image's own ``USER`` where the task runs as it (for the record of the containment)."""
    reward_decides: bool = False
    """The verifier's reward decides the outcome however the agent ended (Harbor's rule: its tests run after a
    timed-out or failed agent too, and no claim is asked of it); else worktrial's claim-and-verify rule."""
    verifier_mode: VerifierRoom = "fresh"
    """Where the task's verifier runs (docs/environments.md, "Where the verifier runs"): in the agent's own
    container once the agent ended (``shared``, Harbor's default), in a new one of the image with the agent's
    worktree (``separate``), or in a new one with the agent's files rebuilt from the base (``fresh``, worktrial's)."""
    verifier_user: str | None = None
    """The verifier's own user (a Harbor task's ``[verifier] user``); None: the container's."""
    verifier_network: NetworkMode | None = None
    """The verifier's own network where it has a container of its own (``[verifier] network_mode``)."""
    healthcheck: Healthcheck | None = None
    """A command that must pass in the container before the agent starts (``[environment] healthcheck``)."""
    artifacts: tuple[Artifact, ...] = ()
    """Paths collected from the agent's container into the run store once the agent ended (``artifacts``)."""
    solution_env: Mapping[str, str] = field(default_factory=dict)
    """The oracle's own variables (a Harbor task's ``[solution] env``, templates filled when the agent is the
    oracle)."""


@dataclass(frozen=True)
class ContainerPlan:
    """What every container attempt of a run shares: the runtime and each container task's environment."""

    runtime: ContainerRuntime
    tasks: Mapping[str, ContainerEnv] = field(default_factory=dict)
    tools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Image -> {host program -> that program installed in the image's tools volume} (a preset's Python CLI)."""
    host_tool: str | None = None
    """The real path of the agent's native executable on this host (a preset's CLI), whose directory every
    container of the run mounts read-only at ``TOOLS_DIR``."""

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
        "podman runc catatonit; macOS: Docker Desktop or `brew install podman`)"
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
        argv = [
            runtime.program,
            "run",
            "--rm",
            "--init",
            "--network",
            "none",
            *options,
            image,
            "/bin/sh",
            "-c",
            "exit 0",
        ]
        result = proc.run(argv, cwd="/", timeout=300, sweep=False)
        if result.ok:
            return replace(runtime, run_options=tuple(options), notes=tuple(notes))
        detail = result.stderr_tail.decode("utf-8", "replace")
        if "init binary" in detail or "catatonit" in detail:
            raise BadInputError(
                f"{runtime.name} has no init for an attempt's container (its PID 1, which reaps orphans): install "
                "catatonit (Debian/Ubuntu: apt-get install catatonit; Docker brings its own docker-init)"
            )
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


def image_config(runtime: ContainerRuntime, image: str, key: str) -> str:
    """One field of the image's config (``User``, ``WorkingDir``), as text ("" when it sets none)."""
    result = proc.run(
        [runtime.program, "image", "inspect", "--format", "{{.Config." + key + "}}", image],
        cwd="/",
        timeout=60,
        sweep=False,
    )
    text = result.stdout_tail.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:100] if result.ok and text else ""


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
