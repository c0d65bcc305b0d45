"""``worktrial init --container``: the starter suite with its commands in a container of an image built from a
Dockerfile next to it (docs/environments.md).

The tasks are the shell starter's (POSIX ``sh`` runs in any image); the Dockerfile starts ``FROM`` the base image
the user names, and is where a project's toolchain goes. The regression task's bug is planted in the image (the
Dockerfile copies it to ``PLANTED``), never by a per-attempt setup command, whose output every attempt's patch would
hold (the do-nothing agent's too) and which ``check`` flags: the agent makes the fixed copy in the worktree, so the
patch holds its work and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.scaffold.files import PLANTS, SOLUTIONS, TESTS
from worktrial.scaffold.project import Project
from worktrial.scaffold.starter import DEFAULT_DIR, StarterResult, starter_suite

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
WORKDIR = "/app"
PLANTED = "/opt/worktrial-starter/worktrial_version.sh"
"""Where the image holds the regression task's buggy script (outside the worktree the attempt mounts at WORKDIR)."""


def container_suite(repo: Path, suite_id: str) -> dict[str, Any]:
    """The shell starter suite, its environment the image of ``Dockerfile`` with the worktree at ``/app``."""
    suite = starter_suite(repo, Project("shell"), suite_id)
    suite["environment"] = {"dockerfile": "Dockerfile", "workdir": WORKDIR, "network": "off"}
    suite["files"] = [*suite["files"], "Dockerfile"]
    for task in suite["tasks"]:
        if task.pop("environment", None) is not None:  # the task that planted its bug in the base: the image has it
            task["prompt"] = (
                f"The image this task runs in holds {PLANTED}, which compares version strings such as 1.10.0 and "
                "1.9.2 as text, so 1.10.0 sorts before 1.9.2. Add worktrial_version.sh at the repository root: "
                "that script fixed to compare them numerically, part by part, with its interface unchanged."
            )
    return suite


def dockerfile(base_image: str) -> str:
    return (
        "# The image every command of the suite runs in (setup, agent, verify); worktrial mounts the attempt's\n"
        f"# worktree at {WORKDIR}. Install the project's toolchain here (RUN apt-get install ..., pip, npm).\n"
        f"FROM {base_image}\n"
        "# fix-version-compare's bug, planted in the image: never by per-attempt setup_commands, whose output\n"
        "# every attempt's patch would hold.\n"
        f"COPY planted/worktrial_version.sh {PLANTED}\n"
        f"WORKDIR {WORKDIR}\n"
    )


def write_container_starter(repo: Path, directory: Path | None, *, force: bool, base_image: str) -> StarterResult:
    """Write the container starter suite into ``directory`` (default ``<repo>/evals``)."""
    if not base_image.strip() or any(c.isspace() for c in base_image):
        raise BadInputError(f"--base-image {base_image!r}: give one image name, such as {DEFAULT_BASE_IMAGE}")
    target = directory if directory is not None else repo / DEFAULT_DIR
    suite_path = target / "suite.json"
    if suite_path.exists() and not force:
        raise BadInputError(f"{suite_path} already exists; pass --force to overwrite it or --dir for another place")
    suite = container_suite(repo, f"{repo.name}-container-starter")
    contents = {
        "suite.json": json.dumps(suite, indent=2) + "\n",
        "Dockerfile": dockerfile(base_image),
        "hidden/test_slugify.sh": TESTS["shell"]["slugify"],
        "hidden/test_version.sh": TESTS["shell"]["version"],
        "solutions/worktrial_starter.sh": SOLUTIONS["shell"]["slugify"],
        "solutions/worktrial_version.sh": SOLUTIONS["shell"]["version"],
        "planted/worktrial_version.sh": PLANTS["shell"],
    }
    written: list[Path] = []
    for rel, text in contents.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return StarterResult(project=Project("shell"), directory=target, files=written)
