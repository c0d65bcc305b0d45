"""Trust records: a suite runs commands on this machine, so each suite file (by digest) in each workspace
must be trusted once. Editing the suite changes its digest and asks again.

The same records hold the trust given to a project's ``worktrial.toml`` (``worktrial.state.project``), under a
``worktrial.toml:`` prefix so a suite and a project file can never stand for one another."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from worktrial.errors import TrustError
from worktrial.jsonlimits import MAX_CONFIG_BYTES, loads_limited
from worktrial.model.commands import display
from worktrial.model.suite import LoadedSuite
from worktrial.safe_read import read_input
from worktrial.state.dirs import config_dir
from worktrial.util import atomic_write_text, utc_now

TRUST_ENV = "WORKTRIAL_TRUST"


def _store() -> Path:
    return config_dir() / "trust.json"


def load_records() -> dict[str, dict[str, dict[str, str]]]:
    """Workspace path -> trusted digest -> what was trusted and when."""
    try:
        data = loads_limited(read_input(_store(), MAX_CONFIG_BYTES * 16))
    except (OSError, ValueError):  # none yet, or unusable (a FIFO, not JSON): nothing is trusted
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(sha256: str, workspace: Path) -> bool:
    return sha256 in load_records().get(str(workspace.resolve()), {})


def add_record(workspace: Path, key: str, record: dict[str, str]) -> None:
    """Remember that ``key`` (a digest) is trusted in ``workspace``."""
    data = load_records()
    data.setdefault(str(workspace.resolve()), {})[key] = {**record, "granted_at": utc_now()}
    atomic_write_text(_store(), json.dumps(data, indent=2, sort_keys=True) + "\n")


def env_flag(name: str) -> bool:
    """Whether a yes/no variable such as ``WORKTRIAL_TRUST`` is set to yes (``1``, ``true``, ``yes``)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def trust_from_environment() -> bool:
    """``WORKTRIAL_TRUST=1`` accepts the suite, like ``--trust`` (never the project's worktrial.toml)."""
    return env_flag(TRUST_ENV)


def grant(loaded: LoadedSuite, workspace: Path) -> None:
    add_record(workspace, loaded.digest, {"suite": str(loaded.path.resolve())})


def _files_note(loaded: LoadedSuite) -> str:
    return f", with {len(loaded.files)} declared files" if loaded.files else ""


def commands_summary(loaded: LoadedSuite) -> str:
    """Every command the suite would run, for the person deciding whether to trust it."""
    lines = []
    if loaded.suite.environment is not None:
        lines += [f"  [environment] setup: {display(c)}" for c in loaded.suite.environment.setup]
    for task in loaded.suite.tasks:
        for label, commands in (
            ("environment", task.environment.setup if task.environment else []),
            ("setup", task.setup_commands),
            ("solution", task.solution or []),
            ("verify", task.verify_commands),
        ):
            lines += [f"  [{task.id}] {label}: {display(c)}" for c in commands]
    return "\n".join(lines)


def ensure_trusted(
    loaded: LoadedSuite,
    workspace: Path,
    *,
    assume_yes: bool,
    interactive: bool,
    confirm: Callable[[str], bool],
) -> None:
    """Return when the suite may run; remember granted trust; raise TrustError otherwise."""
    if is_trusted(loaded.digest, workspace):
        return
    if assume_yes or trust_from_environment():
        grant(loaded, workspace)
        return
    if not interactive:
        raise TrustError(
            f"{loaded.path} has not been trusted to run commands in {workspace} (suite bundle sha256 "
            f"{loaded.digest[:12]}). Review its commands, then rerun with --trust or WORKTRIAL_TRUST=1."
        )
    question = (
        f"{loaded.path} (suite bundle sha256 {loaded.digest[:12]}{_files_note(loaded)}) will run these commands "
        f"in worktrees of {workspace}:\n"
        f"{commands_summary(loaded)}\nplus whatever the agent decides to run. Trust this suite?"
    )
    if not confirm(question):
        raise TrustError("suite not trusted; nothing was run")
    grant(loaded, workspace)
