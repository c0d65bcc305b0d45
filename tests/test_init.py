"""worktrial init writes a starter suite that check passes (oracle) and fails (nop), in fresh Python, Node and
plain repositories."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest

from tests.conftest import git
from worktrial.cli.main import main
from worktrial.scaffold.project import environment

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


def _init_and_check(cli: Any, repo: Path, kind: str, details: str = "") -> dict[str, Any]:
    result = cli(["init"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert f"wrote a {kind} starter suite{details}" in result.stdout
    suite = repo / "evals" / "suite.json"
    data: dict[str, Any] = json.loads(suite.read_text())
    assert data["files"] and data["environment"]["setup"]
    assert {t["category"] for t in data["tasks"]} == {"capability", "regression"}
    check = cli(["check", str(suite), "--trust", "--format", "json", "-q", "--repeats", "1"], cwd=repo)
    assert check.exit_code == 0, check.output
    report: dict[str, Any] = json.loads(check.stdout)
    assert report["ok"] is True, report
    assert report["warnings"] == 0, report["lints"]  # the starter's verifiers are judges check cannot forge
    for t in report["tasks"]:
        assert t["oracle"] == "pass" and t["nop"] == "fail", t
    _readme_commands_parse(repo, repo / "evals" / "README.md")
    return data


def _readme_commands_parse(repo: Path, readme: Path) -> None:
    """Every ``worktrial`` command the generated README shows parses against the real CLI, from the repo's root:
    the subcommand and each flag exist, the suite path is right."""
    commands = [line.strip() for line in readme.read_text().splitlines() if line.strip().startswith("worktrial ")]
    assert commands, "the README shows no command"
    group = main
    assert isinstance(group, click.Group)
    for line in commands:
        name, *args = shlex.split(line, comments=True)[1:]
        with contextlib.chdir(repo), click.Context(group, info_name="worktrial") as ctx:
            command = group.get_command(ctx, name)
            assert command is not None, f"README command {line!r}: no subcommand {name!r}"
            try:
                command.make_context(name, list(args), parent=ctx).close()
            except click.UsageError as exc:
                pytest.fail(f"README command {line!r} does not parse: {exc.format_message()}")
        for arg in args:
            if arg.endswith("suite.json"):
                assert (repo / arg).is_file(), line


def test_init_python_project(cli, tmp_path: Path) -> None:
    pyproject = (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "fresh-demo"\nversion = "0.1.0"\n\n[tool.setuptools]\npy-modules = ["demo"]\n'
    )
    repo = _fresh(tmp_path, {"pyproject.toml": pyproject, "demo.py": "VALUE = 1\n", ".gitignore": ".venv/\n"})
    data = _init_and_check(cli, repo, "python")
    setup = data["environment"]["setup"]
    assert setup[0] == "python3 -m venv .venv" and any("-e ." in step for step in setup)
    assert data["environment"]["cache_key"].startswith("pyproject.toml@")


def test_no_cache_key_for_an_editable_src_layout(tmp_path: Path) -> None:
    """A replayed editable install of a src/ layout would import another slot's code: init does not cache it."""
    repo = _fresh(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\n", "src/x/__init__.py": ""})
    env = environment(repo, "python")
    assert "cache_key" not in env and any(step.endswith("-e .") for step in env["setup"])


def test_init_node_project(cli, tmp_path: Path) -> None:
    package = json.dumps({"name": "fresh-node-demo", "version": "1.0.0", "private": True})
    repo = _fresh(tmp_path, {"package.json": package, "index.js": "module.exports = 1;\n"})
    data = _init_and_check(cli, repo, "node")
    assert data["environment"]["setup"] == ["npm install --no-audit --no-fund"]
    assert data["environment"]["cache_key"].startswith("package.json@")


def _npm_package(tmp_path: Path, module_type: str | None, sources: dict[str, str]) -> Path:
    """A tiny npm package with a local dependency, its lock file and tests run by node's own runner (no registry)."""
    package: dict[str, Any] = {
        "name": "tiny-pkg",
        "version": "1.0.0",
        "private": True,
        "scripts": {"test": "node --test"},
        "dependencies": {"tiny-dep": "file:vendor/tiny-dep"},
    }
    if module_type is not None:
        package["type"] = module_type
    dep = {"name": "tiny-dep", "version": "1.0.0", "main": "index.js"}
    files = {
        "package.json": json.dumps(package, indent=2),
        "vendor/tiny-dep/package.json": json.dumps(dep),
        "vendor/tiny-dep/index.js": "module.exports = (s) => s.toUpperCase();\n",
        ".gitignore": "node_modules/\n",
        **sources,
    }
    repo = _fresh(tmp_path, files)
    npm = subprocess.run(
        ["npm", "install", "--package-lock-only", "--offline", "--no-audit", "--no-fund"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert npm.returncode == 0, npm.stderr
    git(repo, "add", "package-lock.json")
    git(repo, "commit", "-q", "-m", "lock")
    return repo


def test_init_esm_package(cli, tmp_path: Path) -> None:
    """``"type": "module"``: the starter's .js files are ES modules, and check passes (it failed on `module`)."""
    sources = {
        "index.js": 'import up from "tiny-dep";\nexport const shout = (s) => up(s);\n',
        "test/index.test.js": 'import { test } from "node:test";\nimport { shout } from "../index.js";\n'
        'test("shout", () => { if (shout("a") !== "A") throw new Error("bad"); });\n',
    }
    repo = _npm_package(tmp_path, "module", sources)
    data = _init_and_check(cli, repo, "node", " (ES modules)")
    assert data["environment"]["setup"] == ["npm ci --no-audit --no-fund"]
    assert data["environment"]["cache_key"].startswith("package-lock.json@")
    assert "export function" in (repo / "evals" / "solutions" / "worktrial_starter.js").read_text()


def test_init_commonjs_package(cli, tmp_path: Path) -> None:
    sources = {
        "index.js": 'const up = require("tiny-dep");\nmodule.exports = { shout: (s) => up(s) };\n',
        "test/index.test.js": 'const { test } = require("node:test");\nconst { shout } = require("../index.js");\n'
        'test("shout", () => { if (shout("a") !== "A") throw new Error("bad"); });\n',
    }
    repo = _npm_package(tmp_path, "commonjs", sources)
    data = _init_and_check(cli, repo, "node", " (CommonJS)")
    assert data["environment"]["cache_key"].startswith("package-lock.json@")
    assert "module.exports" in (repo / "evals" / "solutions" / "worktrial_starter.js").read_text()


def test_init_typescript_package_gets_javascript_starters(cli, tmp_path: Path) -> None:
    """A TypeScript project (tsconfig.json, .ts sources) gets starters node runs without a build, and is told so."""
    sources = {"tsconfig.json": "{}\n", "src/index.ts": "export const x: number = 1;\n"}
    repo = _npm_package(tmp_path, "module", sources)
    data = _init_and_check(cli, repo, "node", " (ES modules, TypeScript (the starter tasks are JavaScript))")
    assert "TypeScript" in (repo / "evals" / "README.md").read_text()
    assert "worktrial_starter.js (plain JavaScript)" in data["tasks"][0]["prompt"]


def test_init_plain_repository(cli, tmp_path: Path) -> None:
    data = _init_and_check(cli, _fresh(tmp_path, {"README.md": "# plain\n"}), "shell")
    assert "cache_key" not in data["environment"]


def test_readme_commands_follow_the_suite_directory(cli, tmp_path: Path) -> None:
    repo = _fresh(tmp_path, {"README.md": "# plain\n"})
    assert cli(["init", "--dir", "benchmarks/agent"], cwd=repo).exit_code == 0
    _readme_commands_parse(repo, repo / "benchmarks" / "agent" / "README.md")


def test_init_refuses_invalid_package_json(cli, tmp_path: Path) -> None:
    repo = _fresh(tmp_path, {"package.json": "{not json"})
    result = cli(["init"], cwd=repo)
    assert result.exit_code == 2 and "package.json is not readable JSON" in result.stderr


def test_init_refuses_to_overwrite(cli, tmp_path: Path) -> None:
    repo = _fresh(tmp_path, {"README.md": "# plain\n"})
    assert cli(["init"], cwd=repo).exit_code == 0
    again = cli(["init"], cwd=repo)
    assert again.exit_code == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert cli(["init", "--force"], cwd=repo).exit_code == 0


def test_the_container_starter_plants_its_bug_in_the_image_never_per_attempt(tmp_path: Path) -> None:
    from worktrial.scaffold.container import PLANTED, container_suite, dockerfile

    suite = container_suite(tmp_path, "s")
    assert all(not task.get("setup_commands") and "environment" not in task for task in suite["tasks"])
    regression = next(task for task in suite["tasks"] if task["id"] == "fix-version-compare")
    assert PLANTED in regression["prompt"]
    assert f"COPY planted/worktrial_version.sh {PLANTED}" in dockerfile("debian:bookworm-slim").splitlines()
