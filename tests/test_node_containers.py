"""A Ray worker's side of the container plan (``engine/node_containers.py``) without a cluster: a node that lacks
the run's runtime says which node and what to do, as an infrastructure error of the attempt, not a crash."""

from __future__ import annotations

import pickle

import pytest

from worktrial.engine.node_containers import NodeContainers, NodeUnready, unfilled
from worktrial.isolation.container import ContainerEnv, ContainerPlan, ContainerRuntime

PINNED = "sha256:" + "a" * 64


def test_a_node_without_the_run_s_runtime_says_which_node_and_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKTRIAL_PODMAN", "/nonexistent/podman")  # this node's podman: not there
    plan = ContainerPlan(
        runtime=ContainerRuntime("podman", "/usr/bin/podman", "4.9.3"),
        tasks={"t": ContainerEnv(image=PINNED, digest=PINNED)},
    )
    node = NodeContainers("Ray worker ray:abc/12 (host n1)")
    with pytest.raises(NodeUnready) as raised:
        node.plan_for(plan, "t", None, None, {"name": "nop"})
    message = str(raised.value)
    assert message.startswith("Ray worker ray:abc/12 (host n1) cannot run container tasks with podman")
    assert "/nonexistent/podman" in message and "--ray-resource" in message


def test_the_plan_travels_without_the_values_the_driver_filled_in() -> None:
    """A Harbor task's ``${VAR}`` values come from the driver's environment: they stay on the driver, and each node
    fills the templates from its own (keys never travel to the cluster)."""
    env = ContainerEnv(image=PINNED, digest=PINNED, env={"API_TOKEN": "s3cret-driver"}, verifier_env={"K": "s3cret-v"})
    plan = ContainerPlan(runtime=ContainerRuntime("podman", "/usr/bin/podman", "4.9.3"), tasks={"t": env})
    wire = unfilled(plan)
    assert wire is not None and wire.tasks["t"].image == PINNED
    assert b"s3cret" not in pickle.dumps(wire)
    assert unfilled(None) is None
