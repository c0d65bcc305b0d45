"""User and project configuration, and where worktrial keeps user state.

Configuration is TOML: ``<config dir>/config.toml`` (the user's) overlaid by ``worktrial.toml`` at the
workspace root (the project's). Tables merge key by key, the project winning, so a project can add an
``[agents.NAME]`` or ``[pricing."provider/model"]`` entry without repeating the user's; the project's settings that
run programs or route credentials count only once its file is trusted (``worktrial.state.project``).
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.jsonlimits import JsonLimitError, check_limits
from worktrial.model.config import Config, parse_config
from worktrial.state.dirs import cache_dir, config_dir
from worktrial.state.project import PROJECT_FILE, read_project

__all__ = ["PROJECT_FILE", "USER_FILE", "cache_dir", "config_dir", "load_config"]
log = logging.getLogger(__name__)
USER_FILE = "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
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


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(workspace: Path | None = None) -> Config:
    """The user's config overlaid by the project's ``worktrial.toml`` (when a workspace is given).

    Of the project's file, the settings that run programs or route credentials count only once the user has
    trusted it (``worktrial.state.project``); until then they are left out and the user's own apply.

    Each file is validated on its own first, so an error names the file it is in; the merge is validated again
    (it only combines tables that were each valid, so that cannot fail on a key the user did not write).
    """
    user_path = config_dir() / USER_FILE
    data = _read_toml(user_path)
    log.debug("config: %s %s", user_path, "read" if data else "absent or empty")
    parse_config(data, str(user_path))
    if workspace is not None:
        project = read_project(workspace)
        log.debug("config: %s %s", workspace / PROJECT_FILE, "read" if project else "absent")
        if project is not None:
            parse_config(project.data, PROJECT_FILE)
            if "sandbox" in project.data:
                raise BadInputError(
                    f"{workspace / PROJECT_FILE}: [sandbox] is a user setting (a project must not loosen its own "
                    f"containment); move it to {user_path}"
                )
            if project.needs_trust():
                log.info("config: %s is not trusted; ignoring %s", project.path, ", ".join(project.sensitive_names()))
            data = _merge(data, project.effective())
    return parse_config(data, f"{user_path} + {PROJECT_FILE}")
