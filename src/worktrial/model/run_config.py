"""A run's frozen config: everything that decides what the run measures, stored whole (and only) in run.json.

A run is started from flags (``RunOptions``) and the suite; what of them decides the measurement is frozen here at
the start (``engine.run.measured_request`` is the one place an option becomes a field). ``resume`` reloads it
whole: a flag that would change it is refused, field by field, naming the flag each field declares
(``measured``); only the execution fields (``EXECUTION_FLAGS``) may differ between the sessions of one run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticUndefined

from worktrial.model.defaults import DEFAULT_GRACE_SECS as DEFAULT_GRACE_SECS  # re-exported: its old home
from worktrial.model.newer_fields import NewerFieldsOmitted
from worktrial.model.suite import MAX_TIMEOUT_SECS, Environment, LoadedSuite

EXECUTION_FLAGS = (
    "--jobs",
    "--max-jobs",
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


def measured(flag: str, default: Any = PydanticUndefined, **kwargs: Any) -> Any:
    """A measured field and the flag that sets it (``flag_of``): resume names the flag when it would change the
    field; ``tests/test_run_record.py`` checks every field names one."""
    return Field(default, json_schema_extra={"flag": flag}, **kwargs)


def flag_of(model: type[BaseModel], name: str) -> str:
    """The flag that sets field ``name`` of a config model."""
    extra = model.model_fields[name].json_schema_extra
    assert isinstance(extra, dict), f"{model.__name__}.{name} names no flag"
    return str(extra["flag"])


class SandboxRequest(BaseModel):
    """The containment a run asked for, after the user's config was applied (so a later config edit cannot
    change what a resumed run asks for). What this machine could give is recorded per session (``SandboxInfo``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["auto", "on", "off"] = measured("--sandbox", "auto")
    network: Literal["on", "off", "host"] = measured("--network", "on")
    max_memory: int | None = measured("--max-memory", None, description="Bytes per attempt; None: no limit.")
    max_procs: int | None = measured("--max-procs", None)
    show: tuple[str, ...] = measured("--sandbox-show", (), description="--sandbox-show paths, absolute.")


class TimeoutMultipliers(BaseModel):
    """``--timeout-multiplier`` and the per-phase ones (Harbor's flags of the same names): each task's limits are
    multiplied by these for the whole run. A leaderboard submission needs all of them 1 (``export --format harbor``
    checks)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    all: float = Field(default=1.0, gt=0, description="--timeout-multiplier: every phase's limit.")
    agent: float | None = Field(default=None, gt=0, description="--agent-timeout-multiplier (over --timeout-...).")
    verifier: float | None = Field(default=None, gt=0, description="--verifier-timeout-multiplier.")
    build: float | None = Field(default=None, gt=0, description="--environment-build-timeout-multiplier.")

    def factor(self, phase: Literal["agent", "verifier", "build"]) -> float:
        own: float | None = getattr(self, phase)
        return self.all if own is None else own

    @property
    def neutral(self) -> bool:
        return all(self.factor(p) == 1.0 for p in ("agent", "verifier", "build"))

    def apply(self, loaded: LoadedSuite) -> LoadedSuite:
        """The suite with every task's agent, verifier and image-build limits multiplied (its digests unchanged:
        the multipliers are the run's, recorded in its config)."""
        if self.neutral:
            return loaded
        agent, verifier, build = self.factor("agent"), self.factor("verifier"), self.factor("build")

        def scaled(secs: int, factor: float) -> int:
            return min(MAX_TIMEOUT_SECS, max(1, round(secs * factor)))

        def env(environment: Environment | None) -> Environment | None:
            if environment is None:
                return None
            update = {"build_timeout_secs": scaled(environment.build_timeout_secs, build)}
            return environment.model_copy(update=update)

        tasks = [
            t.model_copy(
                update={
                    "timeout_secs": scaled(t.timeout_secs, agent),
                    "verify_timeout_secs": scaled(t.verify_timeout_secs, verifier),
                    "environment": env(t.environment),
                }
            )
            for t in loaded.suite.tasks
        ]
        suite = loaded.suite.model_copy(update={"tasks": tasks, "environment": env(loaded.suite.environment)})
        return dataclasses.replace(loaded, suite=suite)


class RunConfig(NewerFieldsOmitted):
    """What a run measures, besides the suite file and the base commit (both pinned by digest in run.json).

    A new measured flag is a field here (``measured("--flag", default)``), the ``RunOptions`` field of the same
    name (``engine/run.py``) and the click option that fills it (``cli/main.py``); see CONTRIBUTING.md."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    NEWER_FIELDS = ("timeout_multipliers", "force_build", "trajectories", "verifier_room", "reuse")

    agent: str = measured("--agent")
    agent_cmd: str | None = measured("--agent-cmd", None)
    model: str | None = measured("--model", None)
    base_url: str | None = measured("--base-url", None, description="Without credentials (user info, query, fragment).")
    agent_settings: dict[str, Any] = measured("--max-turns/--max-tokens/--temperature", default_factory=dict)
    pass_env: tuple[str, ...] = measured("--pass-env", ())
    attempts: int = measured("--attempts")
    k: int = measured("--k")
    verify_always: bool = measured("--verify-always", False)
    artifacts: bool = measured("artifacts (--no-artifacts)", True)
    label: str | None = measured("--label", None)
    tasks: tuple[str, ...] = measured("--task", (), description="--task patterns.")
    categories: tuple[str, ...] = measured("--category", ())
    limit: int | None = measured("--limit", None)
    grace_secs: float = measured(
        "--grace-secs", DEFAULT_GRACE_SECS, description="--grace-secs: between SIGTERM and SIGKILL at a deadline."
    )
    max_cost_per_attempt: float | None = measured(
        "--max-cost-per-attempt", None, description="--max-cost-per-attempt in USD."
    )
    sandbox: SandboxRequest | None = measured(
        "--sandbox/--network/--max-memory/--max-procs/--sandbox-show",
        None,
        description="None only in runs stored before the config was frozen: the defaults apply then.",
    )
    timeout_multipliers: TimeoutMultipliers = measured(
        "--timeout-multiplier (and the per-phase ones)",
        default_factory=TimeoutMultipliers,
        description="What every task's limits were multiplied by.",
    )
    force_build: bool = measured("--force-build", False, description="Images built from Dockerfiles, not pulled.")
    verifier_room: Literal["task", "fresh"] = measured(
        "--verifier-room",
        "task",
        description="Where container tasks verified: where each says (task), or in worktrial's fresh room (fresh).",
    )
    trajectories: bool = measured(
        "--trajectories", False, description="Each attempt stores its redacted ATIF trajectory (docs/trajectories.md)."
    )
    reuse: str | None = measured(
        "--reuse",
        None,
        description="The run whose attempts this one carried over or regraded where the suite allowed (its records "
        "say which: ``provenance``).",
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
                lines.append(f"{flag_of(RunConfig, name)}: stored {_show(stored)}, given {_show(now)}")
        return lines


def _sandbox_differences(stored: SandboxRequest | None, given: SandboxRequest | None) -> list[str]:
    if stored is None or given is None:
        return []
    return [
        f"{flag_of(SandboxRequest, name)}: stored {_show(getattr(stored, name))}, given {_show(getattr(given, name))}"
        for name in SandboxRequest.model_fields
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
