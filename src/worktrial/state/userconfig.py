"""The user's own ``config.toml``: read and validated on its own, so the project file's trust can consult it.

It lives apart from ``worktrial.state.config`` (which overlays the project's file on it) because
``worktrial.state.project`` needs the digests the user pinned in ``[trust]`` and ``config`` needs ``project``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.jsonlimits import JsonLimitError, check_limits
from worktrial.model.config import Config, parse_config
from worktrial.state.dirs import config_dir

USER_FILE = "config.toml"


def user_config_path() -> Path:
    return config_dir() / USER_FILE


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's tables ({} when it does not exist); every problem is one line of bad input naming the file."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        check_limits(data, allow_nul=False)  # a NUL in an argument or variable could never reach a program
        return data
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{path}: invalid TOML: {exc}") from None
    except JsonLimitError as exc:
        raise BadInputError(f"{path}: {exc}") from None
    except RecursionError:
        raise BadInputError(f"{path}: invalid TOML: nested too deeply") from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read config: {exc.strerror}") from None


def read_user_config() -> tuple[dict[str, Any], Config]:
    """The user's config as raw tables (to merge) and validated (to use on its own)."""
    path = user_config_path()
    data = read_toml(path)
    return data, parse_config(data, str(path))


def pinned_project_digests() -> frozenset[str]:
    """``[trust] project_sha256`` of the user's config: project files trusted wherever they are checked out."""
    return frozenset(read_user_config()[1].trust.project_sha256)
