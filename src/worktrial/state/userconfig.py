"""The user's own ``config.toml``: read and validated on its own, so the project file's trust can consult it.

It lives apart from ``worktrial.state.config`` (which overlays the project's file on it) because
``worktrial.state.project`` needs the digests the user pinned in ``[trust]`` and ``config`` needs ``project``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.jsonlimits import MAX_CONFIG_BYTES, JsonLimitError, check_limits
from worktrial.model.config import Config, parse_config
from worktrial.safe_read import InputFileError, read_input
from worktrial.state.dirs import config_dir

USER_FILE = "config.toml"


def user_config_path() -> Path:
    return config_dir() / USER_FILE


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's tables ({} when it does not exist); every problem is one line of bad input naming the file."""
    try:
        # A regular file only, within 1 MiB: a FIFO there would hang every command (a symlink to a file is fine).
        data = tomllib.loads(read_input(path, MAX_CONFIG_BYTES).decode("utf-8"))
        check_limits(data, allow_nul=False)  # a NUL in an argument or variable could never reach a program
        return data
    except FileNotFoundError:
        return {}
    except InputFileError as exc:
        raise BadInputError(f"{path}: {exc.problem}; config.toml must be a regular file of at most 1 MiB") from None
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: invalid TOML: not UTF-8 text") from None
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
