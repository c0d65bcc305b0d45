"""``worktrial check``'s own workspaces: the oracle's result rebuilt on each task's base, and what it reveals.

The rebuild happens exactly as an attempt would see it — the task's repository and commit, its environment set
up once per base and committed, per-attempt setup commands, then the reference solution — and then the verifier
is re-run several times (flakiness) and probed for the classic mistakes of suites written for real
repositories: per-attempt setup that leaves the tree dirty (the agent sees it as uncommitted changes), a verifier
that reads a suite file that is not declared in ``files`` (so not in the digest), and a verifier that still
passes when the files the solution changed are emptied (it reads something outside the worktree and the suite
directory, e.g. an editable install of another checkout, or measures too little). It is also forged, as an agent
would: a verifier that still passes when the files the solution changed only exit 0 as they load (a hidden test
that imports the module under test, whatever interpreter runs it), or when a ``conftest.py``, ``sitecustomize.py``,
``json.py`` or ``pytest.py`` planted in the worktree does, gives its pass to an agent that never solved the task.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from worktrial.analysis.agent_code import forged_by_code_message, forged_by_plants_message
from worktrial.engine.executor import TaskBase
from worktrial.errors import WorktrialError
from worktrial.isolation import childenv, proc
from worktrial.isolation.copying_slot import CopyingSlot
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.isolation.environment import run_setup
from worktrial.isolation.proc import run_command
from worktrial.isolation.workspace import AttemptWorkspace, git, materialize_source
from worktrial.model.bundle import copy_bundle
from worktrial.model.commands import display
from worktrial.model.suite import SUITE_DIR_ENV, LoadedSuite, Task

_MAX_NAMED = 3


@dataclass(frozen=True)
class Rebuild:
    """``rounds[r][i]``: whether verify command i passed in re-run r; ``error`` when the rebuild failed."""

    rounds: list[list[bool]]
    error: str | None = None
    problems: list[str] = field(default_factory=list)
    forgeable: list[str] = field(default_factory=list)
    """How an agent could pass without solving the task, found by forging it (warnings: the suite may accept it)."""


_EXIT_AT_LOAD = {
    **dict.fromkeys((".py",), b"import os\nos._exit(0)\n"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"), b"process.exit(0);\n"),
    **dict.fromkeys((".sh", ".bash"), b"exit 0\n"),
    ".rb": b"exit!(0)\n",
    ".pl": b"exit 0;\n",
    ".pm": b"exit 0;\n",
    ".php": b"<?php exit(0);\n",
    ".lua": b"os.exit(0)\n",
}
"""What a file of each language holds to end the process that loads it with status 0, as an agent's edit could."""
_PLANTED = ("conftest.py", "sitecustomize.py", "json.py", "pytest.py")
"""Python files a verifier may load from the worktree before its own code: pytest's conftest, the site hook, a
module that shadows the standard library's, one that shadows the test runner."""


def _changed_files(worktree: Path) -> list[str]:
    """Paths ``git status`` reports in the worktree (modified, added or untracked), relative to it."""
    result = git(["-C", str(worktree), "status", "--porcelain", "-z", "--untracked-files=all"], worktree)
    if not result.ok:
        return []
    entries = result.stdout_tail.decode("utf-8", "surrogateescape").split("\0")
    return [e[3:] for e in entries if len(e) > 3]


def _modified_tracked(worktree: Path) -> list[str]:
    """Tracked files the worktree changed (not added or deleted ones)."""
    result = git(["-C", str(worktree), "diff", "--name-only", "-z", "--diff-filter=M", "HEAD"], worktree)
    if not result.ok:
        return []
    return [p for p in result.stdout_tail.decode("utf-8", "surrogateescape").split("\0") if p]


def dirty_setup_message(paths: list[str], *, container: bool) -> str:
    """Per-attempt setup commands left files in the tree: one rule, said alike for host and container tasks."""
    where = "into the image (its Dockerfile)" if container else "to `environment.setup`, whose result is committed"
    return (
        f"setup_commands leave the tree dirty ({_named(paths)}): the agent sees them as uncommitted changes (git "
        f"status/diff may give the answer away) and every attempt's patch holds them; move them {where}, or "
        "ignore them in .gitignore"
    )


def _named(paths: list[str]) -> str:
    more = f" and {len(paths) - _MAX_NAMED} more" if len(paths) > _MAX_NAMED else ""
    return ", ".join(paths[:_MAX_NAMED]) + more


class Rebuilder:
    """Slots keyed by task base (the environment is set up once per base), plus the suite's read-only copy."""

    def __init__(
        self,
        loaded: LoadedSuite,
        work_root: Path,
        cache: EnvironmentCache | None,
        scope: proc.ProcessScope | None = None,
    ) -> None:
        self.loaded = loaded
        self.cache = cache
        self.work_root = work_root
        self.scope = scope
        self.suite_copy = work_root / "suite"
        copy_bundle(loaded.path, loaded.files, self.suite_copy)
        self._slots: dict[str, CopyingSlot] = {}

    def env(self, suite_dir: Path | None = None) -> dict[str, str]:
        """The minimal environment suite commands get in a run (``worktrial.isolation.childenv``)."""
        extra = {SUITE_DIR_ENV: str(suite_dir or self.suite_copy)}
        return childenv.command_env(os.environ, self.work_root / "home", extra)

    def _slot(self, base: TaskBase) -> CopyingSlot:
        if base.key not in self._slots:
            source = materialize_source(base.source.kind, base.source.location, self.work_root / "source")
            prepare = None
            if base.prepared:
                env = self.env()

                def prepare(ws: AttemptWorkspace) -> str:
                    return run_setup(ws, base.environment, env, scope=self.scope, hide=base.hide, cache=self.cache)

            self._slots[base.key] = CopyingSlot(
                source, base.commit, self.work_root / f"slot-{len(self._slots)}", prepare
            )
        return self._slots[base.key]

    def close(self) -> None:
        for slot in self._slots.values():
            with contextlib.suppress(WorktrialError, OSError):
                slot.close()

    def rebuild(
        self, task: Task, base: TaskBase, repeats: int, on_progress: Callable[[str, int], None] | None = None
    ) -> Rebuild:
        """Rebuild the oracle's result and re-run every verify command ``repeats`` times on it, then probe it;
        ``on_progress`` hears each step begin (what it is, and how many re-runs have finished)."""
        tell = on_progress or (lambda _activity, _done: None)
        tell("rebuilding the oracle's result", 0)
        try:
            ws = self._slot(base).acquire()
        except (WorktrialError, OSError) as exc:
            return Rebuild([], f"could not prepare the task's workspace: {exc}")
        worktree = ws.worktree
        problems: list[str] = []
        harness_env = self.env()
        for command in task.setup_commands:
            result = run_command(command, cwd=worktree, env=harness_env, timeout=task.verify_timeout_secs)
            if not result.ok:
                return Rebuild(
                    [], f"setup failed when rebuilding the oracle's result: {result.describe_failure(display(command))}"
                )
        dirty = _changed_files(worktree)
        if task.setup_commands and dirty:
            problems.append(dirty_setup_message(dirty, container=False))
        # As the oracle runs solutions in a run: an agent's environment, with the suite directory (shipped patches).
        agent_env = childenv.agent_env(proc.clean_env(None), {SUITE_DIR_ENV: str(self.suite_copy)})
        for command in task.solution or []:
            result = run_command(command, cwd=worktree, env=agent_env, timeout=task.timeout_secs)
            if not result.ok:
                return Rebuild(
                    [],
                    f"solution failed when rebuilding the oracle's result: {result.describe_failure(display(command))}",
                    problems,
                )
        rounds: list[list[bool]] = []
        for n in range(1, repeats + 1):
            tell(f"re-run {n} of {repeats}", n - 1)
            rounds.append(self._verify_each(task, worktree, harness_env))
        tell("probing the verifier", repeats)
        forgeable: list[str] = []
        if not any(all(r) for r in rounds):
            problems += self._undeclared(task, worktree)
        elif all(all(r) for r in rounds):
            forgeable = self._forged(task, worktree, harness_env)
            problems += self._outside(task, worktree, harness_env)
        return Rebuild(rounds, None, problems, forgeable)

    def _verify_each(self, task: Task, worktree: Path, env: dict[str, str]) -> list[bool]:
        return [
            run_command(c, cwd=worktree, env=env, timeout=task.verify_timeout_secs, scope=self.scope).ok
            for c in task.verify_commands
        ]

    def _undeclared(self, task: Task, worktree: Path) -> list[str]:
        """A verifier that fails with the declared files but passes with the whole suite directory reads others."""
        if all(self._verify_each(task, worktree, self.env(self.loaded.suite_dir))):
            return [
                "verify reads a file under the suite directory that is not declared in `files`: it fails with "
                "only the declared files and passes with the whole directory; add it to `files` so the digest "
                "covers it"
            ]
        return []

    def _forged(self, task: Task, worktree: Path, env: dict[str, str]) -> list[str]:
        """Forge the verifier as an agent could, on the oracle's result: the files the solution changed made to
        exit 0 as they load; else, with those files emptied (the task unsolved), Python files planted in the
        worktree that do. A pass either way is one an agent gets without solving the task. The tree is put back
        after each try."""
        changed = [p for p in _changed_files(worktree) if (worktree / p).is_file() and not (worktree / p).is_symlink()]
        code = {
            rel: _EXIT_AT_LOAD[Path(rel).suffix.lower()] for rel in changed if Path(rel).suffix.lower() in _EXIT_AT_LOAD
        }
        if code and self._passes_with(task, worktree, env, code):
            return [forged_by_code_message(sorted(code))]
        if not any(rel.endswith(".py") for rel in changed) and "py" not in " ".join(map(display, task.verify_commands)):
            return []
        unsolved = dict.fromkeys(changed, b"")
        plants = {**unsolved, **dict.fromkeys(_PLANTED, _EXIT_AT_LOAD[".py"])}
        if self._passes_with(task, worktree, env, plants) and not self._passes_with(task, worktree, env, unsolved):
            return [forged_by_plants_message(list(_PLANTED))]
        return []

    def _passes_with(self, task: Task, worktree: Path, env: dict[str, str], files: dict[str, bytes]) -> bool:
        """Whether every verify command passes with ``files`` written into the worktree (then put back)."""
        saved: dict[Path, bytes | None] = {}
        try:
            for rel, data in files.items():
                path = worktree / rel
                if path.is_symlink() or (path.exists() and not path.is_file()):
                    continue
                saved[path] = path.read_bytes() if path.exists() else None
                path.write_bytes(data)
            return all(self._verify_each(task, worktree, env))
        finally:
            for path, before in saved.items():
                if before is None:
                    path.unlink(missing_ok=True)
                else:
                    path.write_bytes(before)

    def _outside(self, task: Task, worktree: Path, env: dict[str, str]) -> list[str]:
        """Empty every tracked file the solution changed; a verifier that still passes is not testing them."""
        targets = _modified_tracked(worktree)
        if not targets:
            return []
        for rel in targets:
            path = worktree / rel
            if path.is_file() and not path.is_symlink():
                path.write_bytes(b"")
        if all(self._verify_each(task, worktree, env)):
            return [
                f"verify still passes after the files the solution changed ({_named(targets)}) are emptied: it "
                "reads something outside the worktree and the suite directory (e.g. an editable install of "
                "another checkout: install into a venv inside the base instead, see docs/suite-format.md) "
                "or measures too little"
            ]
        return []


@contextlib.contextmanager
def rebuilder(loaded: LoadedSuite, work_root: Path, cache: EnvironmentCache | None = None) -> Iterator[Rebuilder]:
    builder = Rebuilder(loaded, work_root, cache)
    try:
        yield builder
    finally:
        builder.close()
