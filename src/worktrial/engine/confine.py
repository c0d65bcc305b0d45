"""A run's sandbox choice: flags over the user's ``[sandbox]`` config, resolved on this machine, plus what to hide.

The ``[sandbox]`` table is read from the user's own config only, never from a project's ``worktrial.toml``: the
repository under evaluation must not be able to switch its own containment off.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from worktrial.errors import BadInputError
from worktrial.isolation.limits import Limits, mechanism, parse_size
from worktrial.isolation.sandbox import NetworkMode, SandboxDecision, SandboxMode, SandboxSettings, decide
from worktrial.model.envelope import SandboxInfo
from worktrial.state.config import cache_dir, config_dir, load_config

_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class SandboxChoice:
    """What the command line asked for; ``None`` falls back to the user's config, then to the default."""

    mode: str | None = None
    network: str | None = None
    max_memory: str | None = None
    max_procs: int | None = None


def _pick(flag: Any, config: dict[str, Any], key: str, default: Any) -> Any:
    return flag if flag is not None else config.get(key, default)


def command_paths(command: str | None) -> list[Path]:
    """Existing absolute paths named in the agent's configured command line (its script, its config file).

    The command comes from the user (``--agent-cmd``, ``[agents.NAME] command``), never from an agent, so what
    it names is shown read-only: a custom agent kept in ``~/agents`` still runs inside the sandbox.
    """
    if not command:
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    found = []
    for word in words:
        for part in word.split("="):
            path = Path(part).expanduser()
            if path.is_absolute() and path.exists() and path != Path("/"):
                found.append(path)
    return found


def _paths(config: dict[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInputError(f"[sandbox] {key} in the user config must be a list of paths (got {value!r})")
    paths = tuple(str(Path(v).expanduser()) for v in value)
    if relative := [p for p in paths if not Path(p).is_absolute()]:
        raise BadInputError(f"[sandbox] {key}: {relative[0]!r} is not an absolute path; write it from / or ~")
    return paths


def resolve_sandbox(
    choice: SandboxChoice, hidden: Iterable[Path], agent_command: str | None = None
) -> tuple[SandboxSettings, SandboxDecision, SandboxInfo]:
    """Settings for every attempt, the decision for this machine and ``run.sandbox``; bad values exit 2."""
    table = load_config(None).get("sandbox", {})
    if not isinstance(table, dict):
        raise BadInputError("sandbox in the user config must be a table: [sandbox]")
    config = table
    mode = str(_pick(choice.mode, config, "mode", "auto"))
    if mode not in _MODES:
        raise BadInputError(f"--sandbox {mode!r} is not one of auto, on, off")
    network = str(_pick(choice.network, config, "network", "on"))
    if network not in ("on", "off"):
        raise BadInputError(f"--network {network!r} is not on or off")
    memory = _pick(choice.max_memory, config, "max_memory", None)
    procs = _pick(choice.max_procs, config, "max_procs", None)
    if procs is not None and (not isinstance(procs, int) or isinstance(procs, bool) or procs < 1):
        raise BadInputError(f"--max-procs must be a whole number of at least 1 (got {procs!r})")
    limits = Limits(max_memory=parse_size(str(memory)) if memory is not None else None, max_procs=procs)
    home = Path.home()
    always = [config_dir(), cache_dir(), home]
    settings = SandboxSettings(
        mode=cast(SandboxMode, mode),
        network=cast(NetworkMode, network),
        limits=limits,
        hidden=tuple(str(p) for p in (*always, *hidden)),
        readable=(*_paths(config, "readable"), *(str(p) for p in command_paths(agent_command))),
        writable=_paths(config, "writable"),
    )
    decision = decide(settings)
    info = SandboxInfo(
        kind=decision.kind,
        version=decision.version,
        network=decision.network,
        max_memory=limits.max_memory,
        max_procs=limits.max_procs,
        limits=mechanism() if limits.any else None,
        reason=decision.reason,
    )
    return settings, decision, info
