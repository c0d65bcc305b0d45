"""A container task's plan and its containers' command lines, without a container runtime: the network a task and
the run's --network combine to, the warning when the run's takes a declared one away, the containment recorded
per task, a plan that travels to a worker process, and the tracker that never takes a runtime's monitor (which
leaves the harness's tree while attempts run) for one of theirs."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worktrial.engine.containers import combined_network, containment, network_warning
from worktrial.isolation.attempt_container import AttemptContainer, Mounts
from worktrial.isolation.container import ContainerEnv, ContainerPlan, ContainerRuntime
from worktrial.isolation.limits import Limits
from worktrial.model.harbor_config import Artifact, Healthcheck

RUNTIME = ContainerRuntime("podman", "/usr/bin/podman", "4.3.1", run_options=("--ulimit", "nofile=1024:1024"))


def _plan(**tasks: ContainerEnv) -> ContainerPlan:
    return ContainerPlan(RUNTIME, tasks)


def _env(**fields: object) -> ContainerEnv:
    return ContainerEnv(image="sha256:" + "a" * 64, digest="sha256:" + "a" * 64, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("task", "run", "expected"),
    [
        ("off", "on", "off"),
        ("off", "host", "off"),  # a task without network never gets one
        ("on", "on", "on"),
        ("on", "host", "host"),
        ("on", "off", "off"),  # the run's off is honoured (and warned about: network_warning)
        (None, "on", "on"),
        (None, "host", "host"),
        (None, "off", "off"),
    ],
)
def test_a_task_s_network_and_the_run_s_combine(task: str | None, run: str, expected: str) -> None:
    assert combined_network(task, run) == expected  # type: ignore[arg-type]


def test_network_off_over_tasks_that_declare_network_is_said_before_the_run() -> None:
    plan = _plan(a=_env(network="on"), b=_env(network="off"), c=_env())
    line = network_warning(plan, "off")
    assert line is not None and "1 container task(s) declare network access (a;" in line and "\n" not in line
    assert network_warning(plan, "on") is None and network_warning(plan, "host") is None
    assert network_warning(_plan(b=_env(network="off")), "off") is None


def test_each_container_task_records_its_runtime_user_and_network() -> None:
    plan = _plan(
        harbor=_env(user="image", image_user="", network="on", verifier_mode="shared"),
        own=_env(network="off", verifier_mode="fresh"),
    )
    found = containment(plan, "on", Limits(max_procs=64))
    harbor, own = found["harbor"], found["own"]
    assert (harbor.kind, harbor.version, harbor.network) == ("container", "podman 4.3.1", "on")
    assert "the image's user (root)" in (harbor.uid or "") and "bridge" in (harbor.network_detail or "")
    assert own.network == "off" and own.max_procs == 64
    assert harbor.summary().startswith("container podman 4.3.1, the image's user (root)")
    assert any("shared" in line for line in harbor.shown or [])


def test_a_plan_travels_to_a_worker_process_whole() -> None:
    env = _env(
        healthcheck=Healthcheck(command="test -f /ready", retries=2),
        artifacts=(Artifact(source="/var/log", destination="logs"),),
        verifier_env={"MODE": "strict"},
        solution_env={"LEVEL": "2"},
    )
    plan = ContainerPlan(RUNTIME, {"t": env}, tools={env.image: {"/usr/bin/mini": "/opt/x"}}, host_tool="/opt/codex")
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_a_container_s_last_command_is_the_container_itself(tmp_path: Path) -> None:
    """A container whose only command is its last one runs it as its main process (``run --rm``, under an init),
    never ``exec`` after a ``run --detach``; its variables go by name; the suite's view is mounted read-only."""
    worktree, scratch, view, suite = tmp_path / "wt", tmp_path / "scratch", tmp_path / "view", tmp_path / "suite"
    for path in (worktree, scratch, suite):
        path.mkdir()
    mounts = Mounts(
        worktree, (), (), scratch, extra=((tmp_path / "logs", "/logs/verifier", True),), views=((suite, view),)
    )
    box = AttemptContainer(_plan(), _env(user="image"), mounts, network="off")
    wrapped = box.wrap(["bash", "/tests/test.sh"], worktree, {"SECRET": "s3cret"}, user="tester", last=True)
    argv = wrapped.argv
    assert argv[:3] == ["/usr/bin/podman", "run", "--rm"] and "--init" in argv and "exec" not in argv
    assert argv[argv.index("--entrypoint") + 1 :] == ["bash", _env().image, "/tests/test.sh"]
    assert argv[argv.index("--user") + 1] == "tester" and argv.count("--user") == 1
    assert f"{view}:{suite}:ro" in argv and "--network" in argv and argv[argv.index("--network") + 1] == "none"
    assert "SECRET" in argv and not any("s3cret" in a for a in argv) and wrapped.env["SECRET"] == "s3cret"
    assert wrapped.release is not None and box.leftover
    wrapped.release(True)  # it exited by itself: `run --rm` removed it, nothing is left to remove
    assert not box.leftover and not box.running


FOREIGN = textwrap.dedent(
    """
    import json, os, subprocess, sys, threading, time
    from worktrial.isolation import proc
    from worktrial.isolation.tracking import TRACKER, enable_subreaper
    assert enable_subreaper()
    adopt_it, done = sys.argv[1] == "adopt", sys.argv[2]
    # An attempt's process runs meanwhile, until told: the orphan is born while it lives, a candidate for it.
    wait = f'while [ ! -e "{done}" ]; do sleep 0.02; done'
    root = threading.Thread(target=proc.run, args=(["sh", "-c", wait],), kwargs={"cwd": "/", "timeout": 60})
    root.start()
    while not TRACKER.alive_roots():
        time.sleep(0.01)
    with TRACKER.foreign_births() as adopt:
        # A runtime's monitor: double-forks out of the command that started it and leaves its session.
        out = subprocess.run(["sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        orphan = int(out.stdout)
        time.sleep(0.3)  # the sampler runs meanwhile
        if adopt_it:
            adopt(orphan)
    open(done, "w").close()  # the attempt's process ends now, once the window has closed
    root.join()
    time.sleep(0.3)
    alive = False
    try:
        with open(f"/proc/{orphan}/stat") as fh:
            alive = fh.read().split()[2] != "Z"
    except OSError:
        pass
    print(json.dumps({"alive": alive}))
    os.kill(orphan, 9) if alive else None
    """
)


@pytest.mark.parametrize(("how", "survives"), [("adopt", True), ("leave", False)])
def test_a_runtime_s_monitor_is_never_taken_for_an_attempt_s_orphan(how: str, survives: bool, tmp_path: Path) -> None:
    """Adopted in the window it was born in, it outlives the attempt's process it was born beside; an orphan no one
    adopted is taken for that process's, and ends with it."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    argv = [sys.executable, "-c", FOREIGN, how, str(tmp_path / "done")]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"alive": survives}


def test_a_container_that_cannot_start_fails_its_command_with_the_runtime_s_reason(tmp_path: Path) -> None:
    from worktrial.isolation import proc
    from worktrial.isolation.attempt_container import ContainerView

    broken = ContainerRuntime("podman", "/bin/false", "0")
    worktree, scratch = tmp_path / "wt", tmp_path / "scratch"
    worktree.mkdir()
    scratch.mkdir()
    box = AttemptContainer(ContainerPlan(broken), _env(user="image"), Mounts(worktree, (), (), scratch), network="off")
    scope = proc.ProcessScope().confined(ContainerView(box))
    ran = proc.run(["true"], cwd=worktree, timeout=30, scope=scope)
    assert ran.returncode == 125 and b"could not start a container" in ran.stderr_tail
    assert box.running  # something of it may exist: the attempt removes it at the end
