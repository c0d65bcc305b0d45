"""User and project configuration, and where worktrial keeps user state.

Configuration is TOML: ``<config dir>/config.toml`` (the user's) overlaid by ``worktrial.toml`` at the
workspace root (the project's). Tables merge key by key, the project winning, so a project can add an
``[agents.NAME]`` or ``[pricing."provider/model"]`` entry without repeating the user's; the project's settings that
run programs or route credentials count only once its file is trusted (``worktrial.state.project``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.model.config import Config, parse_config
from worktrial.state.dirs import cache_dir, config_dir
from worktrial.state.project import PROJECT_FILE, read_project
from worktrial.state.userconfig import USER_FILE, read_user_config, user_config_path

__all__ = ["PROJECT_FILE", "USER_FILE", "cache_dir", "config_dir", "load_config"]
log = logging.getLogger(__name__)


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
    user_path = user_config_path()
    data, _user = read_user_config()
    log.debug("config: %s %s", user_path, "read" if data else "absent or empty")
    if workspace is not None:
        project = read_project(workspace)
        log.debug("config: %s %s", workspace / PROJECT_FILE, "read" if project else "absent")
        if project is not None:
            parse_config(project.data, PROJECT_FILE)
            for table, why in (
                ("sandbox", "must not loosen its own containment"),
                ("trust", "cannot vouch for itself"),
            ):
                if table in project.data:
                    raise BadInputError(
                        f"{workspace / PROJECT_FILE}: [{table}] is a user setting (a project {why}); "
                        f"move it to {user_path}"
                    )
            if project.needs_trust():
                log.info("config: %s is not trusted; ignoring %s", project.path, ", ".join(project.sensitive_names()))
            data = _merge(data, project.effective())
    return parse_config(data, f"{user_path} + {PROJECT_FILE}")
