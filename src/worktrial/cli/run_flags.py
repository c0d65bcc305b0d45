"""eval's and resume's flags -> ``RunOptions``: a flag whose name is a ``RunOptions`` field fills that field as it is;
the few others are read here (the repeated --agent/--model of a matrix, --no-artifacts, the builtin agent's
settings, the sandbox flags, the executor's). A new flag named like its field needs no line here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worktrial.cli.executors import executor_factory

if TYPE_CHECKING:
    from worktrial.engine.run import RunOptions

AGENT_SETTINGS = ("max_turns", "max_tokens", "temperature")
"""Flags that become ``agent_settings`` entries of the same name (when given)."""
_OWN_RULE = {"agent", "model", "executor", "sandbox", "timeout_multipliers"}


@dataclass(frozen=True)
class Printing:
    """Where and how a command prints its report (never part of what a run measures or how it runs)."""

    fmt: str = "auto"
    output: Path | None = None
    junit: Path | None = None
    quiet: bool = False
    reasons: bool = False
    wide: bool = False

    @classmethod
    def of(cls, flags: Mapping[str, Any]) -> Printing:
        return cls(
            fmt=flags.get("fmt", "auto"),
            output=flags.get("output"),
            junit=flags.get("junit"),
            quiet=flags.get("quiet", False),
            reasons=flags.get("verbose", False),
            wide=flags.get("wide", False),
        )


def run_options(flags: Mapping[str, Any]) -> RunOptions:
    """The options these flags ask for (flags not given keep the option's default)."""
    from worktrial.engine.confine import SandboxChoice
    from worktrial.engine.run import RunOptions

    names = {f.name for f in dataclasses.fields(RunOptions)} - _OWN_RULE
    values: dict[str, Any] = {name: flags[name] for name in names if name in flags}
    agents, models = flags.get("agent") or (), flags.get("model") or ()
    values["agent"] = agents[0] if agents else None
    values["model"] = models[0] if models else None
    values["tasks"] = flags.get("task_patterns", ())
    if "no_artifacts" in flags:
        values["artifacts"] = not flags["no_artifacts"]
    values["agent_settings"] = {key: flags[key] for key in AGENT_SETTINGS if flags.get(key) is not None}
    values["sandbox"] = SandboxChoice(
        flags.get("sandbox"), flags.get("network"), flags.get("max_memory"), flags.get("max_procs"),
        flags.get("sandbox_show", ()),
    )  # fmt: skip
    multipliers = {phase: flags.get(f"{phase}_timeout_multiplier") for phase in ("agent", "verifier")}
    multipliers["build"] = flags.get("environment_build_timeout_multiplier")
    if flags.get("timeout_multiplier") is not None or any(v is not None for v in multipliers.values()):
        from worktrial.model.run_config import TimeoutMultipliers

        values["timeout_multipliers"] = TimeoutMultipliers(all=flags.get("timeout_multiplier") or 1.0, **multipliers)
    values["executor"] = executor_factory(
        flags["executor"], flags["ray_address"], flags["ray_cpus_per_attempt"], flags["ray_resources"]
    )
    return RunOptions(**values)
