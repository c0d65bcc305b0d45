"""The builtin agent's settings: defaults, overlaid by config ``[agents.builtin]``, overlaid by command-line flags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worktrial.errors import BadInputError


class BuiltinSettings(BaseModel):
    """Budgets and knobs of one builtin-agent configuration (recorded in the envelope, so no secrets here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int = Field(50, ge=1)
    """Model calls per attempt; reaching it ends the attempt with no claim."""
    max_tokens: int | None = Field(None, ge=1)
    """Total tokens (input + output, summed over calls) per attempt; None means no token budget."""
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    """Sampling temperature; None leaves the provider's default."""
    max_output_tokens: int | None = Field(None, ge=1)
    """Tokens per model response; None leaves the provider's default (Anthropic requires one: 8192)."""
    context_window: int | None = Field(None, ge=1024)
    """The model's context size in tokens; None uses the preset's default (128k cloud, 32k local)."""
    bash_timeout_secs: float = Field(120.0, gt=0)
    """Per bash call; also bounded by the attempt's deadline."""
    tool_output_bytes: int = Field(16_000, ge=1_000)
    """A tool result larger than this keeps its head and tail."""
    request_timeout_secs: float = Field(600.0, gt=0)
    """Per HTTP request to the provider; also bounded by the attempt's deadline."""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries the SDK makes on 408/409/429/5xx and connection errors, with its own backoff."""


def load_settings(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> BuiltinSettings:
    """Settings from config ``[agents.builtin]`` and command-line ``overrides`` (unset flags are None)."""
    agents = config.get("agents", {})
    section = agents.get("builtin", {}) if isinstance(agents, dict) else {}
    if not isinstance(section, dict):
        raise BadInputError("config: [agents.builtin] must be a table")
    merged = dict(section)
    merged.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return BuiltinSettings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}" for err in exc.errors()
        )
        raise BadInputError(f"builtin agent settings ([agents.builtin] or flags): {problems}") from None
