"""Images as Harbor gets them, with real podman and a real registry on loopback (Debian's ``docker-registry``, the
OCI distribution server): a task's ``docker_image`` is pulled when absent (the runtime's progress shown), pinned
in the envelope by the id it got; a registry that cannot be reached is one line naming the image and the fix;
``--force-build`` builds the task's Dockerfile instead of pulling."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git
from tests.test_containers import BASE_IMAGE, EXAMPLES

pytestmark = [pytest.mark.container, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def podman() -> str:
    if shutil.which("podman") is None:
        pytest.skip("needs podman (make containers)")
    built = subprocess.run(
        [str(EXAMPLES / "build-base-image.sh"), "podman", BASE_IMAGE], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        pytest.skip(f"the base image could not be built: {built.stderr.strip()[-200:]}")
    return "podman"


@pytest.fixture
def registry(tmp_path: Path, podman: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A registry on 127.0.0.1, which podman may reach without TLS (a registries.conf of this test's own)."""
    program = shutil.which("docker-registry")
    if program is None:
        pytest.skip("needs Debian's docker-registry (apt-get install docker-registry)")
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'registry-data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nlocation = "127.0.0.1:{port}"\ninsecure = true\n')
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    server = subprocess.Popen([program, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # bounded: until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _task(root: Path, name: str, image: str, dockerfile: bool = False) -> Path:
    """A Harbor task on ``image``: the oracle writes the answer, the verifier rewards it."""
    task = root / name
    shutil.copytree(EXAMPLES / "hello-file", task)
    if not dockerfile:
        shutil.rmtree(task / "environment")
    toml = (task / "task.toml").read_text().replace("[environment]\n", f'[environment]\ndocker_image = "{image}"\n')
    (task / "task.toml").write_text(toml)
    return task


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "empty")
    return path


def _eval(cli, workspace: Path, suite: Path, *more: str):
    args = ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--runtime", "podman", "--format", "json"]
    return cli([*args, "--workspace", str(workspace), *more])


def _image_id(image: str) -> str:
    out = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True)
    return f"sha256:{out.stdout.strip().removeprefix('sha256:')}" if out.returncode == 0 else ""


def test_an_absent_image_is_pulled_with_progress_and_pinned(cli, registry: str, workspace, tmp_path: Path) -> None:
    image = f"{registry}/worktrial-test/busybox:pull"
    subprocess.run(["podman", "push", "--quiet", BASE_IMAGE, image], check=True, capture_output=True)
    subprocess.run(["podman", "rmi", "--force", image], capture_output=True, check=False)
    assert _image_id(image) == ""
    task = _task(tmp_path / "ds", "pulled", image)
    result = _eval(cli, workspace, task)
    assert result.exit_code == 0, result.output
    assert f"pulling {image} (podman pull)" in result.stderr
    assert f"podman pull {image}: " in result.stderr  # the runtime's own progress lines
    envelope = json.loads(result.stdout)
    (attempt,) = envelope["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass", attempt
    assert envelope["environment_images"] == {"pulled": _image_id(image)} != {"pulled": ""}


def test_an_unreachable_registry_is_one_line_naming_image_and_fix(cli, podman, workspace, tmp_path: Path) -> None:
    image = f"127.0.0.1:{_free_port()}/nowhere/image:1"
    result = _eval(cli, workspace, _task(tmp_path / "ds", "unreachable", image))
    assert result.exit_code == 2
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("worktrial: error:")]
    assert f"image {image} is not present locally and podman could not pull it" in line
    assert "podman save / podman load" in line and "--force-build" in line


def test_force_build_builds_the_dockerfile_instead_of_pulling(cli, podman, workspace, tmp_path: Path) -> None:
    image = f"127.0.0.1:{_free_port()}/nowhere/image:1"
    task = _task(tmp_path / "ds", "built", image, dockerfile=True)
    refused = _eval(cli, workspace, task)
    assert refused.exit_code == 2  # without --force-build the named image is what the task runs
    built = _eval(cli, workspace, task, "--force-build")
    assert built.exit_code == 0, built.output
    envelope = json.loads(built.stdout)
    assert envelope["report"]["tasks"][0]["attempts"][0]["outcome"] == "pass"
    assert envelope["environment_images"]["built"].startswith("sha256:")
