"""A run's container environments: find the runtime, build or find each task's image once, pin its digest, and give
each container task's attempt its container sandbox."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.isolation import container_tools, ownership
from worktrial.isolation.container import (
    TOOLS_VOLUME,
    ContainerEnv,
    ContainerPlan,
    ContainerRuntime,
    ContainerSandbox,
    Mounts,
    RuntimeChoice,
    build_image,
    find_runtime,
    image_workdir,
    named_image,
    probe,
    sweep_orphans,
)
from worktrial.isolation.container_tools import python_tool
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.sandbox import NetworkMode
from worktrial.isolation.workspace import AttemptWorkspace, SourceRepo
from worktrial.model.harbor_config import resolve_templates
from worktrial.model.suite import Environment, LoadedSuite, Task

__all__ = [
    "ContainerSandbox",
    "container_sandbox",
    "image_differences",
    "plan_containers",
    "read_reward",
    "with_agent_tools",
]


def plan_containers(
    loaded: LoadedSuite, choice: RuntimeChoice, warn: Callable[[str], None], *, force_build: bool = False
) -> ContainerPlan | None:
    """The run's container plan, or None when no task of the suite has a container environment. Pulls each named
    image that is absent and builds each Dockerfile once (``force_build``: also where an image is named too, as
    Harbor's ``--force-build``; an earlier run's build of the same inputs is reused), and probes the runtime once."""
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
        if harbor is not None and harbor.workdir_from_image:
            workdir = image_workdir(runtime, image) or env.workdir
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
        )
    return ContainerPlan(runtime=runtime, tasks=tasks)


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
    """The plan with the agent's CLI installed into each image, when the agent is a preset whose CLI is a Python
    console script on this host (a native executable is mounted as it is)."""
    binary = description.get("binary")
    if plan is None or not description.get("preset") or not isinstance(binary, str):
        return plan
    program = shutil.which(binary)
    tool = python_tool(Path(os.path.realpath(program))) if program else None
    if program is None or tool is None:
        return plan
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


def container_sandbox(
    plan: ContainerPlan | None,
    task: Task,
    ws: AttemptWorkspace,
    source: SourceRepo | None,
    *,
    network: NetworkMode,
    max_memory: int | None,
    max_procs: int | None,
) -> ContainerSandbox | None:
    """The attempt's container sandbox when its task has a container environment, else None."""
    if plan is None or task.id not in plan.tasks:
        return None
    env = plan.tasks[task.id]
    readonly = tuple(p for p in ([source.objects_dir] if source is not None else []) if p.is_dir())
    mounts = Mounts(worktree=ws.worktree, writable=(ws.git_dir,), readonly=readonly, scratch=ws.root / "scratch")
    return ContainerSandbox(plan, env, mounts, network=network, max_memory=max_memory, max_procs=max_procs)


MAX_REWARD_BYTES = 64 * 1024
MAX_REWARD_KEYS = 100
_REWARD_FILES = ("reward.txt", "reward.json")


def verifier_scope(scope: ProcessScope, suite_dir: str | None, scratch: Path) -> tuple[ProcessScope, Path | None]:
    """The verifier's containers of a container task: its ``tests/`` copied in now (after the agent ended) at
    ``/tests`` and a fresh ``/logs/verifier``; with the directory the reward file will be in (None for a task
    that verifies by exit status alone)."""
    sandbox = scope.sandbox
    if not isinstance(sandbox, ContainerSandbox) or sandbox.env.tests_dir is None or not suite_dir:
        return scope, None
    room = scratch / f"verifier-{uuid.uuid4().hex[:12]}"
    tests, logs = room / "tests", room / "logs"
    shutil.copytree(Path(suite_dir) / sandbox.env.tests_dir, tests)
    logs.mkdir(parents=True)
    for path in (tests, logs):  # the copy of a read-only bundle is read-only: the verifier may write in both
        for entry in (path, *path.rglob("*")):
            entry.chmod(entry.stat().st_mode | stat.S_IWUSR)
    if sandbox.uid is not None:
        ownership.hand_over(room, sandbox.uid)
    return scope.confined(sandbox.with_verifier_files(tests, logs)), logs


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
