"""The --executor flags: where a run's attempts execute (threads here, or actors on a Ray cluster)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from worktrial.errors import BadInputError
from worktrial.jsonlimits import JsonLimitError, loads_limited

if TYPE_CHECKING:
    from worktrial.engine.executor import Executor
    from worktrial.engine.run import ExecutorFactory

F = TypeVar("F", bound=Callable[..., Any])


def executor_options(func: F) -> F:
    """--executor, --ray-address, --ray-cpus-per-attempt and --ray-resource, shared by eval and resume."""
    options = [
        click.option(
            "--executor",
            type=click.Choice(["local", "ray", "auto"]),
            default="local",
            show_default=True,
            help="Where attempts run: threads here, a Ray cluster, or auto (Ray when $RAY_ADDRESS is set).",
        ),
        click.option(
            "--ray-address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS or a local Ray)."
        ),
        click.option(
            "--ray-cpus-per-attempt",
            type=click.FloatRange(min=0, min_open=True),
            default=1.0,
            show_default=True,
            help="CPUs each Ray worker (one attempt at a time) reserves.",
        ),
        click.option(
            "--ray-resource",
            "ray_resources",
            multiple=True,
            metavar="NAME=AMOUNT",
            help="Custom Ray resource each worker needs, e.g. agent_claude=1 (repeatable), or a JSON object.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def parse_resources(values: tuple[str, ...]) -> dict[str, float]:
    """``NAME=AMOUNT`` pairs or JSON objects, merged; one clear error for anything else."""
    resources: dict[str, float] = {}
    for value in values:
        text = value.strip()
        if text.startswith("{"):
            try:
                loaded = loads_limited(text)
            except json.JSONDecodeError as exc:
                raise BadInputError(f"--ray-resource {value!r} is not valid JSON ({exc.msg})") from None
            except JsonLimitError as exc:
                raise BadInputError(f"--ray-resource {text[:40]!r}...: {exc}") from None
            if not isinstance(loaded, dict):
                raise BadInputError(f"--ray-resource {value!r} must be a JSON object like '{{\"agent_claude\": 1}}'")
            pairs = list(loaded.items())
        else:
            name, sep, amount = text.partition("=")
            if not sep:
                raise BadInputError(f"--ray-resource {value!r} must be NAME=AMOUNT, e.g. agent_claude=1")
            pairs = [(name.strip(), amount.strip())]
        for name, amount in pairs:
            if not isinstance(name, str) or not name or name in ("CPU", "GPU", "memory"):
                raise BadInputError(
                    f"--ray-resource {value!r}: {name!r} is not a custom resource name (use --ray-cpus-per-attempt)"
                )
            try:
                number = float(amount)
            except (TypeError, ValueError):
                raise BadInputError(f"--ray-resource {value!r}: amount {amount!r} is not a number") from None
            if not number > 0:
                raise BadInputError(f"--ray-resource {value!r}: amount must be more than 0")
            resources[name] = number
    return resources


def executor_factory(
    executor: str, ray_address: str | None, cpus_per_attempt: float, ray_resources: tuple[str, ...]
) -> ExecutorFactory:
    """The factory RunOptions.executor takes; Ray is imported only when a Ray executor is chosen."""
    resources = parse_resources(ray_resources)
    use_ray = executor == "ray" or (executor == "auto" and bool(ray_address or os.environ.get("RAY_ADDRESS")))
    if not use_ray:
        if ray_address or resources:
            raise BadInputError("--ray-address and --ray-resource need --executor ray (or auto)")
        from worktrial.engine.run import local_executor

        return local_executor
    from worktrial.engine.ray_executor import RayExecutor, RaySettings, import_ray

    import_ray()  # fail before the run starts when Ray is missing
    settings = RaySettings(address=ray_address, cpus_per_attempt=cpus_per_attempt, resources=resources)

    def ray_executor(jobs: int, work_root: Path, keep_worktrees: bool) -> Executor:
        return RayExecutor(jobs, work_root, keep_worktrees=keep_worktrees, settings=settings)

    return ray_executor
