"""The project's own configuration as something to trust: ``worktrial.toml`` at the workspace root.

The workspace is the repository under evaluation, and whoever wrote the repository wrote its worktrial.toml. Some
of its settings only shape numbers (prices, the builtin agent's budgets); others run programs or decide where the
user's credentials go: an agent's ``command``, ``model_flag``, ``binary``, ``args``, ``env``, ``config_dir`` and
``pass_env``, a provider's ``base_url`` and ``api_key_env``. Those count only once the user has trusted this exact
file (by sha256) for this workspace, like a suite; until then they are left out of the merged configuration, so
the user's own settings or the defaults apply, and nothing the file names is executed. An edited file has a new
digest and is asked about again. The user's own ``config.toml`` is always trusted: the user wrote it.

Trusting a suite (``--trust``, ``WORKTRIAL_TRUST=1``) never trusts this file: in CI every run needs ``--trust``, and
a pull request can add a worktrial.toml. The file is trusted only explicitly: on the terminal's question, with
``--trust-project`` (``WORKTRIAL_TRUST_PROJECT=1``), or by its digest pinned in the user's ``[trust]
project_sha256``, the one way that holds in a CI checkout whose path changes every run. Otherwise its sensitive
settings are skipped with one warning and the run goes on without them.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.isolation.safefs import read_regular
from worktrial.state.trust import add_record, env_flag, load_records
from worktrial.state.userconfig import pinned_project_digests, user_config_path

PROJECT_FILE = "worktrial.toml"
MAX_PROJECT_BYTES = 1024 * 1024
TRUST_PREFIX = "worktrial.toml:"
"""Prefix of a project file's digest in the trust records (a suite's digest is stored bare)."""
SENSITIVE_AGENT_KEYS = ("command", "model_flag", "binary", "args", "env", "config_dir", "pass_env")
SENSITIVE_PROVIDER_KEYS = ("base_url", "api_key_env")
TRUST_PROJECT_ENV = "WORKTRIAL_TRUST_PROJECT"
_SHOWN_CHARS = 200


def trust_project_from_environment() -> bool:
    """``WORKTRIAL_TRUST_PROJECT=1`` trusts the workspace's worktrial.toml, like ``--trust-project``."""
    return env_flag(TRUST_PROJECT_ENV)


def _name(part: str) -> str:
    """A table or key name as TOML would write it; quoted (control characters escaped) unless plain."""
    return part if part and part.replace("-", "").replace("_", "").isalnum() and part.isascii() else json.dumps(part)


def _shown(value: Any) -> str:
    """A value for the trust question: JSON-escaped (no terminal control sequences from the repository), bounded."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class ProjectFile:
    """One read of a workspace's worktrial.toml: its bytes' digest and its (not yet validated) tables."""

    path: Path
    workspace: Path
    digest: str
    data: dict[str, Any]

    def _sensitive(self) -> list[tuple[str, str, str, Any]]:
        """(table kind, table name, key, value) of every setting that runs something or routes credentials."""
        found: list[tuple[str, str, str, Any]] = []
        for kind, keys in (("agents", SENSITIVE_AGENT_KEYS), ("providers", SENSITIVE_PROVIDER_KEYS)):
            tables = self.data.get(kind)
            if not isinstance(tables, dict):
                continue
            for name, table in tables.items():
                if isinstance(table, dict):
                    found += [(kind, name, key, table[key]) for key in keys if key in table]
        return found

    def sensitive(self) -> list[str]:
        """``[providers.openai].base_url = "http://..."``, one line per setting that needs trust."""
        return [f"[{kind}.{_name(name)}].{key} = {_shown(value)}" for kind, name, key, value in self._sensitive()]

    def sensitive_names(self) -> list[str]:
        return [f"[{kind}.{_name(name)}].{key}" for kind, name, key, _value in self._sensitive()]

    def untrusted_agents(self) -> dict[str, list[str]]:
        """Agent name -> its sensitive keys, while the file is not trusted (empty once it is)."""
        if not self.needs_trust():
            return {}
        found: dict[str, list[str]] = {}
        for kind, name, key, _value in self._sensitive():
            if kind == "agents":
                found.setdefault(name, []).append(key)
        return found

    def without_sensitive(self) -> dict[str, Any]:
        """The file's tables with every setting that needs trust left out (what counts until it is trusted)."""
        data = dict(self.data)
        for kind, name, key, _value in self._sensitive():
            tables = dict(data[kind])
            tables[name] = {k: v for k, v in tables[name].items() if k != key}
            data[kind] = tables
        return data

    def needs_trust(self) -> bool:
        """Whether the file has settings that count only once trusted and it is not trusted yet."""
        return bool(self._sensitive()) and not self.trusted()

    def trusted(self) -> bool:
        """Trusted for this workspace (remembered), or pinned by digest in the user's ``[trust]``."""
        if TRUST_PREFIX + self.digest in load_records().get(str(self.workspace.resolve()), {}):
            return True
        return self.digest in pinned_project_digests()

    def grant(self) -> None:
        add_record(self.workspace, TRUST_PREFIX + self.digest, {"project_file": str(self.path)})

    def effective(self) -> dict[str, Any]:
        """What of the file counts now: all of it once trusted, else everything but the sensitive settings."""
        return self.data if not self._sensitive() or self.trusted() else self.without_sensitive()


def read_project(workspace: Path) -> ProjectFile | None:
    """The workspace's worktrial.toml, or None when there is none.

    It belongs to the repository under evaluation, so it is read like any file an agent could have written: a
    regular file (never through a symlink, FIFO or device) of at most 1 MiB.
    """
    path = workspace / PROJECT_FILE
    try:
        raw = read_regular(path, MAX_PROJECT_BYTES)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise BadInputError(f"{path}: {exc}; worktrial.toml must be a regular file of at most 1 MiB") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read config: {exc.strerror} (a symlink is not followed)") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: invalid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{path}: invalid TOML: {exc}") from None
    return ProjectFile(path=path, workspace=workspace, digest=hashlib.sha256(raw).hexdigest(), data=data)


def ensure_project_trusted(
    workspace: Path,
    *,
    trust_project: bool,
    interactive: bool,
    confirm: Callable[[str], bool],
    warn: Callable[[str], None],
) -> bool:
    """Whether the workspace's worktrial.toml counts in full; remembers trust granted here.

    A file without settings that need trust (or no file) needs nothing. ``trust_project`` is ``--trust-project``;
    on a terminal the user is asked; elsewhere, or when the user says no, the sensitive settings are skipped with
    one ``warn`` line naming the file, what is skipped and how to trust it, and the run goes on without them.
    """
    project = read_project(workspace)
    if project is None or not project.needs_trust():
        return True
    if trust_project or trust_project_from_environment():
        project.grant()
        return True
    if interactive:
        question = (
            f"{project.path} (sha256 {project.digest[:12]}) is this repository's own configuration. These "
            f"settings run programs or decide where your credentials go:\n"
            + "\n".join(f"  {line}" for line in project.sensitive())
            + "\nTrust this file?"
        )
        if confirm(question):
            project.grant()
            return True
    warn(
        f"worktrial: warning: {project.path} (sha256 {project.digest[:12]}) is not trusted; ignoring "
        f"{', '.join(project.sensitive_names())}. Review it, then rerun with --trust-project, or pin it with "
        f'[trust] project_sha256 = ["{project.digest}"] in {user_config_path()}'
    )
    return False
