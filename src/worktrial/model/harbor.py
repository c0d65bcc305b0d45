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
- ``solution/solve.sh`` is the oracle's solution, put at ``/solution`` from the suite's read-only copy
  (``$WORKTRIAL_SUITE_DIR``).

A compose environment (``environment/docker-compose.yaml``) is refused: worktrial runs a task in one container.
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
from worktrial.model.harbor_config import check_config, parse_task_config
from worktrial.model.suite import SUITE_DIR_ENV, LoadedSuite, parse_suite

MAX_TASK_FILE_BYTES = 1024 * 1024
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


def harbor_task(task_dir: Path, suite_root: Path) -> dict[str, Any]:
    """One task directory as a suite task (raw JSON, validated with the suite); SuiteError names what is wrong."""
    toml_path = task_dir / "task.toml"
    task_id = task_dir.name
    if not _ID.match(task_id):
        raise SuiteError(f"{task_dir}: a task directory's name is its id: letters, digits, '.', '_' and '-' only")
    try:
        data = tomllib.loads(_read_text(toml_path))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{toml_path}: invalid TOML: {exc}") from None
    config = parse_task_config(data, task_id)
    env_dir = task_dir / "environment"
    if compose := next((env_dir / f for f in COMPOSE_FILES if (env_dir / f).exists()), None):
        raise SuiteError(
            f"task {task_id}: multi-container (compose) tasks are not supported ({compose.name}); worktrial runs a "
            "task in one container of one image (environment/Dockerfile or [environment] docker_image)"
        )
    runtime, fields = check_config(config, task_id)
    rel = task_dir.resolve().relative_to(suite_root).as_posix()
    container: dict[str, Any] = {"workdir": "/app", "seed_workdir": True, **fields}
    image = config.environment.docker_image
    if image is not None:
        if not image.strip():
            raise SuiteError(f"task {task_id}: task.toml field [environment] docker_image: must be an image name")
        container["image"] = image
    if (env_dir / "Dockerfile").is_file():
        # With docker_image too, the Dockerfile is what --force-build builds instead of pulling (as in Harbor).
        container["dockerfile"] = f"{rel}/environment/Dockerfile"
        container["context"] = f"{rel}/environment"
    elif image is None:
        raise SuiteError(
            f"{env_dir / 'Dockerfile'}: missing; a Harbor task needs environment/Dockerfile or [environment] "
            "docker_image in task.toml"
        )
    if not (task_dir / "tests" / "test.sh").is_file():
        raise SuiteError(f"{task_dir / 'tests' / 'test.sh'}: missing; it is the task's verifier")
    container["verifier_tests"] = f"{rel}/tests"
    container["harbor"] = runtime.model_dump(mode="json", exclude_defaults=True)
    task: dict[str, Any] = {
        "id": task_id,
        "category": "capability",
        "prompt": _read_text(task_dir / "instruction.md"),
        "verify_commands": ["bash /tests/test.sh"],
        "environment": container,
    }
    if isinstance(category := config.metadata.get("category"), str):
        task["cluster"] = category[:200]
    if config.agent.timeout_sec is not None:
        task["timeout_secs"] = max(1, round(config.agent.timeout_sec))
    if config.verifier.timeout_sec is not None:
        task["verify_timeout_secs"] = max(1, round(config.verifier.timeout_sec))
    if (task_dir / "solution" / "solve.sh").is_file():
        task["solution"] = [{"sh": _solution_line(rel)}]
    return task


def _solution_line(rel: str) -> str:
    """The oracle's command: ``solution/`` is put at ``/solution`` (as Harbor does) from the suite's read-only copy
    (``$WORKTRIAL_SUITE_DIR``), then ``solve.sh`` runs (with the task's ``[solution] env``, which the attempt's
    container gives the oracle, its ``${VAR}`` templates filled from this host's environment)."""
    source = shlex.quote(f"{rel}/solution")
    # /solution is where Harbor puts it; where the container's user cannot create it, the script still runs from
    # the suite's copy, where "$(dirname "$0")" finds the rest of solution/.
    return (
        f'if mkdir -p /solution 2>/dev/null && cp -R "${SUITE_DIR_ENV}"/{source}/. /solution/ 2>/dev/null; '
        f'then dir=/solution; else dir="${SUITE_DIR_ENV}"/{source}; fi; '
        'bash "$dir/solve.sh"'
    )


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
