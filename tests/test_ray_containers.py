"""Container tasks on a real 2-node Ray cluster (tests/ray_cluster.py): each worker runs its attempts' containers
with its node's runtime and checks each image against the driver's pin.

Node ``b`` has a container store of its own (``CONTAINERS_STORAGE_CONF``), as another machine would: it holds the
base image and, for the first test, the images the driver pinned (loaded as an operator would, ``podman save`` /
``podman load``); an image it has to build itself gets another id, which the run reports as a mismatch. Both runs
place their attempts on node b (``--ray-resource own_store=1``): the node that is not the driver's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.ray_cluster import ContainedCluster, Node, unavailable_reason
from tests.test_containers import BASE_IMAGE, EXAMPLES, _runtime
from tests.test_parallel import comparable

pytestmark = [pytest.mark.ray, pytest.mark.container, pytest.mark.slow]

_reason = unavailable_reason() or (None if _runtime() == "podman" else "needs podman (make containers)")
if _reason is not None:
    pytestmark.append(pytest.mark.skip(reason=f"contained Ray cluster with containers: {_reason}"))

# Solves hello-file always, count-words on odd attempts, fix-sum never; says where it ran (its stdout is kept).
AGENT = (
    'echo "node=$WORKTRIAL_TEST_NODE"; case "$WORKTRIAL_TASK_ID" in '
    "hello-file) echo 'Hello, world!' > /app/hello.txt ;; "
    "count-words) [ $((WORKTRIAL_ATTEMPT % 2)) = 1 ] && wc -w < /app/words.txt | tr -d ' ' > /app/count.txt ;; "
    "esac; true"
)


def _podman(*args: str, store: Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = None if store is None else {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CONTAINERS_STORAGE_CONF": str(store)}
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, check=True, **kwargs)


@pytest.fixture(scope="module")
def own_store() -> Iterator[Path]:
    """Node b's container store (vfs: plain directories, nothing mounted to undo), with the base image loaded."""
    subprocess.run([str(EXAMPLES / "build-base-image.sh"), "podman", BASE_IMAGE], capture_output=True, check=True)
    root = Path(tempfile.mkdtemp(prefix="wtstore-", dir="/tmp"))
    conf = root / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n')
    try:
        _podman("save", "-o", str(root / "base.tar"), BASE_IMAGE)
        _podman("load", "-i", str(root / "base.tar"), store=conf)
        yield conf
    finally:
        subprocess.run(["podman", "rm", "--all", "--force"], env={"CONTAINERS_STORAGE_CONF": str(conf)}, check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(own_store: Path) -> Iterator[ContainedCluster]:
    nodes = [
        Node("head", cpus=2),
        Node("b", cpus=2, resources={"own_store": 2}, env={"CONTAINERS_STORAGE_CONF": str(own_store)}),
    ]
    made = ContainedCluster(nodes)
    try:
        made.start()
        yield made
    finally:
        made.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Harbor tasks keep their files in the image: the workspace is an empty repository."""
    path = tmp_path / "ws"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "empty")
    return path


def _dataset(tmp_path: Path, tasks: list[str]) -> Path:
    out = tmp_path / "dataset"
    out.mkdir()
    for name in tasks:
        shutil.copytree(EXAMPLES / name, out / name)
    return out


def _eval(suite: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--trust", "--format", "json", "-q"]
    return [*argv, "--runtime", "podman", "--pass-env", "WORKTRIAL_TEST_NODE", *extra]


def _nodes_of(workspace: Path, run_id: str) -> set[str]:
    """The nodes the agents said they ran on, from their stdout kept in the run's artifacts."""
    found = set()
    for path in (workspace / ".worktrial" / "runs" / run_id / "attempts").glob("*/*/artifacts.json"):
        out = json.loads(path.read_text())["agent_stdout"]["text"]
        found |= {line.split("=", 1)[1] for line in out.splitlines() if line.startswith("node=")}
    return found


def test_a_container_suite_gives_the_records_of_a_local_run(
    cluster: ContainedCluster, own_store: Path, cli, workspace: Path, tmp_path: Path
) -> None:
    suite = _dataset(tmp_path, ["count-words", "fix-sum", "hello-file"])
    local = cli([*_eval(suite, "--agent-cmd", AGENT, "--attempts", "2", "--jobs", "2")[3:]], cwd=workspace)
    assert local.exit_code == 0, local.output
    here = json.loads(local.stdout)
    pinned = set(here["environment_images"].values())
    saved = tmp_path / "pinned.tar"
    _podman(
        "save", "-m", "-o", str(saved), *sorted(pinned)
    )  # what an operator loads on a node that cannot build them alike
    _podman("load", "-i", str(saved), store=own_store)

    # Every attempt on node b: another node than the driver's, with a container store of its own.
    done = cluster.run(
        [*_eval(suite, "--agent-cmd", AGENT, "--attempts", "2", "--jobs", "2"), "--executor", "ray",
         "--ray-address", cluster.address, "--ray-resource", "own_store=1"],
        workspace,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    remote = json.loads(done.stdout)
    assert comparable(remote) == comparable(here)
    outcomes = {t["task_id"]: [a["outcome"] for a in t["attempts"]] for t in remote["report"]["tasks"]}
    assert outcomes == {"count-words": ["pass", "fail"], "fix-sum": ["fail", "fail"], "hello-file": ["pass", "pass"]}
    assert remote["environment_images"] == here["environment_images"]
    assert _nodes_of(workspace, remote["run"]["id"]) == {"b"}, done.stderr[-3000:]


def test_an_image_that_differs_on_a_node_is_an_infrastructure_error_naming_both_digests(
    cluster: ContainedCluster, workspace: Path, tmp_path: Path
) -> None:
    suite = _dataset(tmp_path, ["hello-file"])
    dockerfile = suite / "hello-file" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"ENV WORKTRIAL_TEST_BUILD={tmp_path.name}\n")  # new to node b
    done = cluster.run(
        [*_eval(suite, "--agent", "oracle"), "--executor", "ray", "--ray-address", cluster.address,
         "--ray-resource", "own_store=1"],
        workspace,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]  # a mismatch stops the run
    [run_dir] = (workspace / ".worktrial" / "runs").iterdir()
    pinned = json.loads((run_dir / "run.json").read_text())["environment_images"]["hello-file"]
    line = next(line for line in done.stderr.splitlines() if "worktrial: error:" in line)
    assert f"the driver pinned {pinned}" in line and "the image of task hello-file on Ray worker" in line, line
    digests = set(re.findall(r"sha256:[0-9a-f]{64}", line))
    assert pinned in digests and len(digests) == 2  # and the one node b built
    [stored] = [json.loads(line)["record"] for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert (stored["outcome"], stored["error_category"]) == ("error", "source_mismatch")
    assert set(re.findall(r"sha256:[0-9a-f]{64}", stored["reason"])) == digests
