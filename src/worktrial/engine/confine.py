"""A run's sandbox choice: flags over the user's ``[sandbox]`` config, resolved on this machine, plus what to hide.

The ``[sandbox]`` table is read from the user's own config only, never from a project's ``worktrial.toml``: the
repository under evaluation must not be able to switch its own containment off.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.isolation.limits import Limits, mechanism, parse_size
from worktrial.isolation.sandbox import (
    SandboxDecision,
    SandboxSettings,
    allowlist,
    decide,
)
from worktrial.model.config import SandboxConfig
from worktrial.model.envelope import SandboxInfo
from worktrial.model.run_config import SandboxRequest
from worktrial.state.config import USER_FILE, cache_dir, config_dir, load_config

_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class SandboxChoice:
    """What the command line asked for; ``None`` falls back to the user's config, then to the default."""

    mode: str | None = None
    network: str | None = None
    max_memory: str | None = None
    max_procs: int | None = None
    show: tuple[str, ...] = ()
    """``--sandbox-show PATH``: more host paths every attempt sees read-only."""


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
            if path.is_absolute() and os.path.exists(path) and path != Path("/"):
                found.append(path)
    return found


def _paths(values: list[str], key: str) -> tuple[str, ...]:
    paths = tuple(str(Path(v).expanduser()) for v in values)
    if relative := [p for p in paths if not Path(p).is_absolute()]:
        raise BadInputError(f"[sandbox] {key}: {relative[0]!r} is not an absolute path; write it from / or ~")
    return paths


def _shown(values: Iterable[str]) -> tuple[str, ...]:
    """``--sandbox-show`` paths, absolute; one that does not exist is a typo the user wants to hear about."""
    shown = []
    for value in values:
        path = Path(value).expanduser().absolute()
        if not os.path.exists(path):
            raise BadInputError(f"--sandbox-show {value}: no such file or directory; name a path that exists")
        if path == Path("/"):
            raise BadInputError("--sandbox-show /: that is the whole host; name the directory the attempt needs")
        shown.append(str(path))
    return tuple(shown)


def loopback_url(url: str | None) -> str | None:
    """``url`` when it names this host's loopback (``localhost``, 127.0.0.0/8, ``::1``), else None."""
    if not url:
        return None
    try:
        host = urllib.parse.urlsplit(url if "//" in url else f"//{url}").hostname
    except ValueError:
        return None
    if host is None:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return url
    try:
        return url if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def unwritable_shared(settings: SandboxSettings, decision: SandboxDecision) -> list[str]:
    """One line per ``[sandbox] writable`` directory the sandbox's uid cannot write (a root harness's programs run
    as another uid): the attempts would fail on it for no fault of the agent's."""
    uid = decision.uid if decision.kind == "bubblewrap" else None
    if uid is None:
        return []
    lines = []
    for path in settings.writable:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not (st.st_uid == uid or st.st_mode & 0o002 or (st.st_gid == uid and st.st_mode & 0o020)):
            lines.append(
                f"[sandbox] writable {path}: sandboxed programs run as uid {uid} and cannot write it; "
                f"chmod 1777 {shlex.quote(path)} (or chown {uid} it)"
            )
    return lines


def unreadable_objects(objects_dir: Path, decision: SandboxDecision) -> str | None:
    """One line when the sandbox's uid (a root harness's programs run as another uid) cannot read the repository's
    object store that every attempt borrows: git would fail in every attempt, for no fault of the agent's."""
    uid = decision.uid if decision.kind == "bubblewrap" else None
    if uid is None:
        return None
    subdirs = sorted(d for d in objects_dir.iterdir() if d.is_dir())[:3]  # a sample: "pack", "info", a fan-out
    for path in (objects_dir, *subdirs):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if mode & 0o005 != 0o005:
            return (
                f"the repository's objects ({path}) cannot be read by uid {uid}, which sandboxed programs run as "
                f"(mode {mode & 0o777:o}); every attempt's git would fail: "
                f"chmod -R o+rX {shlex.quote(str(objects_dir))}"
            )
    return None


@dataclass(frozen=True)
class ResolvedSandbox:
    """A run's containment: what it asked for (frozen in its config), the settings every attempt uses, what this
    machine can give (the decision) and how the envelope records it."""

    request: SandboxRequest
    settings: SandboxSettings
    decision: SandboxDecision
    info: SandboxInfo


def requested_sandbox(choice: SandboxChoice, config: SandboxConfig | None = None) -> SandboxRequest:
    """The containment asked for, normalised; the user's ``[sandbox]`` config, when given, fills what the flags
    leave unset, else only the flags given are set (``model_fields_set`` says which: resume compares just those)."""
    given: dict[str, Any] = {}
    mode = choice.mode or (config.mode if config else None)
    if mode is not None:
        if mode not in _MODES:
            raise BadInputError(f"--sandbox {mode!r} is not one of auto, on, off")
        given["mode"] = mode
    network = choice.network or (config.network if config else None)
    if network is not None:
        if network not in ("on", "off", "host"):
            raise BadInputError(f"--network {network!r} is not on, off or host")
        given["network"] = network
    memory = choice.max_memory if choice.max_memory is not None else (config.max_memory if config else None)
    if memory is not None:
        given["max_memory"] = parse_size(str(memory))
    procs = choice.max_procs if choice.max_procs is not None else (config.max_procs if config else None)
    if procs is not None:
        if procs < 1:
            raise BadInputError(f"--max-procs must be a whole number of at least 1 (got {procs!r})")
        given["max_procs"] = procs
    if choice.show:
        given["show"] = _shown(choice.show)
    return SandboxRequest(**given)


def resolve_sandbox(
    choice: SandboxChoice | SandboxRequest, hidden: Iterable[Path], agent_command: str | None = None
) -> ResolvedSandbox:
    """Settings for every attempt, the decision for this machine and ``run.sandbox``; bad values exit 2.

    A ``SandboxRequest`` (a resumed run's frozen one) is used as it is; a ``SandboxChoice`` (flags) is completed
    from the user's config first.
    """
    config = load_config(None).sandbox
    frozen = isinstance(choice, SandboxRequest)
    request = choice if isinstance(choice, SandboxRequest) else requested_sandbox(choice, config)
    mode = request.mode
    config_file = config_dir() / USER_FILE
    if frozen:
        mode_from = f"--sandbox {mode} (the run's stored config)"
    elif choice.mode:
        mode_from = f"--sandbox {mode}"
    else:
        mode_from = f'[sandbox] mode = "{mode}" in {config_file}'
    network = request.network
    limits = Limits(max_memory=request.max_memory, max_procs=request.max_procs)
    home = Path.home()
    always = [config_dir(), cache_dir(), home]
    settings = SandboxSettings(
        mode=mode,
        network=network,
        limits=limits,
        hidden=tuple(str(p) for p in (*always, *hidden)),
        readable=(
            *_paths([*config.readable, *config.show], "readable"),
            *request.show,
            *(str(p) for p in command_paths(agent_command)),
        ),
        writable=_paths(config.writable, "writable"),
        mode_from=mode_from,
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
        shown=allowlist(settings, decision) if decision.kind == "bubblewrap" else None,
        uid=decision.uid_mode() if decision.kind == "bubblewrap" else None,
        network_detail=decision.network_mode(),
    )
    return ResolvedSandbox(request, settings, decision, info)
