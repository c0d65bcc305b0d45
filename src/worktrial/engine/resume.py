"""Continuing a stored run: reload its frozen config whole, refuse what would change it, run what is missing.

A resumed run is a new session of the same run. Everything that decides what the run measures comes from its
stored ``RunConfig``; the flags of this session may only change how it executes (``EXECUTION_FLAGS``). A flag that
would change the measurement is refused with one line naming every such field. The session's containment is
recorded beside the earlier ones and in each of its attempts, so a run resumed under other containment says so.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.engine.confine import SandboxChoice, requested_sandbox
from worktrial.engine.containers import image_differences, plan_containers, with_agent_tools
from worktrial.engine.run import (
    RunObserver,
    RunOptions,
    RunResult,
    agent_ref,
    check_counts,
    choose_agent_name,
    end_previous,
    execute,
    new_budget,
    refuse_remote,
    resolve_run_sandbox,
    resolve_workspace,
    session_settings,
    started,
    state_root_for,
    task_bases,
    with_session,
)
from worktrial.errors import BadInputError, SuiteError
from worktrial.isolation.workspace import check_writable, remove_tree
from worktrial.model.run_config import EXECUTION_FLAGS, RunConfig, SandboxRequest
from worktrial.model.selection import reselect
from worktrial.model.suite import LoadedSuite, load_suite
from worktrial.state.config import load_config
from worktrial.state.store import RunMeta, RunStore
from worktrial.util import public_url


def resume_run(
    run_id: str,
    options: RunOptions | None = None,
    loaded: LoadedSuite | None = None,
    observer: RunObserver | None = None,
) -> RunResult:
    """Run only the attempts a stored run is missing, then report on the whole run.

    Refuses, listing every difference, when the suite digest, base commit or anything the run's config froze
    (agent, model, attempts, k, selection, sandbox, ...) would differ.
    """
    options = options or RunOptions()
    observer = observer or RunObserver()
    store = RunStore.open(state_root_for(options.workspace), run_id, writer=True)
    try:
        return _resume(store, run_id, options, loaded, observer)
    finally:
        store.close()


@dataclass(frozen=True)
class StoredSuite:
    """The suite file a stored run names, as it is now, and what the run recorded about it."""

    loaded: LoadedSuite
    workspace: Path
    unchanged: bool
    """The file still has the digest the run started with (else resume refuses, listing the differences)."""


def stored_suite(run_id: str, workspace: Path | None = None) -> StoredSuite:
    """The suite a stored run was started from, for the trust check before ``resume`` runs its commands."""
    meta = RunStore.open(state_root_for(workspace), run_id).meta()
    try:
        loaded = load_suite(meta.suite_path)
    except SuiteError as exc:
        raise BadInputError(f"cannot resume {run_id}: {exc}") from None
    unchanged = loaded.sha256 == meta.suite_sha256 and loaded.digest == (meta.suite_bundle_sha256 or meta.suite_sha256)
    return StoredSuite(loaded, Path(meta.workspace), unchanged)


def stored_config(meta: RunMeta) -> RunConfig:
    """The run's frozen config; for a run stored before configs were, the same fields from its run.json."""
    if meta.config is not None:
        return meta.config
    selection = meta.selection
    return RunConfig(
        agent=meta.agent,
        agent_cmd=meta.agent_cmd,
        model=meta.model,
        base_url=meta.base_url,
        agent_settings=dict(meta.agent_settings),
        pass_env=tuple(meta.pass_env),
        attempts=meta.attempts,
        k=meta.k,
        verify_always=meta.verify_always,
        artifacts=meta.artifacts,
        label=meta.label,
        tasks=tuple(selection.tasks) if selection else (),
        categories=tuple(selection.categories) if selection else (),
        limit=selection.limit if selection else None,
    )


def given_config(options: RunOptions, stored: RunConfig) -> tuple[RunConfig, set[str]]:
    """The config these flags ask for, and which of its fields they set (a flag left out keeps the stored value).

    A flag counts as given when it differs from ``RunOptions``' default: the command line and the Python API
    are judged alike.
    """
    given: dict[str, Any] = {}
    if options.agent or options.agent_cmd or options.model:
        given["agent"] = choose_agent_name(options)
    if options.agent_cmd is not None:
        given["agent_cmd"] = options.agent_cmd
    if options.model is not None:
        given["model"] = options.model
    if options.base_url is not None:
        given["base_url"] = public_url(options.base_url)
    if options.agent_settings:
        given["agent_settings"] = {**stored.agent_settings, **options.agent_settings}
    if options.pass_env:
        given["pass_env"] = tuple(options.pass_env)
    if options.attempts is not None:
        given["attempts"] = options.attempts
    if options.k is not None:
        given["k"] = options.k
    if options.verify_always:
        given["verify_always"] = True
    if not options.artifacts:
        given["artifacts"] = False
    if options.label is not None:
        given["label"] = options.label
    if options.tasks:
        given["tasks"] = tuple(options.tasks)
    if options.categories:
        given["categories"] = tuple(options.categories)
    if options.limit is not None:
        given["limit"] = options.limit
    if options.grace_secs is not None:
        given["grace_secs"] = options.grace_secs
    if options.max_cost_per_attempt is not None:
        given["max_cost_per_attempt"] = options.max_cost_per_attempt
    if options.trajectories is not None:
        given["trajectories"] = options.trajectories
    request = requested_sandbox(options.sandbox)
    if request.model_fields_set:
        given["sandbox"] = request
    return stored.model_copy(update=given), set(given)


def resumed_options(config: RunConfig, options: RunOptions) -> RunOptions:
    """This session's options: the stored config whole, and the execution fields of the flags given now."""
    return RunOptions(
        agent=config.agent,
        agent_cmd=config.agent_cmd,
        model=config.model,
        base_url=options.base_url or config.base_url,
        agent_settings=config.agent_settings,
        pass_env=config.pass_env,
        attempts=config.attempts,
        k=config.k,
        workspace=options.workspace,
        verify_always=config.verify_always,
        keep_worktrees=options.keep_worktrees,
        jobs=options.jobs,
        retry_errors=options.retry_errors,
        executor=options.executor,
        artifacts=config.artifacts,
        label=config.label,
        tasks=config.tasks,
        categories=config.categories,
        limit=config.limit,
        sandbox=options.sandbox if config.sandbox is None else SandboxChoice(),
        grace_secs=config.grace_secs,
        max_cost_per_attempt=config.max_cost_per_attempt,
        max_cost=options.max_cost,
        allow_unpriced=options.allow_unpriced,
        trajectories=config.trajectories,
    )


def _resume(
    store: RunStore, run_id: str, options: RunOptions, loaded: LoadedSuite | None, observer: RunObserver
) -> RunResult:
    meta = store.meta()
    check_counts(meta.attempts, meta.k, meta.jobs, meta.retry_errors, source=str(store.dir / "run.json"))
    if loaded is None:
        loaded = stored_suite(run_id, options.workspace).loaded
    loaded = reselect(loaded, meta.selection)
    ws = resolve_workspace(loaded, Path(meta.workspace))
    bases = task_bases(loaded, ws)
    config = stored_config(meta)
    wanted, given = given_config(options, config)
    differences = _suite_differences(loaded, ws.base_commit, {t: b.commit for t, b in bases.items()}, meta)
    differences += config.differences(wanted, given)
    containers = plan_containers(loaded, options.container_runtime, observer.warning)
    differences += image_differences(containers, meta.environment_images)
    if differences:
        raise BadInputError(
            f"cannot resume run {run_id}; it differs from the stored run: {'; '.join(differences)} "
            f"(a resumed run measures what it started with; only how it runs may change: "
            f"{', '.join(f.split(' ')[0] for f in EXECUTION_FLAGS)}; start a new run to measure something else)"
        )
    if meta.base_url_redacted and options.base_url is None:
        raise BadInputError(
            f"run {run_id} used a base URL with credentials in it, which were not stored; "
            f"pass --base-url {meta.base_url} with them again to resume"
        )
    end_previous(ws.state_root, observer, own=store.dir)
    if meta.work_root:
        _remove_crashed_work_root(Path(meta.work_root), run_id, observer)
    stored_records = store.load_records(meta)
    if (warning := stored_records.warning()) is not None:
        observer.warning(warning)
    session = resumed_options(config, options)
    ref = agent_ref(session, load_config(ws.state_root))
    jobs = options.jobs or meta.jobs
    check_writable(store.dir, "run data")
    with started(run_id, jobs, session) as (executor, work_root):
        request: SandboxChoice | SandboxRequest = config.sandbox if config.sandbox is not None else options.sandbox
        description = executor.preflight(ref)  # bad agent input is one line, before any sandbox warning
        refuse_remote(containers, executor)
        containers = with_agent_tools(containers, description, observer.warning)
        sandbox = resolve_run_sandbox(request, session.base_url, ref, ws, work_root, bases, observer)
        budget = new_budget(session, config, ref.name, description)
        if meta.budget is not None:  # what attempts the budget ended spent: they run again, the money is gone
            budget.unrecorded = meta.budget.spent_unrecorded
        earlier = meta.sandboxes or ([meta.sandbox] if meta.sandbox is not None else [])
        meta = meta.model_copy(
            update={
                "jobs": jobs,
                "retry_errors": options.retry_errors or meta.retry_errors,
                "agent_description": description,
                "work_root": str(work_root),
                "sandbox": meta.sandbox or sandbox.info,
                "sandboxes": with_session(earlier, sandbox.info),
                "config": config,
            }
        )
        store.write_meta(meta)
        settings = session_settings(
            loaded, meta, ws, ref, work_root, options.keep_worktrees, bases, store.dir, sandbox, containers
        )
        return execute(settings, executor, store, observer, done=stored_records.records, budget=budget)


def _suite_differences(loaded: LoadedSuite, base_commit: str, task_commits: dict[str, str], meta: RunMeta) -> list[str]:
    """Why the suite file and the repository would not continue the stored run (empty when they would)."""
    differences = []
    if loaded.sha256 != meta.suite_sha256:
        differences.append(f"suite digest: stored {meta.suite_sha256[:12]}, now {loaded.sha256[:12]} ({loaded.path})")
    elif loaded.digest != (meta.suite_bundle_sha256 or meta.suite_sha256):
        stored_digest = meta.suite_bundle_sha256 or meta.suite_sha256
        differences.append(
            f"suite bundle digest: stored {stored_digest[:12]}, now {loaded.digest[:12]} "
            f"(a file the suite declares in `files` changed)"
        )
    if base_commit != meta.base_commit:
        differences.append(f"base commit: stored {meta.base_commit[:12]}, now {base_commit[:12]}")
    moved = [
        f"{task_id} (stored {meta.task_base_commits[task_id][:12]}, now {commit[:12]})"
        for task_id, commit in task_commits.items()
        if task_id in meta.task_base_commits and meta.task_base_commits[task_id] != commit
    ]
    if moved:
        differences.append(f"task base commits: {', '.join(moved[:5])}")
    return differences


def _remove_crashed_work_root(path: Path, run_id: str, observer: RunObserver) -> None:
    """Remove the worktrees a crashed run left behind, but only a directory this harness made for this run.

    run.json is signed, but a run stored before signing (or a copied one) could name any directory: only a
    real directory (not a symlink) owned by this user and named ``worktrial-<run id>-...`` is removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        observer.warning(f"leaving {path} alone: {exc.strerror}")
        return
    ours = (
        path.is_absolute()
        and path.name.startswith(f"worktrial-{run_id}-")
        and stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
    )
    if not ours:
        observer.warning(f"leaving {path} alone: it is not a work directory this harness created for run {run_id}")
        return
    remove_tree(path)
