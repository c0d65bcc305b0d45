"""A task's definition as digests, part by part: what ``eval --reuse`` compares to decide an attempt's fate.

An attempt depends on two halves of its task. What the agent's run depended on: the prompt and the agent's limit,
the setup (per-attempt ``setup_commands`` and the environment: its setup, its image by id), the tree it started from
(the base commit's tree, the suite's hidden directory left out) and, for the oracle, the solution. What only its
verdict depended on: the verify commands and their settings (``verify_commands``, ``verify_timeout_secs``,
``verify_in``, ``on_timeout``, a container's ``verifier_tests``). The suite's declared files are read by setup and
verify commands alike (``$WORKTRIAL_SUITE_DIR``): they count on the agent's side only where the task runs setup
commands or the agent is the oracle (whose solution may read them), else on the verifier's; those in the task's own
``verifier_tests`` directory, shown to its verifier only, always on the verifier's.

``classify`` says what an old attempt is worth under a new definition: the same task (its record is reused), only
its verifier changed (its stored change is regraded), or the agent's half changed (it runs again). A task's
``digest`` is one SHA-256 over every part, stored per task in run.json.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from worktrial.model.bundle import BundleFile
from worktrial.model.suite import Suite, Task

AGENT_PARTS = ("prompt", "agent_limit", "setup", "environment", "base", "image")
"""Parts the agent's run depended on, for any agent."""
VERIFIER_PARTS = ("verify",)
DIGEST_VERSION = "worktrial-task-digest 1"

Fate = Literal["same", "verifier", "agent"]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _commands(commands: Sequence[Any] | None) -> Any:
    return None if commands is None else [c if isinstance(c, str) else c.model_dump(mode="json") for c in commands]


def task_files(suite: Suite, task: Task, files: Sequence[BundleFile]) -> list[BundleFile]:
    """The declared files that may concern ``task``: all of them but those in another task's ``verifier_tests``
    directory (a Harbor dataset keeps each task's tests in a directory of its own)."""
    others = {
        env.verifier_tests.rstrip("/") + "/"
        for other in suite.tasks
        if other.id != task.id and (env := suite.environment_for(other)) is not None and env.verifier_tests
    }
    own = suite.environment_for(task)
    mine = own.verifier_tests.rstrip("/") + "/" if own is not None and own.verifier_tests else None
    return [f for f in files if not any(f.name.startswith(o) for o in others if o != mine)]


def task_parts(
    suite: Suite, task: Task, files: Sequence[BundleFile], base_tree: str, image: str | None
) -> dict[str, str]:
    """Each part of ``task``'s definition as a digest. ``base_tree``: the digest of the tree its attempts start
    from (``isolation.workspace.tree_digest``); ``image``: its container image id, if any."""
    environment = suite.environment_for(task)
    env = environment.model_dump(mode="json", exclude={"verifier_tests"}) if environment is not None else None
    tests_dir = (
        environment.verifier_tests.rstrip("/") + "/" if environment is not None and environment.verifier_tests else None
    )
    mine = task_files(suite, task, files)
    tests = [f for f in mine if tests_dir is not None and f.name.startswith(tests_dir)]  # shown to the verifier only
    verify = {
        "commands": _commands(task.verify_commands),
        "timeout_secs": task.verify_timeout_secs,
        "verify_in": task.verify_in,
        "on_timeout": task.on_timeout,
        "verifier_tests": environment.verifier_tests if environment is not None else None,
        "tests": sorted((f.name, f.sha256) for f in tests),
    }
    return {
        "prompt": _digest(task.prompt),
        "agent_limit": _digest(task.timeout_secs),
        "setup": _digest(_commands(task.setup_commands)),
        "environment": _digest(env),
        "base": _digest(base_tree),
        "image": _digest(image),
        "solution": _digest(_commands(task.solution)),
        "verify": _digest(verify),
        "files": _digest(sorted((f.name, f.sha256) for f in mine if f not in tests)),
    }


def task_digest(parts: Mapping[str, str]) -> str:
    """One digest over every part (the per-task digest run.json keeps)."""
    return _digest([DIGEST_VERSION, sorted(parts.items())])


def files_reach_agent(suite: Suite, task: Task, agent: str) -> bool:
    """Whether the suite's declared files could shape the agent's run: setup commands read them, or the oracle's
    solution may."""
    environment = suite.environment_for(task)
    setup = bool(task.setup_commands) or (environment is not None and bool(environment.setup))
    return setup or agent == "oracle"


def changed_parts(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The parts whose digests differ (a part one side lacks counts as changed)."""
    return sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))


def classify(old: Mapping[str, str], new: Mapping[str, str], *, agent: str, files_to_agent: bool) -> Fate:
    """What an attempt made under ``old`` is worth under ``new``: ``same`` (nothing changed), ``verifier`` (only
    what decides its verdict changed: regrade its stored change) or ``agent`` (run it again)."""
    changed = set(changed_parts(old, new))
    if agent != "oracle":
        changed.discard("solution")  # only the oracle reads it
    if not changed:
        return "same"
    agent_side = set(AGENT_PARTS) | {"solution"}
    if files_to_agent:
        agent_side.add("files")
    return "agent" if changed & agent_side else "verifier"
