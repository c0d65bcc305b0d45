"""Environment setup: run a suite's ``environment.setup`` once in a fresh checkout and make its result the base.

Creating a virtual environment or running ``npm ci`` for every attempt costs seconds to minutes each time, and
files written by setup would show up to the agent as uncommitted changes (``git status`` would give a planted bug
away). So setup runs once per slot, on the pinned commit, and everything it left in the tree — ignored files
included — is committed in the slot's private repository as a commit without parent (its history would show what
setup changed). Every attempt then starts from that commit: a clean ``git status``, the setup's files part of the
base, and the slot's reset restoring them.

The commit's objects are moved out of the private repository's object store into ``<workspace>/env-objects``
(linked through ``objects/info/alternates``), because a slot reset throws away every object written in the
private repository — the agent's included — and the base must survive that.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from worktrial.errors import WorktrialError
from worktrial.isolation import safefs
from worktrial.isolation.alternates import read_alternates, write_alternates
from worktrial.isolation.env_cache import EnvironmentCache, entry_key
from worktrial.isolation.proc import ProcessScope, ProcResult, run_command
from worktrial.isolation.workspace import ATTEMPT_BRANCH, AttemptWorkspace, git, remove_tree
from worktrial.model.commands import display
from worktrial.model.suite import Environment

ENV_OBJECTS = "env-objects"
OUTPUT_TAIL_CHARS = 2000
COMMIT_MESSAGE = "task base"
BASE_REF = "refs/worktrial/base"
_IDENTITY = ["-c", "user.name=worktrial", "-c", "user.email=environment@worktrial.invalid"]
_CONFIG_LIMIT = 1024 * 1024


class EnvironmentSetupError(WorktrialError):
    """Environment setup failed: an infrastructure problem that would repeat on every attempt, so it stops the run."""

    def __init__(self, message: str, output_tail: str) -> None:
        super().__init__(message)
        self.output_tail = output_tail


def _output(result: ProcResult) -> str:
    text = result.stdout_tail.decode("utf-8", "replace") + result.stderr_tail.decode("utf-8", "replace")
    return text[-OUTPUT_TAIL_CHARS:]


def _log(log: Path | None, text: str) -> None:
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(text)


def run_setup(
    ws: AttemptWorkspace,
    environment: Environment | None,
    env: Mapping[str, str],
    *,
    scope: ProcessScope | None = None,
    log: Path | None = None,
    hide: tuple[str, ...] = (),
    cache: EnvironmentCache | None = None,
) -> str:
    """Run the setup commands in ``ws``'s worktree, commit the result, and return the new base commit.

    ``hide`` lists paths (relative to the worktree) removed before setup: the suite's own directory when it is
    committed in the repository under test, so hidden tests and solutions are not in the agent's checkout.
    Raises EnvironmentSetupError (with the tail of the failing command's output) when a command fails or
    times out, or when the result cannot be committed.
    """
    for rel in hide:
        remove_tree(ws.worktree / rel)
    harness_config = _read_config(ws)
    key = None
    pinned = ""
    if cache is not None and environment is not None:
        pinned = _head(ws)
        key = entry_key(ws, environment, hide)
        if key is not None and cache.restore(key, ws):
            _log(log, f"restored from the environment cache ({key[:12]}), setup commands not run\n")
            return commit_result(ws, scope)
    commands = environment.setup if environment is not None else []
    timeout = environment.timeout_secs if environment is not None else 0
    for i, command in enumerate(commands, start=1):
        _log(log, f"$ {display(command)}\n")
        result = run_command(command, cwd=ws.worktree, env=env, timeout=timeout, scope=scope)
        output = _output(result)
        _log(log, output + ("" if output.endswith("\n") or not output else "\n") + f"[exit {result.returncode}]\n")
        if not result.ok:
            why = f"timed out after {timeout}s" if result.timed_out else result.describe_failure(display(command))
            raise EnvironmentSetupError(
                f"environment setup failed at step {i} ({display(command)}): {why}; output tail:\n{output.rstrip()}",
                output,
            )
    # The setup commands are the repository's code and could write the private repository's config (a clean
    # filter, an fsmonitor command) for the harness's git to run: it goes back to what the harness wrote.
    _restore_config(ws, harness_config)
    commit = commit_result(ws, scope)
    if cache is not None and key is not None:
        cache.store(key, ws, pinned, commit, hide, ws.root / ENV_OBJECTS)
    return commit


def _head(ws: AttemptWorkspace) -> str:
    result = git(["-C", str(ws.worktree), "rev-parse", "HEAD"], ws.worktree, foreign_owner=True)
    return result.stdout_tail.decode().strip() if result.ok else ""


def _read_config(ws: AttemptWorkspace) -> bytes | None:
    try:
        return safefs.read_regular(ws.git_dir / "config", _CONFIG_LIMIT)
    except (OSError, ValueError):
        return None


def _restore_config(ws: AttemptWorkspace, config: bytes | None) -> None:
    if config is None:
        return
    with safefs.opened_dir(ws.git_dir, ws.git_dir_id) as git_fd:
        safefs.write_at(git_fd, "config", config)
        safefs.remove_at(git_fd, "info")  # attributes and excludes the setup may have written for the commit


def commit_result(ws: AttemptWorkspace, scope: ProcessScope | None = None) -> str:
    """Commit everything in the worktree (ignored files too) as the new base, with objects kept out of reach.

    The commit has no parent: a child of the pinned commit would show what setup changed (``git show HEAD`` of a
    planted bug is its fix; of a hidden suite directory, the hidden tests), so the agent's repository holds one
    commit whose diff is the whole tree. The branch and ``refs/worktrial/base`` name it; no reflog remembers the
    pinned commit.

    With a sandboxed ``scope`` git runs inside the sandbox: the tree is what the repository's setup left (its
    ``.gitattributes`` included), so whatever it makes git run stays contained."""
    quiet = ["-c", "core.untrackedCache=false", "-c", "core.fsmonitor=false", "-C", str(ws.worktree)]
    tree = _git_line(ws, scope, [*quiet, "add", "--all", "--force", "."], [*quiet, "write-tree"])
    commit = _git_line(ws, scope, [*quiet, *_IDENTITY, "commit-tree", "--no-gpg-sign", "-m", COMMIT_MESSAGE, tree])
    _git_line(
        ws,
        scope,
        [*quiet, "update-ref", "--no-deref", f"refs/heads/{ATTEMPT_BRANCH}", commit],
        [*quiet, "update-ref", "--no-deref", BASE_REF, commit],
    )
    _forget_reflogs(ws)
    _move_objects(ws)
    status = git(
        [*quiet, "status", "--porcelain", "--untracked-files=all"], ws.worktree, foreign_owner=True, scope=scope
    )
    if status.ok and status.stdout_tail.strip():
        first = status.stdout_tail.decode("utf-8", "replace").splitlines()[0]
        raise EnvironmentSetupError(f"environment setup left files git cannot commit (e.g. {first.strip()})", "")
    return commit


def _git_line(ws: AttemptWorkspace, scope: ProcessScope | None, *steps: list[str]) -> str:
    """Run git ``steps`` in order for the environment's commit; the last one's first line of output."""
    result: ProcResult | None = None
    for args in steps:
        result = git(args, ws.worktree, foreign_owner=True, scope=scope)
        if not result.ok:
            detail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
            message = f"cannot commit the environment setup's result: {detail[-1] if detail else 'git failed'}"
            raise EnvironmentSetupError(message, "\n".join(detail[-20:]))
    assert result is not None
    return result.stdout_tail.decode().strip()


def _forget_reflogs(ws: AttemptWorkspace) -> None:
    """Reflogs (and ORIG_HEAD) would name the pinned commit, whose diff to the base is what setup changed."""
    with safefs.opened_dir(ws.git_dir, ws.git_dir_id) as git_fd:
        safefs.remove_at(git_fd, "logs")
        safefs.remove_at(git_fd, "ORIG_HEAD")
        safefs.remove_at(git_fd, f"worktrees/{ws.admin}/logs")
        safefs.remove_at(git_fd, f"worktrees/{ws.admin}/ORIG_HEAD")


def _move_objects(ws: AttemptWorkspace) -> None:
    """Move every object the commit wrote into ``env-objects`` and add that store to the alternates."""
    objects = ws.git_dir / "objects"
    store = ws.root / ENV_OBJECTS
    store.mkdir(exist_ok=True)
    for entry in objects.iterdir():
        if entry.name == "info":
            continue
        target = store / entry.name
        if entry.is_dir():
            target.mkdir(exist_ok=True)
            for item in entry.iterdir():
                os.replace(item, target / item.name)
            shutil.rmtree(entry, ignore_errors=True)
        else:
            os.replace(entry, target)
    stores = read_alternates(objects.parent)
    if store not in stores:
        write_alternates(objects.parent, [store, *stores])
