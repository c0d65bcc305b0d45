"""Trust records: a suite runs commands on this machine, so each suite file (by digest) in each workspace
must be trusted once. Editing the suite changes its digest and asks again."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from worktrial.errors import TrustError
from worktrial.model.commands import display
from worktrial.model.suite import LoadedSuite
from worktrial.state.config import config_dir
from worktrial.util import atomic_write_text, utc_now

TRUST_ENV = "WORKTRIAL_TRUST"


def _store() -> Path:
    return config_dir() / "trust.json"


def _load() -> dict[str, dict[str, dict[str, str]]]:
    try:
        data = json.loads(_store().read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(sha256: str, workspace: Path) -> bool:
    return sha256 in _load().get(str(workspace.resolve()), {})


def grant(loaded: LoadedSuite, workspace: Path) -> None:
    data = _load()
    data.setdefault(str(workspace.resolve()), {})[loaded.digest] = {
        "suite": str(loaded.path.resolve()),
        "granted_at": utc_now(),
    }
    atomic_write_text(_store(), json.dumps(data, indent=2, sort_keys=True) + "\n")


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
    if assume_yes or os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes"):
        grant(loaded, workspace)
        return
    if not interactive:
        raise TrustError(
            f"{loaded.path} has not been trusted to run commands in {workspace} (suite sha256 "
            f"{loaded.digest[:12]}). Review its commands, then rerun with --trust or WORKTRIAL_TRUST=1."
        )
    question = (
        f"{loaded.path} (sha256 {loaded.digest[:12]}{_files_note(loaded)}) will run these commands "
        f"in worktrees of {workspace}:\n"
        f"{commands_summary(loaded)}\nplus whatever the agent decides to run. Trust this suite?"
    )
    if not confirm(question):
        raise TrustError("suite not trusted; nothing was run")
    grant(loaded, workspace)
