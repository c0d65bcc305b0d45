"""A run's container environments: find the runtime, build or find each task's image once, pin its digest, and
resolve each container task's environment (where its verifier runs, its network, users, variables), read by the
attempt's container checkout (``engine/container_checkout.py``)."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from worktrial.errors import BadInputError
from worktrial.isolation import container_tools
from worktrial.isolation.attempt_container import host_tool
from worktrial.isolation.container import (
    TOOLS_VOLUME,
    ContainerEnv,
    ContainerPlan,
    ContainerRuntime,
    RuntimeChoice,
    VerifierRoom,
    build_image,
    find_runtime,
    image_config,
    image_workdir,
    named_image,
    probe,
    sweep_orphans,
)
from worktrial.isolation.container_tools import python_tool
from worktrial.isolation.limits import Limits
from worktrial.isolation.sandbox import NetworkMode
from worktrial.model.envelope import SandboxInfo
from worktrial.model.harbor_config import resolve_templates
from worktrial.model.suite import Environment, LoadedSuite

__all__ = [
    "combined_network",
    "containment",
    "image_differences",
    "network_warning",
    "plan_containers",
    "read_reward",
    "with_agent_tools",
]

VerifierRoomChoice = Literal["task", "fresh"]
"""``--verifier-room``: where each task says its verifier runs (Harbor's ``environment_mode``; worktrial's fresh
room for its own suites), or worktrial's fresh room for every task."""


def plan_containers(
    loaded: LoadedSuite,
    choice: RuntimeChoice,
    warn: Callable[[str], None],
    *,
    force_build: bool = False,
    verifier_room: VerifierRoomChoice = "task",
) -> ContainerPlan | None:
    """The run's container plan, or None when no task of the suite has a container environment. Pulls each named
    image that is absent and builds each Dockerfile once (``force_build``: also where an image is named too, as
    Harbor's ``--force-build``; an earlier run's build of the same inputs is reused), and probes the runtime once.
    ``verifier_room``: ``task`` verifies each Harbor task where it says (``shared`` by default, as Harbor does) and
    worktrial's own suites in a fresh room; ``fresh`` verifies every task in worktrial's fresh room."""
    suite = loaded.suite
    wanted = {t.id: env for t in suite.tasks if (env := suite.environment_for(t)) is not None and env.container}
    if not wanted:
        return None
    runtime = find_runtime(choice)
    images: dict[str, str] = {}
    for env in wanted.values():
        key = _image_key(env)
        if key in images:
            continue
        images[key] = _image(runtime, env, loaded.suite_dir, force_build, warn)
    runtime = probe(runtime, next(iter(images.values())))
    for note in runtime.notes:
        warn(note)
    sweep_orphans(runtime)
    host = dict(os.environ)
    tasks = {}
    for task_id, env in wanted.items():
        image = images[_image_key(env)]
        harbor = env.harbor
        workdir = env.workdir
        image_user = image_config(runtime, image, "User") if env.user == "image" else None
        if harbor is not None and harbor.workdir_from_image:
            workdir = image_workdir(runtime, image) or env.workdir
        mode: VerifierRoom = harbor.verifier_mode if harbor is not None and verifier_room == "task" else "fresh"
        verifier_network: NetworkMode | None = None
        if harbor is not None and harbor.verifier_network is not None:
            if mode == "shared":
                raise BadInputError(
                    f"task {task_id}: task.toml field [verifier] network_mode: {harbor.verifier_network!r} differs "
                    "from the agent's network, and its verifier shares the agent's container (environment_mode "
                    "'shared'); set environment_mode = 'separate', or run with --verifier-room fresh"
                )
            verifier_network = "off" if harbor.verifier_network == "no-network" else "on"
        tasks[task_id] = ContainerEnv(
            image=image,
            digest=image,
            workdir=workdir,
            user=env.user,
            network=env.network,
            cpus=env.cpus,
            memory_mb=env.memory_mb,
            tests_dir=env.verifier_tests,
            seed_workdir=env.seed_workdir,
            env=resolve_templates(harbor.env, host, task_id, "[environment] env") if harbor else {},
            verifier_env=resolve_templates(harbor.verifier_env, host, task_id, "[verifier] env") if harbor else {},
            image_home=harbor is not None,
            image_user=image_user or None,
            reward_decides=harbor is not None,
            verifier_mode=mode,
            verifier_user=harbor.verifier_user if harbor is not None else None,
            verifier_network=verifier_network,
            healthcheck=harbor.healthcheck if harbor is not None else None,
            artifacts=tuple(harbor.artifacts) if harbor is not None else (),
            solution_env=dict(harbor.solution_env) if harbor is not None else {},
        )
    return ContainerPlan(runtime=runtime, tasks=tasks)


def combined_network(task: NetworkMode | None, run: NetworkMode) -> NetworkMode:
    """A container's network from its task's (a Harbor task's ``allow_internet`` / ``network_mode``; None: the task
    says nothing) and the run's ``--network``: a task without network never gets one; the run's ``off`` or ``host``
    is honoured for a task with network too (``network_warning`` says so before the run)."""
    if task == "off" or run == "off":
        return "off"
    return run if task is None or run == "host" else task


def containment(plan: ContainerPlan | None, run: NetworkMode, limits: Limits) -> dict[str, SandboxInfo]:
    """How each container task's attempts are contained, for ``run.sandboxes`` (the runtime, the container's user
    and network, the limits): what the envelope records for them instead of the run's sandbox."""
    if plan is None:
        return {}
    rt = plan.runtime
    found: dict[str, SandboxInfo] = {}
    for task_id, env in plan.tasks.items():
        network = combined_network(env.network, run)
        if env.user is None:
            uid = "a uid worktrial picks (no account), no capabilities" if os.geteuid() == 0 else "worktrial's uid"
        elif env.user == "image":
            uid = f"the image's user ({env.image_user or 'root'}), the runtime's default capabilities"
        else:
            uid = f"user {env.user}, the runtime's default capabilities"
        found[task_id] = SandboxInfo(
            kind="container",
            version=f"{rt.name} {rt.version}",
            network=network,
            network_detail={"off": "none (loopback only)", "on": "bridge (outbound)", "host": "the host's"}[network],
            max_memory=limits.max_memory,
            max_procs=limits.max_procs,
            limits="container" if limits.any or env.memory_mb or env.cpus else None,
            uid=uid,
            shown=[
                f"the task's image (environment_images), the worktree at {env.workdir}, the private git dir, scratch",
                f"the verifier: {env.verifier_mode}",
            ],
        )
    return found


def network_warning(plan: ContainerPlan | None, run: NetworkMode) -> str | None:
    """One line when the run's ``--network off`` takes away a network the suite's container tasks declare (every
    Terminal-Bench verifier installs its test tools from the network)."""
    if plan is None or run != "off":
        return None
    wanting = sorted(task_id for task_id, env in plan.tasks.items() if env.network == "on")
    if not wanting:
        return None
    named = ", ".join(wanting[:3]) + (f" and {len(wanting) - 3} more" if len(wanting) > 3 else "")
    return (
        f"--network off: {len(wanting)} container task(s) declare network access ({named}; Harbor's allow_internet "
        "or network_mode = 'public') and run without it; a verifier that installs its test tools from the network "
        "will fail"
    )


def _image_key(env: Environment) -> str:
    """What decides a task's image: tasks that agree on it share one pull or build."""
    return json.dumps([env.image, env.dockerfile, env.context, env.build_timeout_secs])


def _image(
    runtime: ContainerRuntime, env: Environment, suite_dir: Path, force_build: bool, say: Callable[[str], None]
) -> str:
    if env.image is not None and (env.dockerfile is None or not force_build):
        return named_image(runtime, env.image, say)
    assert env.dockerfile is not None
    dockerfile = suite_dir / env.dockerfile
    context = suite_dir / env.context if env.context else dockerfile.parent
    if not dockerfile.is_file():
        raise BadInputError(f"{dockerfile}: Dockerfile not found; fix environment.dockerfile (relative to the suite)")
    if not context.is_dir():
        raise BadInputError(f"{context}: build context not found; fix environment.context (relative to the suite)")
    return build_image(runtime, dockerfile, context, env.build_timeout_secs)


def with_agent_tools(
    plan: ContainerPlan | None, description: Mapping[str, Any], say: Callable[[str], None]
) -> ContainerPlan | None:
    """The plan for this agent: the oracle's ``[solution] env`` templates filled from this host's environment (one
    line naming the task when a variable is missing); a preset's CLI installed into each image when it is a Python
    console script on this host, or mounted from this host when it is a native executable."""
    if plan is None:
        return None
    if description.get("name") == "oracle":
        host = dict(os.environ)
        tasks = {
            task_id: replace(
                env, solution_env=resolve_templates(dict(env.solution_env), host, task_id, "[solution] env")
            )
            for task_id, env in plan.tasks.items()
        }
        return replace(plan, tasks=tasks)
    binary = description.get("binary")
    if not description.get("preset") or not isinstance(binary, str):
        return plan
    program = shutil.which(binary)
    tool = python_tool(Path(os.path.realpath(program))) if program else None
    if program is None:
        return plan
    if tool is None:
        native = host_tool(program)
        return replace(plan, host_tool=str(native)) if native is not None else plan
    tools: dict[str, dict[str, str]] = {}
    for image in sorted({env.image for env in plan.tasks.values()}):
        say(
            f"{tool.distribution}=={tool.version} (the host's {binary}) goes into image {image[:19]}: installed "
            f"once into the volume {TOOLS_VOLUME}, reused after"
        )
        tools[image] = {program: container_tools.install(plan.runtime, image, tool)}
    return replace(plan, tools=tools)


def image_differences(plan: ContainerPlan | None, stored: dict[str, str]) -> list[str]:
    """Why a resumed run's images are not the ones it started with (empty when they are)."""
    now = plan.images() if plan is not None else {}
    return [
        f"image of task {task_id}: stored {digest[:19]}, now {now.get(task_id, 'none')[:19]}"
        for task_id, digest in sorted(stored.items())
        if now.get(task_id) != digest
    ]


MAX_REWARD_BYTES = 64 * 1024
MAX_REWARD_KEYS = 100
_REWARD_FILES = ("reward.txt", "reward.json")


@dataclass(frozen=True)
class Reward:
    """What a verifier's reward file says: the deciding ``value`` (1 passes), every key of a reward.json with
    several, or why there is none."""

    value: float | None
    rewards: dict[str, float] | None = None
    problem: str | None = None


def read_reward(logs: Path) -> Reward:
    """The reward the verifier wrote (``reward.txt``, or ``reward.json``), or why there is none. A reward.json with
    several keys keeps them all; its ``reward`` key decides, else the lowest value (every key must be 1)."""
    for name in _REWARD_FILES:
        path = logs / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return Reward(None, problem=f"{name} cannot be read: {exc.strerror}")
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return Reward(None, problem=f"{name} is not a regular file")
            data = fh.read(MAX_REWARD_BYTES + 1)
        if len(data) > MAX_REWARD_BYTES:
            return Reward(None, problem=f"{name} is larger than {MAX_REWARD_BYTES // 1024} KiB")
        text = data.decode("utf-8", "replace").strip()
        try:
            value = json.loads(text) if name.endswith(".json") else float(text)
        except ValueError:
            return Reward(None, problem=f"{name} is not a number: {text[:40]!r}")
        if not isinstance(value, dict):
            return _number(value, name) or Reward(float(value))
        if not value:
            return Reward(None, problem=f"{name} has no key")
        for key, item in value.items():
            if (bad := _number(item, f"{name} key {str(key)[:40]!r}")) is not None:
                return bad
        rewards = {str(k)[:200]: float(v) for k, v in list(value.items())[:MAX_REWARD_KEYS]}
        decides = rewards["reward"] if "reward" in rewards else min(rewards.values())
        return Reward(decides, rewards if len(rewards) > 1 else None)
    return Reward(None, problem="the verifier wrote no reward (/logs/verifier/reward.txt or reward.json)")


def _number(value: object, what: str) -> Reward | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return Reward(None, problem=f"{what} does not hold a number")
    return None
