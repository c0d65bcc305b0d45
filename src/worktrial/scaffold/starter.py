"""``worktrial init``: a starter suite for the repository at hand, which ``worktrial check`` passes out of the box.

It is written to be copied and edited: one capability task (add something new) and one regression task (fix a bug
planted in the base by the task's environment), each with a hidden test under the suite directory, a reference
solution shipped with the suite, and an environment detected from the repository — a venv inside the base with
pip for Python (``pyproject.toml``, ``setup.py``, ``requirements.txt``), ``npm ci`` for Node (``package.json``),
plain shell otherwise. Node code follows the package's module system (``"type": "module"`` makes ``.js`` files ES
modules); a TypeScript project gets JavaScript starters, which node runs without a build step. The environment
carries a ``cache_key`` named after the files setup depends on, so it is paid once. The generated README explains
every field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.scaffold.files import PLANTS, SOLUTIONS, TESTS
from worktrial.scaffold.project import Kind, Project, detect, environment, installs_editable
from worktrial.scaffold.readme import readme

DEFAULT_DIR = "evals"


@dataclass(frozen=True)
class StarterResult:
    project: Project
    directory: Path
    files: list[Path]

    @property
    def kind(self) -> Kind:
        return self.project.kind


def _runner(kind: Kind) -> str:
    """What runs a hidden test: never a program of the worktree (the venv's Python is the agent's to rewrite)."""
    return {"python": "python3 -I", "node": "node", "shell": "sh"}[kind]


def _ext(kind: Kind) -> str:
    return {"python": "py", "node": "js", "shell": "sh"}[kind]


def _test_ext(kind: Kind) -> str:
    """Node's hidden tests are ``.mjs``: ES modules wherever they lie, loading ES or CommonJS code alike."""
    return {"python": "py", "node": "mjs", "shell": "sh"}[kind]


_SLUGIFY_INTERFACE = {
    "python": "defines slugify(text: str) -> str",
    "esm": "exports a function slugify(text) (export function slugify)",
    "commonjs": "exports a function slugify(text) (module.exports = { slugify })",
    "shell": "is a POSIX shell script taking one argument and printing its slug",
}


def starter_suite(repo: Path, project: Project, suite_id: str) -> dict[str, Any]:
    """The suite JSON: two tasks, the declared files, the detected environment."""
    kind = project.kind
    ext, test_ext, run = _ext(kind), _test_ext(kind), _runner(kind)
    env = environment(repo, kind)
    setup = env["setup"]
    # ``cat >``, not ``cp``: the run's copy of the suite is read-only and cp would keep that mode, so the planted
    # file could be edited only by root (an agent, or the solution's cp, running as anyone else would be refused).
    plant = {"sh": f'cat "$WORKTRIAL_SUITE_DIR/planted/worktrial_version.{ext}" > worktrial_version.{ext}'}
    return {
        "id": suite_id,
        "name": f"Starter suite for {repo.name}",
        "attempts": 3,
        "files": ["hidden/**", "solutions/**", "planted/**"],
        "environment": env,
        "tasks": [
            {
                "id": "add-slugify",
                "category": "capability",
                "prompt": (
                    f"Add a file worktrial_starter.{ext}"
                    + (" (plain JavaScript)" if project.typescript else "")
                    + " at the repository root that "
                    + _SLUGIFY_INTERFACE[project.flavour]
                    + ": lower-case the text, turn every run of characters other than a-z and 0-9 into a single "
                    "hyphen, and strip hyphens from both ends. For example 'Hello, World!' becomes 'hello-world'."
                ),
                "timeout_secs": 600,
                "verify_commands": [{"sh": f'{run} "$WORKTRIAL_SUITE_DIR/hidden/test_slugify.{test_ext}"'}],
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
                "environment": {**env, "setup": [*setup, plant]},
                "verify_commands": [{"sh": f'{run} "$WORKTRIAL_SUITE_DIR/hidden/test_version.{test_ext}"'}],
                "verify_timeout_secs": 120,
                "solution": [{"sh": f'cp "$WORKTRIAL_SUITE_DIR/solutions/worktrial_version.{ext}" .'}],
            },
        ],
    }


def _notes(project: Project) -> str:
    if project.typescript:
        return (
            "TypeScript: the starter tasks ask for JavaScript, which node runs without a build. For tasks in "
            "TypeScript, compile in a verify command with the project's own compiler, or run the tests with a "
            "runner that strips types (node 22.6 or later: `node --experimental-strip-types`)."
        )
    if project.module == "esm":
        return (
            'The package is `"type": "module"`: its `.js` files are ES modules, and so are the starter\'s; the '
            "hidden tests are `.mjs`, which node loads as ES modules wherever they lie."
        )
    return ""


def write_starter(repo: Path, directory: Path | None = None, *, force: bool = False) -> StarterResult:
    """Write the starter suite into ``directory`` (default ``<repo>/evals``); refuse to overwrite unless forced."""
    project = detect(repo)
    kind = project.kind
    target = directory if directory is not None else repo / DEFAULT_DIR
    suite_path = target / "suite.json"
    if suite_path.exists() and not force:
        raise BadInputError(f"{suite_path} already exists; pass --force to overwrite it or --dir for another place")
    ext, test_ext, flavour = _ext(kind), _test_ext(kind), project.flavour
    suite = starter_suite(repo, project, f"{repo.name}-starter")
    env = suite["environment"]
    try:
        suite_arg = str(suite_path.relative_to(repo))
    except ValueError:
        suite_arg = str(suite_path)
    contents: dict[str, str] = {
        "suite.json": json.dumps(suite, indent=2) + "\n",
        "README.md": readme(
            title=", ".join(filter(None, [project.kind, project.details()])),
            suite_arg=suite_arg,
            setup=env["setup"],
            cache_key=env.get("cache_key"),
            editable=installs_editable(env["setup"]),
            ext=ext,
            notes=_notes(project),
        ),
        f"hidden/test_slugify.{test_ext}": TESTS[flavour]["slugify"],
        f"hidden/test_version.{test_ext}": TESTS[flavour]["version"],
        f"solutions/worktrial_starter.{ext}": SOLUTIONS[flavour]["slugify"],
        f"solutions/worktrial_version.{ext}": SOLUTIONS[flavour]["version"],
        f"planted/worktrial_version.{ext}": PLANTS[flavour],
    }
    written: list[Path] = []
    for rel, text in contents.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return StarterResult(project=project, directory=target, files=written)
