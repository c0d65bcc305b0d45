"""The Ray executor on a real 2-node Ray cluster, contained in its own network and PID namespace (tests/ray_cluster.py).

One cluster per module (it takes ~15-30 s to start on a loaded 2-core machine). The node-loss test kills the
worker node, so it runs last.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import task
from tests.fakes import share_with_sandbox
from tests.ray_cluster import ContainedCluster, Node, unavailable_reason
from tests.test_parallel import comparable, eval_json

pytestmark = [pytest.mark.ray, pytest.mark.slow]

_reason = unavailable_reason()
if _reason is not None:
    pytestmark.append(pytest.mark.skip(reason=f"contained Ray cluster: {_reason}"))

# Deterministic per task; leaves start/end markers naming the Ray node it ran on (its processes' environment).
AGENT = (
    'mark="$MARKS/$WORKTRIAL_TASK_ID.$WORKTRIAL_ATTEMPT.${WORKTRIAL_TEST_NODE:-local}.$$"; '
    'touch "$mark.start"; sleep "${NAP:-0}"; '
    'case "$WORKTRIAL_TASK_ID" in bad*) ;; odd*) [ $((WORKTRIAL_ATTEMPT % 2)) = 1 ] && echo ok > done.txt ;; '
    "*) echo ok > done.txt ;; esac; "
    'touch "$mark.end"'
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ContainedCluster]:
    made = ContainedCluster([Node("head", cpus=2), Node("b", cpus=2, resources={"agent_fake": 2})])
    try:
        made.start()
        yield made
    finally:
        made.stop()


def _suite(tmp_path: Path, write_suite, ids: list[str], attempts: int) -> Path:
    (tmp_path / "hidden").mkdir(exist_ok=True)
    (tmp_path / "hidden" / "expected.txt").write_text("ok\n")
    verify = [{"sh": 'cmp done.txt "$WORKTRIAL_SUITE_DIR/hidden/expected.txt"'}]
    suite: Path = write_suite([task(i, verify_commands=verify) for i in ids], attempts=attempts, files=["hidden/*"])
    return suite


NODE = ("--pass-env", "WORKTRIAL_TEST_NODE")
"""A node's name is in its own environment; an agent gets it only when named (agents get an allow-list)."""


def _agent_cmd(marks: Path, nap: float) -> str:
    return f"sh -c 'MARKS={marks} NAP={nap}; {AGENT}'"


def _ray_eval(cluster: ContainedCluster, repo: Path, suite: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--trust", "--format", "json", "-q"]
    argv += ["--executor", "ray", "--ray-address", cluster.address, *extra]
    return argv


def _nodes_of(marks: Path) -> set[str]:
    return {p.name.split(".")[2] for p in marks.glob("*.end")}


def test_same_report_as_local_with_attempts_on_both_nodes(
    cluster: ContainedCluster, cli, repo: Path, tmp_path: Path, write_suite
) -> None:
    suite = _suite(tmp_path, write_suite, ["good-a", "bad-b", "odd-c", "good-d", "odd-e"], attempts=3)
    local_marks, ray_marks = tmp_path / "local-marks", tmp_path / "ray-marks"
    local_marks.mkdir()
    ray_marks.mkdir()
    share_with_sandbox(local_marks, ray_marks)  # the agents leave their marks where the test can read them
    local = eval_json(cli, repo, suite, "--agent-cmd", _agent_cmd(local_marks, 0), *NODE, "--jobs", "4")
    done = cluster.run(
        _ray_eval(cluster, repo, suite, "--agent-cmd", _agent_cmd(ray_marks, 0.3), *NODE, "--jobs", "4"), repo
    )
    assert done.returncode == 0, done.stderr[-3000:]
    remote = json.loads(done.stdout)
    assert comparable(remote) == comparable(local)
    assert [t["passed_runs"] for t in remote["report"]["tasks"]] == [3, 0, 2, 3, 2]
    assert _nodes_of(ray_marks) == {"head", "b"}  # really spread over both nodes
    assert _nodes_of(local_marks) == {"local"}
    assert remote["run"]["workspace"]["base_commit"] == local["run"]["workspace"]["base_commit"]
    assert remote["suite_bundle_sha256"] == local["suite_bundle_sha256"]
    run_dir = repo / ".worktrial" / "runs" / remote["run"]["id"]
    assert len((run_dir / "attempts.jsonl").read_text().splitlines()) == 15  # the driver wrote the store


def test_custom_resources_place_attempts_on_the_nodes_that_have_them(
    cluster: ContainedCluster, repo: Path, tmp_path: Path, write_suite
) -> None:
    suite = _suite(tmp_path, write_suite, ["good-a", "good-b"], attempts=2)
    marks = tmp_path / "marks"
    marks.mkdir()
    share_with_sandbox(marks)  # the agents leave their marks where the test can read them
    argv = _ray_eval(cluster, repo, suite, "--agent-cmd", _agent_cmd(marks, 0), *NODE, "--jobs", "2")
    done = cluster.run([*argv, "--ray-resource", "agent_fake=1"], repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _nodes_of(marks) == {"b"}

    missing = cluster.run([*argv, "--ray-resource", "agent_nowhere=1"], repo)
    assert missing.returncode == 2
    assert "no Ray node offers resource 'agent_nowhere'" in missing.stderr


def test_ctrl_c_stops_the_workers_and_resume_reconnects(
    cluster: ContainedCluster, repo: Path, tmp_path: Path, write_suite
) -> None:
    ids = [f"good-{i}" for i in range(4)]
    suite = _suite(tmp_path, write_suite, ids, attempts=2)
    marks = tmp_path / "marks"
    marks.mkdir()
    share_with_sandbox(marks)  # the agents leave their marks where the test can read them
    driver = cluster.popen(
        _ray_eval(cluster, repo, suite, "--agent-cmd", _agent_cmd(marks, 2), *NODE, "--jobs", "2"), repo
    )
    try:
        deadline = time.monotonic() + 300
        # One attempt persisted by the driver, others running: then Ctrl-C the driver.
        while not any(p.read_text().strip() for p in repo.glob(".worktrial/runs/*/attempts.jsonl")):
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no attempt finished"
            time.sleep(0.05)
        children = Path(f"/proc/{driver.pid}/task/{driver.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGINT)  # nsenter's child is the worktrial driver
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130, err[-3000:]
    stopped = json.loads(out)
    assert not stopped["run"]["complete"]
    stored = sum(len(t["attempts"]) for t in stopped["report"]["tasks"])
    assert 1 <= stored < 8

    argv = [sys.executable, "-m", "worktrial", "resume", stopped["run"]["id"], "--format", "json", "-q", "--trust"]
    resumed = cluster.run([*argv, "--executor", "ray", "--ray-address", cluster.address], repo)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    envelope = json.loads(resumed.stdout)
    keys = sorted((t["task_id"], a["attempt"]) for t in envelope["report"]["tasks"] for a in t["attempts"])
    assert keys == sorted((i, n) for i in ids for n in (1, 2))
    assert envelope["run"]["complete"]


def test_losing_a_node_mid_run_retries_its_attempts_on_the_survivors(
    cluster: ContainedCluster, repo: Path, tmp_path: Path, write_suite
) -> None:
    ids = [f"good-{i}" for i in range(6)]
    suite = _suite(tmp_path, write_suite, ids, attempts=2)
    marks = tmp_path / "marks"
    marks.mkdir()
    share_with_sandbox(marks)  # the agents leave their marks where the test can read them
    argv = _ray_eval(
        cluster, repo, suite, "--agent-cmd", _agent_cmd(marks, 3), *NODE, "--jobs", "4", "--retry-errors", "2"
    )
    driver = cluster.popen(argv, repo)
    try:
        deadline = time.monotonic() + 300
        while True:  # wait until an attempt is running on node b, then kill that node's processes
            running = {p.name[: -len(".start")] for p in marks.glob("*.b.*.start")}
            running -= {p.name[: -len(".end")] for p in marks.glob("*.b.*.end")}
            if running:
                break
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no attempt ever started on node b"
            time.sleep(0.05)
        assert cluster.kill_node("b") > 0
        out, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err[-3000:]
    envelope = json.loads(out)
    records = [a | {"task_id": t["task_id"]} for t in envelope["report"]["tasks"] for a in t["attempts"]]
    keys = [(r["task_id"], r["attempt"]) for r in records]
    assert sorted(keys) == sorted((i, n) for i in ids for n in (1, 2))  # every attempt accounted for, once
    assert all(r["outcome"] == "pass" for r in records)
    retried = [r for r in records if r["retries"]]
    assert retried, "the attempts running on the lost node were not retried"
    assert all("Ray worker lost" in reason for r in retried for reason in r["retry_reasons"])
    assert os.path.exists(repo / ".worktrial" / "runs" / envelope["run"]["id"] / "attempts.jsonl")
