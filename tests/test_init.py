"""worktrial init writes a starter suite that check passes (oracle) and fails (nop), in fresh Python, Node and
plain repositories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git

pytestmark = pytest.mark.slow


def _fresh(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def _init_and_check(cli: Any, repo: Path, kind: str) -> dict[str, Any]:
    result = cli(["init"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert f"wrote a {kind} starter suite" in result.stdout
    suite = repo / "evals" / "suite.json"
    data: dict[str, Any] = json.loads(suite.read_text())
    assert data["files"] and data["environment"]["setup"]
    assert {t["category"] for t in data["tasks"]} == {"capability", "regression"}
    check = cli(["check", str(suite), "--trust", "--format", "json", "-q", "--repeats", "1"], cwd=repo)
    assert check.exit_code == 0, check.output
    report: dict[str, Any] = json.loads(check.stdout)
    assert report["ok"] is True, report
    for t in report["tasks"]:
        assert t["oracle"] == "pass" and t["nop"] == "fail", t
    return data


def test_init_python_project(cli, tmp_path: Path) -> None:
    pyproject = (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "fresh-demo"\nversion = "0.1.0"\n\n[tool.setuptools]\npy-modules = ["demo"]\n'
    )
    repo = _fresh(tmp_path, {"pyproject.toml": pyproject, "demo.py": "VALUE = 1\n", ".gitignore": ".venv/\n"})
    data = _init_and_check(cli, repo, "python")
    setup = data["environment"]["setup"]
    assert setup[0] == "python3 -m venv .venv" and any("-e ." in step for step in setup)


def test_init_node_project(cli, tmp_path: Path) -> None:
    package = json.dumps({"name": "fresh-node-demo", "version": "1.0.0", "private": True})
    repo = _fresh(tmp_path, {"package.json": package, "index.js": "module.exports = 1;\n"})
    data = _init_and_check(cli, repo, "node")
    assert data["environment"]["setup"] == ["npm install --no-audit --no-fund"]


def test_init_plain_repository(cli, tmp_path: Path) -> None:
    _init_and_check(cli, _fresh(tmp_path, {"README.md": "# plain\n"}), "shell")


def test_init_refuses_to_overwrite(cli, tmp_path: Path) -> None:
    repo = _fresh(tmp_path, {"README.md": "# plain\n"})
    assert cli(["init"], cwd=repo).exit_code == 0
    again = cli(["init"], cwd=repo)
    assert again.exit_code == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert cli(["init", "--force"], cwd=repo).exit_code == 0
