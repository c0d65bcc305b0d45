"""The builtin agent's settings: defaults, overlaid by config ``[agents.builtin]``, overlaid by command-line flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from worktrial.errors import BadInputError
from worktrial.model.config import BuiltinSettings, Config, describe_errors

__all__ = ["BuiltinSettings", "load_settings"]


def load_settings(config: Config, overrides: Mapping[str, Any]) -> BuiltinSettings:
    """Settings from config ``[agents.builtin]`` (already validated) and command-line ``overrides`` (unset flags are
    None): only the keys the user wrote are carried over, so a flag wins over config and config over the default."""
    merged = config.builtin.model_dump(exclude_unset=True) if config.builtin is not None else {}
    merged.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return BuiltinSettings.model_validate(merged)
    except ValidationError as exc:
        raise BadInputError(
            describe_errors(exc, "builtin agent settings ([agents.builtin] or flags)", BuiltinSettings)
        ) from None
