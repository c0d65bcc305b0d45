"""A preset's Python CLI inside a container image: the same distribution and version as the host's install,
installed once into a cached volume (``worktrial-tools``) with the image's own ``python3``, as Harbor's installed
agents do, and mounted read-only into the attempt's containers.

A host CLI that is a console script of a Python virtual environment (``mini``, ``aider``) cannot run from the host:
its interpreter and libraries live there. Which distribution and version to install is read from that environment's
own metadata (the ``console_scripts`` entry point naming the program), never guessed. A native executable (Codex's
static build, Claude Code's) needs none of this: it is mounted from the host as it is (``container.py``).
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path

from worktrial.errors import BadInputError
from worktrial.isolation import proc
from worktrial.isolation.container import TOOLS_VOLUME as VOLUME
from worktrial.isolation.container import TOOLS_VOLUME_DIR as VOLUME_DIR
from worktrial.isolation.container import ContainerRuntime

INSTALL_TIMEOUT_SECS = 1800
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
COMPLETE = ".worktrial-complete"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
INSTALL_CA = "/etc/worktrial-host-ca.crt"


@dataclass(frozen=True)
class PythonTool:
    """A console script of a Python virtual environment on this host: what to install to run it elsewhere."""

    distribution: str
    version: str
    script: str


def python_tool(program: Path) -> PythonTool | None:
    """The distribution and version that provide ``program``, when it is a console script of a virtual environment
    (its first line runs that environment's python); None for anything else."""
    try:
        with program.open("rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    interpreter = Path(first[2:].decode("utf-8", "replace").strip().split()[0])
    venv = interpreter.parent.parent
    if not (venv / "pyvenv.cfg").is_file():
        return None
    for entry_points in sorted(venv.glob("lib/python3*/site-packages/*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(entry_points, encoding="utf-8")
        except configparser.Error:
            continue
        if parser.has_option("console_scripts", program.name):
            name, _, version = entry_points.parent.name.removesuffix(".dist-info").partition("-")
            if _SAFE.match(name) and _SAFE.match(version):
                return PythonTool(name, version, program.name)
    return None


def install(runtime: ContainerRuntime, image: str, tool: PythonTool) -> str:
    """The tool's program inside ``image`` (installed into the cached volume on first use, with the image's
    ``python3`` and the network to reach the package index); bad input when the image cannot install it."""
    prefix = f"{VOLUME_DIR}/{image.removeprefix('sha256:')[:16]}/{tool.distribution}-{tool.version}"
    program = f"{prefix}/bin/{tool.script}"
    base = [runtime.program, "run", "--rm", *runtime.run_options, "--volume", f"{VOLUME}:{VOLUME_DIR}"]
    found = proc.run([*base, image, "test", "-e", f"{prefix}/{COMPLETE}"], cwd="/", timeout=300, sweep=False)
    if found.ok:
        return program
    script = (
        f"rm -rf {prefix} && python3 -m venv {prefix} && {prefix}/bin/python -m pip install --quiet "
        f"--disable-pip-version-check {tool.distribution}=={tool.version} && touch {prefix}/{COMPLETE}"
    )
    # The host's CA certificates (public, no secret), so that pip trusts what this host trusts: a proxy that
    # inspects TLS, as on many company and CI networks, has its own authority in them.
    trust: list[str] = []
    if HOST_CA_BUNDLE.is_file():
        trust = ["--volume", f"{HOST_CA_BUNDLE}:{INSTALL_CA}:ro", "--env", f"PIP_CERT={INSTALL_CA}"]
    result = proc.run(
        [*base, *trust, image, "/bin/sh", "-c", script],
        cwd="/",
        timeout=INSTALL_TIMEOUT_SECS,
        sweep=False,
        tail_bytes=4000,
    )
    if not result.ok:
        tail = (result.stderr_tail or result.stdout_tail).decode("utf-8", "replace").strip().splitlines()
        raise BadInputError(
            f"could not install {tool.distribution}=={tool.version} into the image {image[:19]} "
            f"({result.describe_failure('the install')}): {tail[-1][:300] if tail else 'no output'}; the image needs "
            "python3 with venv (Debian: python3-venv) and the network to reach the package index"
        )
    return program
