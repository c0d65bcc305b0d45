"""Install the pinned real agent CLIs into a cache directory: ``python -m tests.real_agents.install``.

Each tool and version gets its own directory (``npm install --prefix`` or a venv), finished by a marker
file, so a second run does nothing and a changed pin installs next to the old one. The cache lives in
``$WORKTRIAL_AGENTS_CACHE`` (default ``~/.cache/worktrial-agents``), outside any checkout, so every
worktree and CI run on the machine shares it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

VERSIONS = Path(__file__).with_name("versions.toml")
MARKER = ".worktrial-installed"


@dataclass(frozen=True)
class Tool:
    name: str
    registry: str
    package: str
    version: str
    binary: str
    root: Path
    also: tuple[str, ...] = ()
    """More npm packages (``name@version``) installed next to it: a platform binary the registry here has only
    under another version than the one the package names."""

    @property
    def home(self) -> Path:
        return self.root / f"{self.name}-{self.version}"

    @property
    def executable(self) -> Path:
        if self.registry == "npm":
            return self.home / "node_modules" / ".bin" / self.binary
        return self.home / "bin" / self.binary

    @property
    def installed(self) -> bool:
        return (self.home / MARKER).is_file() and self.executable.exists()


def cache_root() -> Path:
    return Path(os.environ.get("WORKTRIAL_AGENTS_CACHE") or Path.home() / ".cache" / "worktrial-agents")


def tools() -> dict[str, Tool]:
    data = tomllib.loads(VERSIONS.read_text())
    root = cache_root()
    return {
        name: Tool(name=name, root=root, **{**fields, "also": tuple(fields.get("also", ()))})
        for name, fields in data.items()
    }


def install(tool: Tool) -> None:
    if tool.installed:
        return
    shutil.rmtree(tool.home, ignore_errors=True)
    tool.home.mkdir(parents=True)
    spec = f"{tool.package}@{tool.version}" if tool.registry == "npm" else f"{tool.package}=={tool.version}"
    print(f"installing {spec} into {tool.home}", flush=True)
    if tool.registry == "npm":
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed to install the real agent CLIs (apt-get install nodejs npm)")
        cmd = [npm, "install", "--prefix", str(tool.home), "--no-audit", "--no-fund", "--loglevel=error", spec]
        cmd += tool.also
        subprocess.run(cmd, check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(tool.home)], check=True)
        pip = [str(tool.home / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, spec], check=True)
    if not tool.executable.exists():
        raise SystemExit(f"{spec} installed but {tool.executable} is missing")
    (tool.home / MARKER).write_text("\n".join((spec, *tool.also)) + "\n")


def main() -> None:
    found = tools()
    missing = [name for name, tool in found.items() if not tool.installed]
    for tool in found.values():
        install(tool)
    where = sorted({str(tool.home.parent) for tool in found.values()})
    print(
        f"make: agents: {len(found) - len(missing)} of {len(found)} pinned agent CLIs already installed"
        + (f", installed now: {', '.join(missing)}" if missing else "")
        + f" (in {', '.join(where)})",
        flush=True,
    )


if __name__ == "__main__":
    main()
