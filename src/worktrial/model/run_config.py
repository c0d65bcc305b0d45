"""A run's frozen config: everything that decides what the run measures, stored whole in run.json.

A run is started from flags (``RunOptions``) and the suite; what of them decides the measurement is frozen here at
the start. ``resume`` reloads it whole: a flag that would change it is refused, field by field; only the
execution fields (``EXECUTION_FLAGS``) may differ between the sessions of one run.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from worktrial.model.defaults import DEFAULT_GRACE_SECS as DEFAULT_GRACE_SECS  # re-exported: its old home

EXECUTION_FLAGS = (
    "--jobs",
    "--executor",
    "--ray-address",
    "--ray-cpus-per-attempt",
    "--ray-resource",
    "--retry-errors",
    "--max-cost",
    "--allow-unpriced",
    "--keep-worktrees",
    "--format",
    "--output",
    "--junit",
    "--quiet",
    "--verbose",
    "--base-url (only to give again the credentials a base URL held; they are never stored)",
)
"""What may change when a run is resumed: how it executes and where it prints, never what it measures."""


class SandboxRequest(BaseModel):
    """The containment a run asked for, after the user's config was applied (so a later config edit cannot
    change what a resumed run asks for). What this machine could give is recorded per session (``SandboxInfo``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["auto", "on", "off"] = "auto"
    network: Literal["on", "off", "host"] = "on"
    max_memory: int | None = Field(default=None, description="Bytes per attempt; None: no limit.")
    max_procs: int | None = None
    show: tuple[str, ...] = Field(default=(), description="--sandbox-show paths, absolute.")


class RunConfig(BaseModel):
    """What a run measures, besides the suite file and the base commit (both pinned by digest in run.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    agent_cmd: str | None = None
    model: str | None = None
    base_url: str | None = Field(default=None, description="Without credentials (user info, query, fragment).")
    agent_settings: dict[str, Any] = Field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    attempts: int
    k: int
    verify_always: bool = False
    artifacts: bool = True
    label: str | None = None
    tasks: tuple[str, ...] = Field(default=(), description="--task patterns.")
    categories: tuple[str, ...] = ()
    limit: int | None = None
    grace_secs: float = Field(
        default=DEFAULT_GRACE_SECS, description="--grace-secs: between SIGTERM and SIGKILL at a deadline."
    )
    max_cost_per_attempt: float | None = Field(default=None, description="--max-cost-per-attempt in USD.")
    sandbox: SandboxRequest | None = Field(
        default=None, description="None only in runs stored before the config was frozen: the defaults apply then."
    )

    def differences(self, given: RunConfig, fields: set[str]) -> list[str]:
        """``--flag: stored X, given Y`` for every field in ``fields`` where ``given`` differs from this config."""
        lines = []
        for name in sorted(fields, key=list(RunConfig.model_fields).index):
            if name == "sandbox":
                lines += _sandbox_differences(self.sandbox, given.sandbox)
                continue
            stored, now = getattr(self, name), getattr(given, name)
            if stored != now:
                lines.append(f"{FLAG_OF[name]}: stored {_show(stored)}, given {_show(now)}")
        return lines


FLAG_OF = {
    "agent": "--agent",
    "agent_cmd": "--agent-cmd",
    "model": "--model",
    "base_url": "--base-url",
    "agent_settings": "--max-turns/--max-tokens/--temperature",
    "pass_env": "--pass-env",
    "attempts": "--attempts",
    "k": "--k",
    "verify_always": "--verify-always",
    "artifacts": "artifacts (--no-artifacts)",
    "label": "--label",
    "tasks": "--task",
    "categories": "--category",
    "limit": "--limit",
    "grace_secs": "--grace-secs",
    "max_cost_per_attempt": "--max-cost-per-attempt",
}
"""The flag that sets each measured field, to name it when a resume would change it."""

_SANDBOX_FLAG_OF = {
    "mode": "--sandbox",
    "network": "--network",
    "max_memory": "--max-memory",
    "max_procs": "--max-procs",
    "show": "--sandbox-show",
}


def _sandbox_differences(stored: SandboxRequest | None, given: SandboxRequest | None) -> list[str]:
    if stored is None or given is None:
        return []
    return [
        f"{flag}: stored {_show(getattr(stored, name))}, given {_show(getattr(given, name))}"
        for name, flag in _SANDBOX_FLAG_OF.items()
        if name in given.model_fields_set and getattr(stored, name) != getattr(given, name)
    ]


def _show(value: object) -> str:
    if value is None or value == () or value == {}:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)
