"""Harbor's ``task.toml`` (TaskConfig schema 1.x, as Harbor 0.26 reads it), every field parsed and each one either
honoured by worktrial or refused in one line naming the task and the field.

The models mirror the field names of Harbor's schema (``harbor/models/task/config.py``); unlike Harbor they forbid
unknown keys in its tables, so a misspelt field is refused instead of silently ignored. ``[metadata]`` stays free
form, as in Harbor. What the attempt's container needs beyond the suite's own environment fields (the verifier's
environment mode, user and network, a healthcheck, artifacts, the phases' variables) is carried on the task as
:class:`HarborRuntime`; what worktrial cannot honour is refused (docs/environments.md lists every field).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from worktrial.errors import SuiteError

NetworkMode = Literal["no-network", "public", "allowlist"]
VerifierMode = Literal["shared", "separate"]
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
Seconds = Field(default=None, gt=0)
_OWN_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "TMPDIR"})
_RELATIVE = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[^\0]+$")


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Healthcheck(_Table):
    """Docker HEALTHCHECK's options: ``command`` must pass ``retries`` times before the agent starts."""

    command: str
    interval_sec: float = Field(default=5.0, gt=0)
    timeout_sec: float = Field(default=30.0, gt=0)
    start_period_sec: float = Field(default=0.0, ge=0)
    start_interval_sec: float = Field(default=5.0, gt=0)
    retries: StrictInt = Field(default=3, ge=1)


class McpServer(_Table):
    name: str
    transport: Literal["stdio", "sse", "streamable-http", "http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)


class Artifact(_Table):
    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None


class Tpu(_Table):
    type: str
    topology: str


class _Network(_Table):
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class EnvironmentTable(_Network):
    build_timeout_sec: float | None = Seconds
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: StrictInt | None = Field(default=None, gt=0)
    memory: str | None = None
    """Harbor's older spelling of ``memory_mb`` (``"2G"``)."""
    storage_mb: StrictInt | None = Field(default=None, gt=0)
    storage: str | None = None
    """Harbor's older spelling of ``storage_mb`` (``"10G"``)."""
    gpus: StrictInt | None = Field(default=None, ge=0)
    gpu_types: list[str] | None = None
    tpu: Tpu | None = None
    mcp_servers: list[McpServer] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: Healthcheck | None = None
    workdir: str | None = None
    allow_internet: StrictBool | None = None
    """Harbor's older spelling of ``network_mode`` (true: public, false: no-network)."""

    @field_validator("os", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class AgentTable(_Network):
    timeout_sec: float | None = Seconds
    user: str | StrictInt | None = None


class Collect(_Table):
    command: str
    service: str = "main"
    timeout_sec: float = Field(default=60.0, gt=0)
    user: str | StrictInt | None = None


class VerifierTable(_Network):
    timeout_sec: float | None = Seconds
    env: dict[str, str] = Field(default_factory=dict)
    user: str | StrictInt | None = None
    environment_mode: VerifierMode | None = None
    environment: EnvironmentTable | None = None
    collect: list[Collect] = Field(default_factory=list)


class SolutionTable(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class Author(_Table):
    name: str
    email: str | None = None


class PackageTable(_Table):
    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class StepTable(_Table):
    name: str
    agent: AgentTable = Field(default_factory=AgentTable)
    verifier: VerifierTable = Field(default_factory=VerifierTable)
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None
    artifacts: list[str | Artifact] = Field(default_factory=list)


class TaskConfig(_Table):
    """The whole of a ``task.toml``."""

    schema_version: str | None = None
    version: str | None = None
    """The older name of ``schema_version``."""
    task: PackageTable | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierTable = Field(default_factory=VerifierTable)
    agent: AgentTable = Field(default_factory=AgentTable)
    environment: EnvironmentTable = Field(default_factory=EnvironmentTable)
    solution: SolutionTable = Field(default_factory=SolutionTable)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepTable] | None = None
    artifacts: list[str | Artifact] = Field(default_factory=list)


class HarborRuntime(_Table):
    """What of a task's ``task.toml`` the attempt's checkout needs beyond the suite's own environment fields, carried
    on the task (``environment.harbor``) so the container checkout can honour it."""

    verifier_mode: VerifierMode = Field(
        default="shared",
        description="Where Harbor runs tests/test.sh: in the agent's own container once the agent ended (shared, "
        "Harbor's default) or in a fresh one of the task's image (separate).",
    )
    verifier_mode_declared: bool = Field(default=False, description="Whether task.toml named the verifier's mode.")
    env: dict[str, str] = Field(default_factory=dict, description="[environment] env: every phase (templates kept).")
    verifier_env: dict[str, str] = Field(default_factory=dict, description="[verifier] env (templates kept).")
    solution_env: dict[str, str] = Field(default_factory=dict, description="[solution] env (templates kept).")
    storage_mb: StrictInt | None = Field(default=None, description="The task's disk size (recorded; see docs).")
    network_mode: NetworkMode = "public"
    verifier_user: str | None = Field(default=None, description="[verifier] user, where it is not the agent's.")
    verifier_network: NetworkMode | None = Field(
        default=None, description="[verifier] network_mode, where it is not the agent's (a verifier's own container)."
    )
    healthcheck: Healthcheck | None = Field(default=None, description="[environment] healthcheck: before the agent.")
    artifacts: list[Artifact] = Field(default_factory=list, description="artifacts: collected after the agent.")
    workdir_from_image: bool = Field(
        default=False, description="task.toml names no workdir: the image's WORKDIR is the agent's directory."
    )


def _size_mb(value: str, task: str, field: str) -> int:
    match = _SIZE.match(value)
    if match is None:
        raise SuiteError(f'task {task}: [environment] {field}: must be a size such as "2G" or "512M" (got {value!r})')
    scale = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[match.group(2).upper()]
    return max(1, round(float(match.group(1)) * scale))


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``("environment", "cpu")`` as ``[environment] cpu``; a top-level key as itself."""
    parts = [str(p) for p in loc]
    if len(parts) == 1:
        return parts[0]
    return f"[{'.'.join(parts[:-1])}] {parts[-1]}"


def parse_task_config(data: dict[str, Any], task: str) -> TaskConfig:
    """``task.toml`` as Harbor's schema; a wrong or unknown field is one line naming the task and the field."""
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = _field_path(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            raise SuiteError(f"task {task}: task.toml field {where} is not in Harbor's task schema") from None
        raise SuiteError(f"task {task}: task.toml field {where}: {error['msg']}") from None


def template_names(values: dict[str, str]) -> list[str]:
    """The host variables ``${VAR}`` / ``${VAR:-default}`` templates in these values read (Harbor resolves them
    from the host's environment)."""
    return sorted({m.group(1) for v in values.values() for m in _TEMPLATE.finditer(v)})


def resolve_templates(values: dict[str, str], host: dict[str, str], task: str, field: str) -> dict[str, str]:
    """The values with their ``${VAR}`` templates filled from ``host``; a variable that is unset and has no
    default is one line naming the task, the field and the variable."""

    def fill(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in host:
            return host[name]
        if default is not None:
            return default
        raise SuiteError(f"task {task}: {field} needs ${{{name}}}, which is not set here; export it and run again")

    return {key: _TEMPLATE.sub(fill, value) for key, value in values.items()}


def _refuse(task: str, field: str, why: str) -> SuiteError:
    return SuiteError(f"task {task}: task.toml field {field}: {why}")


def _network(table: _Network, legacy: bool | None) -> NetworkMode | None:
    if table.network_mode is not None:
        return table.network_mode
    if legacy is not None:
        return "public" if legacy else "no-network"
    return None


def check_config(config: TaskConfig, task: str) -> tuple[HarborRuntime, dict[str, Any]]:
    """What worktrial does with each field: the runtime carried on the task, and the suite environment's fields
    (``cpus``, ``memory_mb``, ``network``, ``user``, ``workdir``, ``build_timeout_secs``). Refuses, in one line,
    every field today's container path cannot honour."""
    env, agent, verifier = config.environment, config.agent, config.verifier
    fields: dict[str, Any] = {}
    if env.os != "linux":
        raise _refuse(task, "[environment] os", f"{env.os!r} containers cannot run here; worktrial runs Linux ones")
    if env.gpus or env.gpu_types:
        raise _refuse(task, "[environment] gpus", "this task needs GPUs and worktrial gives containers none")
    if env.tpu is not None:
        raise _refuse(task, "[environment] tpu", "this task needs a TPU slice; worktrial runs on this machine only")
    if env.skills_dir is not None:
        raise _refuse(task, "[environment] skills_dir", "agent skills are not installed by worktrial yet")
    if env.mcp_servers:
        raise _refuse(
            task, "[environment] mcp_servers", "no agent preset of worktrial's is given MCP servers yet (Harbor's are)"
        )
    if config.steps:
        raise _refuse(
            task,
            "[[steps]]",
            "multi-step tasks (an instruction and a verifier per step in one container) are not run by worktrial yet",
        )
    if config.multi_step_reward_strategy is not None:
        raise _refuse(task, "multi_step_reward_strategy", "only multi-step tasks have one, and they are refused")
    artifacts = tuple(Artifact(source=a) if isinstance(a, str) else a for a in config.artifacts)
    for artifact in artifacts:
        if artifact.service not in (None, "main"):
            raise _refuse(task, "artifacts", f"{artifact.service!r}: compose services are refused; only 'main'")
        if not artifact.source.startswith("/"):
            raise _refuse(task, "artifacts", f"{artifact.source!r}: a source must be an absolute path")
        if artifact.destination is not None and not _RELATIVE.match(artifact.destination):
            raise _refuse(task, "artifacts", f"{artifact.destination!r}: a destination must be a relative path")
    if verifier.environment is not None:
        raise _refuse(task, "[verifier.environment]", "a verifier image of its own is not supported yet")
    if verifier.collect:
        raise _refuse(task, "[[verifier.collect]]", "collect hooks run in compose services, which are refused")
    for name, values in (("[environment] env", env.env), ("[verifier] env", verifier.env)):
        for key in values:
            if not _ENV_NAME.match(key):
                raise _refuse(task, name, f"{key!r} is not a variable name")
            if key in _OWN_VARIABLES:
                raise _refuse(task, name, f"{key} comes from the image and the container runtime; not set by a task")
    for key in config.solution.env:
        if not _ENV_NAME.match(key):
            raise _refuse(task, "[solution] env", f"{key!r} is not a variable name")
        if key in _OWN_VARIABLES:
            raise _refuse(task, "[solution] env", f"{key} comes from the image and the container runtime")
    base = _network(env, env.allow_internet) or "public"
    for where, table in (("environment", env), ("agent", agent), ("verifier", verifier)):
        if table.network_mode == "allowlist" or table.allowed_hosts:
            raise _refuse(
                task,
                f"[{where}] allowed_hosts",
                "an egress allowlist needs a filtering proxy the container runtime does not give; not enforced by "
                "worktrial, so refused",
            )
    agent_network = _network(agent, None) or base
    verifier_network = _network(verifier, None)
    fields["network"] = "off" if agent_network == "no-network" else "on"
    agent_user = None if agent.user is None else str(agent.user)
    verifier_user = None if verifier.user is None else str(verifier.user)
    fields["user"] = agent_user if agent_user is not None else "image"
    if env.cpus is not None:
        fields["cpus"] = float(env.cpus)
    memory = (
        env.memory_mb if env.memory_mb is not None else _size_mb(env.memory, task, "memory") if env.memory else None
    )
    if memory is not None:
        fields["memory_mb"] = memory
    storage = (
        env.storage_mb
        if env.storage_mb is not None
        else _size_mb(env.storage, task, "storage")
        if env.storage
        else None
    )
    if env.build_timeout_sec is not None:
        fields["build_timeout_secs"] = max(1, round(env.build_timeout_sec))
    if env.workdir is not None:
        if not env.workdir.startswith("/"):
            raise _refuse(task, "[environment] workdir", f"must be an absolute path (got {env.workdir!r})")
        fields["workdir"] = env.workdir
    runtime = HarborRuntime(
        verifier_mode=verifier.environment_mode or "shared",
        verifier_user=verifier_user if verifier_user != agent_user else None,
        verifier_network=None if verifier_network in (None, agent_network) else verifier_network,
        healthcheck=env.healthcheck,
        artifacts=list(artifacts),
        verifier_mode_declared=verifier.environment_mode is not None,
        env=dict(env.env),
        verifier_env=dict(verifier.env),
        solution_env=dict(config.solution.env),
        storage_mb=storage,
        network_mode=base,
        workdir_from_image=env.workdir is None,
    )
    return runtime, fields
