"""``worktrial init``: a starter suite for the repository at hand, which ``worktrial check`` passes out of the box.

It is written to be copied and edited: one capability task (add something new) and one regression task (fix a bug
planted in the base by the task's environment), each with a hidden test under the suite directory, a reference
solution shipped with the suite, and an environment detected from the repository — a venv inside the base with
pip for Python (``pyproject.toml``, ``setup.py``, ``requirements.txt``), ``npm ci`` for Node (``package.json``),
plain shell otherwise. The generated README explains every field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from worktrial.engine.starter_files import PLANTS, README, SOLUTIONS, TESTS
from worktrial.errors import BadInputError

Kind = Literal["python", "node", "shell"]
DEFAULT_DIR = "evals"
SETUP_TIMEOUT_SECS = 900


@dataclass(frozen=True)
class StarterResult:
    kind: Kind
    directory: Path
    files: list[Path]


def detect_kind(repo: Path) -> Kind:
    """What the repository is, by the files that name its build: Node before Python when both exist."""
    if (repo / "package.json").is_file():
        return "node"
    if any((repo / name).is_file() for name in ("pyproject.toml", "setup.py", "requirements.txt")):
        return "python"
    return "shell"


def environment_setup(repo: Path, kind: Kind) -> list[Any]:
    """Commands run once per slot on the pinned commit; their result is committed as every attempt's base."""
    if kind == "python":
        steps: list[Any] = ["python3 -m venv .venv"]
        if (repo / "requirements.txt").is_file():
            steps.append(".venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt")
        if (repo / "pyproject.toml").is_file() or (repo / "setup.py").is_file():
            # Editable, into the venv inside the base: the tests import the worktree's code, not another checkout.
            steps.append(".venv/bin/python -m pip install --quiet --disable-pip-version-check -e .")
        return steps
    if kind == "node":
        if (repo / "package-lock.json").is_file() or (repo / "npm-shrinkwrap.json").is_file():
            return ["npm ci --no-audit --no-fund"]
        return ["npm install --no-audit --no-fund"]
    return [{"sh": "true"}]


def _runner(kind: Kind) -> str:
    return {"python": ".venv/bin/python", "node": "node", "shell": "sh"}[kind]


def _ext(kind: Kind) -> str:
    return {"python": "py", "node": "js", "shell": "sh"}[kind]


def starter_suite(repo: Path, kind: Kind, suite_id: str) -> dict[str, Any]:
    """The suite JSON: two tasks, the declared files, the detected environment."""
    ext, run = _ext(kind), _runner(kind)
    setup = environment_setup(repo, kind)
    # ``cat >``, not ``cp``: the run's copy of the suite is read-only and cp would keep that mode, so the planted
    # file could be edited only by root (an agent, or the solution's cp, running as anyone else would be refused).
    plant = {"sh": f'cat "$WORKTRIAL_SUITE_DIR/planted/worktrial_version.{ext}" > worktrial_version.{ext}'}
    return {
        "id": suite_id,
        "name": f"Starter suite for {repo.name}",
        "attempts": 3,
        "files": ["hidden/**", "solutions/**", "planted/**"],
        "environment": {"setup": setup, "timeout_secs": SETUP_TIMEOUT_SECS},
        "tasks": [
            {
                "id": "add-slugify",
                "category": "capability",
                "prompt": (
                    f"Add a file worktrial_starter.{ext} at the repository root that "
                    + {
                        "python": "defines slugify(text: str) -> str",
                        "node": "exports a function slugify(text) (module.exports = { slugify })",
                        "shell": "is a POSIX shell script taking one argument and printing its slug",
                    }[kind]
                    + ": lower-case the text, turn every run of characters other than a-z and 0-9 into a single "
                    "hyphen, and strip hyphens from both ends. For example 'Hello, World!' becomes 'hello-world'."
                ),
                "timeout_secs": 600,
                "verify_commands": [{"sh": f'{run} "$WORKTRIAL_SUITE_DIR/hidden/test_slugify.{ext}"'}],
                "verify_timeout_secs": 120,
                "solution": [{"sh": f'cp "$WORKTRIAL_SUITE_DIR/solutions/worktrial_starter.{ext}" .'}],
            },
            {
                "id": "fix-version-compare",
                "category": "regression",
                "prompt": (
                    f"worktrial_version.{ext} compares version strings such as 1.10.0 and 1.9.2 as text, so "
                    "1.10.0 sorts before 1.9.2. Fix it to compare them numerically, part by part; keep its "
                    "interface unchanged."
                ),
                "timeout_secs": 600,
                "environment": {"setup": [*setup, plant], "timeout_secs": SETUP_TIMEOUT_SECS},
                "verify_commands": [{"sh": f'{run} "$WORKTRIAL_SUITE_DIR/hidden/test_version.{ext}"'}],
                "verify_timeout_secs": 120,
                "solution": [{"sh": f'cp "$WORKTRIAL_SUITE_DIR/solutions/worktrial_version.{ext}" .'}],
            },
        ],
    }


def write_starter(repo: Path, directory: Path | None = None, *, force: bool = False) -> StarterResult:
    """Write the starter suite into ``directory`` (default ``<repo>/evals``); refuse to overwrite unless forced."""
    kind = detect_kind(repo)
    target = directory if directory is not None else repo / DEFAULT_DIR
    suite_path = target / "suite.json"
    if suite_path.exists() and not force:
        raise BadInputError(f"{suite_path} already exists; pass --force to overwrite it or --dir for another place")
    ext = _ext(kind)
    contents: dict[str, str] = {
        "suite.json": json.dumps(starter_suite(repo, kind, f"{repo.name}-starter"), indent=2) + "\n",
        "README.md": README.format(kind=kind, setup=json.dumps(environment_setup(repo, kind)), ext=ext),
        f"hidden/test_slugify.{ext}": TESTS[kind]["slugify"],
        f"hidden/test_version.{ext}": TESTS[kind]["version"],
        f"solutions/worktrial_starter.{ext}": SOLUTIONS[kind]["slugify"],
        f"solutions/worktrial_version.{ext}": SOLUTIONS[kind]["version"],
        f"planted/worktrial_version.{ext}": PLANTS[kind],
    }
    written: list[Path] = []
    for rel, text in contents.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return StarterResult(kind=kind, directory=target, files=written)
