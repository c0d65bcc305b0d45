"""What ``worktrial init`` detects in a repository, and the environment it sets up for it.

Python gets a venv inside the base (pip, requirements and an editable install); Node gets ``npm ci`` (``npm
install`` without a lock file) and its module system read from ``package.json`` (``"type": "module"`` makes ``.js``
files ES modules); anything else plain shell. The environment carries a ``cache_key`` named after the files setup
depends on and their digest, so slots and later runs replay the installed ``node_modules`` or venv.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from worktrial.errors import BadInputError

Kind = Literal["python", "node", "shell"]
Module = Literal["esm", "commonjs"]
SETUP_TIMEOUT_SECS = 900
_NODE_LOCKS = ("npm-shrinkwrap.json", "package-lock.json")
_PYTHON_INPUTS = ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg")
_TS_SOURCE_DIRS = (".", "src", "lib")
_TS_SCAN_LIMIT = 2000


@dataclass(frozen=True)
class Project:
    """What init found: the language, and for Node the module system of ``.js`` files and whether it is TypeScript."""

    kind: Kind
    module: Module | None = None
    typescript: bool = False

    @property
    def flavour(self) -> str:
        """The key of the starter files: ``python``, ``shell``, ``esm`` or ``commonjs``."""
        return self.module if self.kind == "node" and self.module else self.kind

    def details(self) -> str:
        """What else was detected, for Node: ``ES modules`` or ``CommonJS``, and TypeScript; empty otherwise."""
        if self.kind != "node":
            return ""
        module = "ES modules" if self.module == "esm" else "CommonJS"
        return f"{module}, TypeScript (the starter tasks are JavaScript)" if self.typescript else module


def detect_kind(repo: Path) -> Kind:
    """What the repository is, by the files that name its build: Node before Python when both exist."""
    if (repo / "package.json").is_file():
        return "node"
    if any((repo / name).is_file() for name in ("pyproject.toml", "setup.py", "requirements.txt")):
        return "python"
    return "shell"


def detect(repo: Path) -> Project:
    """The project at ``repo``: its kind and, for Node, what ``package.json`` and the sources say."""
    kind = detect_kind(repo)
    if kind != "node":
        return Project(kind)
    package = _package_json(repo)
    module: Module = "esm" if package.get("type") == "module" else "commonjs"
    return Project(kind, module, _is_typescript(repo, package))


def _package_json(repo: Path) -> dict[str, Any]:
    path = repo / "package.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path} is not readable JSON ({exc}); fix it (npm cannot use it either)") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path} must hold a JSON object; fix it (npm cannot use it either)")
    return data


def _is_typescript(repo: Path, package: dict[str, Any]) -> bool:
    """A ``tsconfig.json``, a ``typescript`` dependency, or ``.ts`` sources at the top or in ``src/`` / ``lib/``."""
    if (repo / "tsconfig.json").is_file():
        return True
    for field in ("dependencies", "devDependencies"):
        deps = package.get(field)
        if isinstance(deps, dict) and "typescript" in deps:
            return True
    for rel in _TS_SOURCE_DIRS:
        directory = repo / rel
        if not directory.is_dir() or directory.is_symlink():
            continue
        for n, entry in enumerate(directory.iterdir()):
            if n >= _TS_SCAN_LIMIT:
                break
            if entry.name.endswith((".ts", ".mts", ".cts")) and not entry.name.endswith(".d.ts"):
                return True
    return False


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


def installs_editable(setup: list[Any]) -> bool:
    return any(isinstance(step, str) and step.endswith(" -e .") for step in setup)


def cache_key(repo: Path, kind: Kind, setup: list[Any]) -> str | None:
    """A ``cache_key`` named after the files setup reads and a digest of their contents, or None when not to cache.

    Node: the lock file (``package.json`` without one). Python: the requirements and build files; no key for an
    editable install of a ``src/`` layout, whose recorded path would be a stale slot's in a replayed copy.
    Shell: setup does nothing worth caching.
    """
    if kind == "node":
        names = [name for name in _NODE_LOCKS if (repo / name).is_file()][:1] or ["package.json"]
    elif kind == "python":
        if installs_editable(setup) and (repo / "src").is_dir():
            return None
        names = [name for name in _PYTHON_INPUTS if (repo / name).is_file()]
    else:
        return None
    digest = hashlib.sha256()
    for name in names:
        data = (repo / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return f"{'+'.join(names)}@{digest.hexdigest()[:12]}"


def environment(repo: Path, kind: Kind) -> dict[str, Any]:
    """The suite's ``environment``: the detected setup, its timeout and (where it pays) a ``cache_key``."""
    setup = environment_setup(repo, kind)
    env: dict[str, Any] = {"setup": setup, "timeout_secs": SETUP_TIMEOUT_SECS}
    key = cache_key(repo, kind, setup)
    if key is not None:
        env["cache_key"] = key
    return env
