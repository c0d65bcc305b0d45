"""Harbor (Terminal-Bench 2.0) task directories, read unchanged as a suite.

A task directory holds ``instruction.md`` (the prompt), ``task.toml`` (timeouts, resources, network),
``environment/`` (a Dockerfile and its build context), ``tests/test.sh`` (the verifier, which writes
``/logs/verifier/reward.txt`` or ``reward.json``) and optionally ``solution/solve.sh`` (the oracle). ``--suite`` takes
one task directory or a directory of them (a dataset). The mapping (docs/environments.md):

- the directory name is the task id; ``instruction.md`` the prompt; category ``capability``;
- ``[agent] timeout_sec`` and ``[verifier] timeout_sec`` the agent's and the verifier's limits;
- ``environment/Dockerfile`` (context ``environment/``) or ``[environment] docker_image`` the image; ``cpus`` and
  ``memory_mb`` (or ``memory = "4G"``) its limits; ``allow_internet = false`` its network off;
- ``tests/`` is put at ``/tests`` only for the verifier, which runs ``bash /tests/test.sh`` and passes when the
  reward is 1;
- ``solution/solve.sh`` is the oracle's solution, run from the suite's read-only copy (``$WORKTRIAL_SUITE_DIR``).

A compose environment (``environment/docker-compose.yaml``) is refused: worktrial runs one container per command.
The bundle digest covers every file of every task directory; the suite digest is that of the suite these files make.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from worktrial.errors import SuiteError
from worktrial.model.bundle import bundle_digest, collect_bundle
from worktrial.model.suite import SUITE_DIR_ENV, LoadedSuite, parse_suite

MAX_TASK_FILE_BYTES = 1024 * 1024
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file() and (path / "instruction.md").is_file()


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise SuiteError(f"{path}: larger than {MAX_TASK_FILE_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SuiteError(f"{path}: not UTF-8 text") from None


def _table(config: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: [{name}] must be a table")
    return value


def _seconds(table: dict[str, Any], key: str, where: str) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise SuiteError(f"{where}.{key}: must be a positive number of seconds (got {value!r})")
    return max(1, round(value))


def _memory_mb(env: dict[str, Any], where: str) -> int | None:
    if "memory_mb" in env:
        value = env["memory_mb"]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SuiteError(f"{where}.memory_mb: must be a positive integer (got {value!r})")
        return value
    if "memory" not in env:
        return None
    match = _SIZE.match(str(env["memory"]))
    if match is None:
        raise SuiteError(f'{where}.memory: must be a size such as "2G" or "512M" (got {env["memory"]!r})')
    scale = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[match.group(2).upper()]
    return max(1, round(float(match.group(1)) * scale))


def harbor_task(task_dir: Path, suite_root: Path) -> dict[str, Any]:
    """One task directory as a suite task (raw JSON, validated with the suite); SuiteError names what is wrong."""
    toml_path = task_dir / "task.toml"
    try:
        config = tomllib.loads(_read_text(toml_path))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{toml_path}: invalid TOML: {exc}") from None
    where = str(toml_path)
    agent, verifier, environment = (_table(config, name, toml_path) for name in ("agent", "verifier", "environment"))
    task_id = task_dir.name
    if not _ID.match(task_id):
        raise SuiteError(f"{task_dir}: a task directory's name is its id: letters, digits, '.', '_' and '-' only")
    env_dir = task_dir / "environment"
    if compose := next((env_dir / f for f in COMPOSE_FILES if (env_dir / f).exists()), None):
        raise SuiteError(
            f"{compose}: multi-container (compose) tasks are not supported; worktrial runs a task in one container "
            "of one image (environment/Dockerfile or [environment] docker_image)"
        )
    rel = task_dir.resolve().relative_to(suite_root).as_posix()
    container: dict[str, Any] = {"workdir": "/app", "user": "image", "seed_workdir": True}
    image = environment.get("docker_image")
    if image is not None:
        if not isinstance(image, str) or not image.strip():
            raise SuiteError(f"{where}: [environment] docker_image must be an image name")
        container["image"] = image
    elif (env_dir / "Dockerfile").is_file():
        container["dockerfile"] = f"{rel}/environment/Dockerfile"
        container["context"] = f"{rel}/environment"
    else:
        raise SuiteError(
            f"{env_dir / 'Dockerfile'}: missing; a Harbor task needs environment/Dockerfile or [environment] "
            "docker_image in task.toml"
        )
    if not (task_dir / "tests" / "test.sh").is_file():
        raise SuiteError(f"{task_dir / 'tests' / 'test.sh'}: missing; it is the task's verifier")
    container["verifier_tests"] = f"{rel}/tests"
    if (build := _seconds(environment, "build_timeout_sec", f"{where}: [environment]")) is not None:
        container["build_timeout_secs"] = build
    cpus = environment.get("cpus")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0:
            raise SuiteError(f"{where}: [environment].cpus: must be a positive number (got {cpus!r})")
        container["cpus"] = float(cpus)
    if (memory := _memory_mb(environment, f"{where}: [environment]")) is not None:
        container["memory_mb"] = memory
    internet = environment.get("allow_internet", True)
    if not isinstance(internet, bool):
        raise SuiteError(f"{where}: [environment].allow_internet: must be true or false")
    if not internet:
        container["network"] = "off"
    task: dict[str, Any] = {
        "id": task_id,
        "category": "capability",
        "prompt": _read_text(task_dir / "instruction.md"),
        "verify_commands": ["bash /tests/test.sh"],
        "environment": container,
    }
    metadata = config.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("category"), str):
        task["cluster"] = metadata["category"][:200]
    if (timeout := _seconds(agent, "timeout_sec", f"{where}: [agent]")) is not None:
        task["timeout_secs"] = timeout
    if (verify_timeout := _seconds(verifier, "timeout_sec", f"{where}: [verifier]")) is not None:
        task["verify_timeout_secs"] = verify_timeout
    if (task_dir / "solution" / "solve.sh").is_file():
        # The oracle sees the suite's files (read-only, at $WORKTRIAL_SUITE_DIR) in its container: the script runs
        # from there, next to the rest of solution/ (which it reaches through "$(dirname "$0")").
        script = shlex.quote(f"{rel}/solution/solve.sh")
        task["solution"] = [{"sh": f'bash "${SUITE_DIR_ENV}"/{script}'}]
    return task


def load_harbor(path: Path) -> LoadedSuite:
    """A Harbor task directory, or a directory of them, as a loaded suite (SuiteError: one line, exit 2)."""
    root = path.resolve()
    if is_task_dir(root):
        task_dirs = [root]
    else:
        task_dirs = sorted(d for d in root.iterdir() if d.is_dir() and is_task_dir(d))
        if not task_dirs:
            raise SuiteError(
                f"{path}: is a directory with no Harbor task in it (a task directory has task.toml and "
                "instruction.md); pass a suite JSON file, a task directory or a directory of them"
            )
    suite_root = root.parent
    tasks = [harbor_task(d, suite_root) for d in task_dirs]
    raw = {"id": root.name, "name": root.name, "tasks": tasks}
    suite = parse_suite(raw, source=str(path))
    sha = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()
    patterns = [f"{d.relative_to(suite_root).as_posix()}/**" for d in task_dirs]
    files = collect_bundle(root, patterns, str(path))
    return LoadedSuite(suite=suite, path=path, sha256=sha, files=files, bundle_sha256=bundle_digest(sha, files))
