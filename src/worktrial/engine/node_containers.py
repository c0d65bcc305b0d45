"""A remote worker's side of a run's container plan: the node's own runtime, and each image made present there and
checked against the digest the driver pinned (docs/cluster.md, "Container tasks").

The driver pins each container task's image by id (``engine/containers.py``). A Ray worker runs its attempts'
containers with its node's runtime, found and probed here once (its ``run`` options are this node's), and makes
each image present the way the driver did: already there by its pinned id (a shared store, or an image loaded with
``save``/``load``), else pulled by name, else built from the task's Dockerfile in the shipped suite files. What it
finds must have the pinned id: anything else would be an attempt silently run in another image.

A preset's CLI is put into the images here too (``with_agent_tools``), from this node's installation; a Harbor
task's ``${VAR}`` templates (``[environment] env``, ``[verifier] env``, the oracle's ``[solution] env``) are filled
from this node's environment. The driver sends the plan with those values left out (``unfilled``): keys never
travel.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from worktrial.engine.containers import with_agent_tools
from worktrial.errors import WorktrialError
from worktrial.isolation.container import (
    ContainerEnv,
    ContainerPlan,
    ContainerRuntime,
    build_image,
    find_runtime,
    inspect_id,
    named_image,
    probe,
    sweep_orphans,
)
from worktrial.model.harbor_config import resolve_templates
from worktrial.model.suite import Environment

log = logging.getLogger(__name__)


class ImageMismatch(WorktrialError):
    """The image this node has for a task is not the one the driver pinned."""


class NodeUnready(WorktrialError):
    """This node cannot run the task's container: no runtime, a runtime that cannot start one, or an image it
    cannot pull or build."""


class NodeContainers:
    """One worker's runtime and images for the run (each checked once, then reused by its attempts)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._runtime: ContainerRuntime | None = None
        self._probed = False
        self._images: dict[str, str | None] = {}  # pinned id -> None when present here, else why not
        self._plans: dict[str, ContainerPlan] = {}  # task id -> its plan on this node
        self._lock = threading.Lock()

    def plan_for(
        self,
        plan: ContainerPlan,
        task_id: str,
        environment: Environment | None,
        suite_dir: str | None,
        describe: Mapping[str, Any],
    ) -> ContainerPlan:
        """The driver's plan for one task, made this node's: its runtime, the image present with the pinned id, the
        agent's tools put in. Raises ``ImageMismatch`` or ``NodeUnready`` (both say which node)."""
        env = plan.tasks[task_id]
        with self._lock:
            runtime = self._node_runtime(plan.runtime)
            self._ensure_image(runtime, env, task_id, environment, suite_dir)
            if not self._probed:
                runtime = self._probe(runtime, env.image)
            local = self._plans.get(task_id)
            if local is None:
                one = ContainerPlan(runtime=runtime, tasks={task_id: self._filled(env, task_id, environment)})
                try:
                    local = with_agent_tools(one, describe, lambda line: log.info("%s: %s", self.node, line))
                except WorktrialError as exc:
                    raise NodeUnready(f"{self.node} cannot put the agent into image {env.digest[:19]}: {exc}") from None
                assert local is not None
                self._plans[task_id] = local
        return local

    def _filled(self, env: ContainerEnv, task_id: str, environment: Environment | None) -> ContainerEnv:
        """The task's variables with their templates filled from this node's environment."""
        harbor = environment.harbor if environment is not None else None
        if harbor is None:
            return env
        host = dict(os.environ)
        try:
            return replace(
                env,
                env=resolve_templates(harbor.env, host, task_id, "[environment] env"),
                verifier_env=resolve_templates(harbor.verifier_env, host, task_id, "[verifier] env"),
            )
        except WorktrialError as exc:
            raise NodeUnready(f"{self.node}: {exc}") from None

    def _node_runtime(self, driver: ContainerRuntime) -> ContainerRuntime:
        """This node's runtime of the driver's kind (an image id is the same only within one kind's store)."""
        if self._runtime is None:
            try:
                self._runtime = find_runtime(driver.name)
            except WorktrialError as exc:
                raise NodeUnready(
                    f"{self.node} cannot run container tasks with {driver.name}, the runtime the run pinned its images "
                    f"with ({exc}); install it there, or keep these tasks off that node (--ray-resource)"
                ) from None
        return self._runtime

    def _probe(self, runtime: ContainerRuntime, image: str) -> ContainerRuntime:
        try:
            probed = probe(runtime, image)
        except WorktrialError as exc:
            raise NodeUnready(f"{self.node}: {exc}") from None
        for note in probed.notes:
            log.warning("%s: %s", self.node, note)
        sweep_orphans(probed)  # containers of a worker of this node that was killed (only its own PID namespace's)
        self._runtime, self._probed = probed, True
        return probed

    def _ensure_image(
        self,
        runtime: ContainerRuntime,
        env: ContainerEnv,
        task_id: str,
        environment: Environment | None,
        suite_dir: str | None,
    ) -> None:
        pinned = env.digest
        if pinned not in self._images:
            try:
                self._images[pinned] = _make_present(runtime, pinned, environment, suite_dir, self.node)
            except WorktrialError as exc:
                raise NodeUnready(f"{self.node} cannot make the image of task {task_id} present: {exc}") from None
        found = self._images[pinned]
        if found is not None:
            raise ImageMismatch(
                f"the image of task {task_id} on {self.node} is {found}, the driver pinned {pinned}; the run stops "
                "rather than run attempts in another image (a build that is not reproducible differs on each node: "
                "load the driver's image there, `podman save` / `podman load`, or name an image in a registry)"
            )


def _make_present(
    runtime: ContainerRuntime, pinned: str, environment: Environment | None, suite_dir: str | None, node: str
) -> str | None:
    """None when the pinned image is present here (found, pulled or built), else the id this node got instead."""
    if inspect_id(runtime, pinned) == pinned:
        return None
    got: str | None = None
    if environment is not None and environment.image is not None:
        got = named_image(runtime, environment.image, lambda line: log.info("%s: %s", node, line))
        if got == pinned:
            return None
    if environment is not None and environment.dockerfile is not None and suite_dir is not None:
        dockerfile = Path(suite_dir) / environment.dockerfile
        context = Path(suite_dir) / environment.context if environment.context else dockerfile.parent
        got = build_image(runtime, dockerfile, context, environment.build_timeout_secs)
        if got == pinned:
            return None
    if got is None:
        raise NodeUnready("the task names no image and no Dockerfile reached this node")
    return got


def unfilled(plan: ContainerPlan | None) -> ContainerPlan | None:
    """The plan as it travels to remote workers: without the values the driver filled into the tasks' variables
    from its own environment (each node fills them from its own, ``NodeContainers``)."""
    if plan is None:
        return None
    tasks = {task_id: replace(env, env={}, verifier_env={}) for task_id, env in plan.tasks.items()}
    return replace(plan, tasks=tasks)
