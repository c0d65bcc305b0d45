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

from worktrial.engine.containers import image_differences, plan_containers
from worktrial.engine.run import RunOptions, measured_request
from worktrial.engine.session import (
    Recorded,
    ResolvedWorkspace,
    RunObserver,
    RunResult,
    Session,
    SessionStart,
    agent_of,
    check_counts,
    end_previous,
    meta_concurrency,
    resolve_workspace,
    run_session,
    session_jobs,
    state_root_for,
    task_bases,
)
from worktrial.errors import BadInputError, SuiteError
from worktrial.isolation.container import ContainerPlan
from worktrial.isolation.workspace import check_writable, remove_tree
from worktrial.model.run_config import EXECUTION_FLAGS, RunConfig
from worktrial.model.selection import reselect
from worktrial.model.suite import LoadedSuite, load_suite
from worktrial.state.config import load_config
from worktrial.state.store import RunMeta, RunStore


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


def given_config(options: RunOptions, stored: RunConfig) -> tuple[RunConfig, set[str]]:
    """The config these options ask for, and which of its fields they set (a flag left out keeps the stored value;
    ``--max-turns`` and the like change only their own agent setting)."""
    given = measured_request(options)
    if "agent_settings" in given:
        given["agent_settings"] = {**stored.agent_settings, **given["agent_settings"]}
    return stored.model_copy(update=given), set(given)


def _resume(
    store: RunStore, run_id: str, options: RunOptions, loaded: LoadedSuite | None, observer: RunObserver
) -> RunResult:
    meta = store.meta()
    config = meta.config
    check_counts(config.attempts, config.k, meta.jobs, meta.retry_errors, source=str(store.dir / "run.json"))
    if loaded is None:
        loaded = stored_suite(run_id, options.workspace).loaded
    loaded = reselect(loaded, meta.selection)
    ws = resolve_workspace(loaded, Path(meta.workspace))
    bases = task_bases(loaded, ws)
    loaded = config.timeout_multipliers.apply(loaded)
    containers = plan_containers(
        loaded,
        options.container_runtime,
        observer.warning,
        force_build=config.force_build,
        verifier_room=config.verifier_room,
    )
    _refuse_changes(run_id, meta, options, loaded, ws, {t: b.commit for t, b in bases.items()}, containers)
    end_previous(ws.state_root, observer, own=store.dir)
    if meta.work_root:
        _remove_crashed_work_root(Path(meta.work_root), run_id, observer)
    stored_records = store.load_records(meta)
    if (warning := stored_records.warning()) is not None:
        observer.warning(warning)
    ref = agent_of(config, options.base_url or config.base_url, load_config(ws.state_root))
    check_writable(store.dir, "run data")
    sandbox = config.sandbox if config.sandbox is not None else options.sandbox
    jobs, auto = session_jobs(options.jobs, options.max_jobs, options.probe, (meta.jobs, meta.concurrency))
    check_counts(config.attempts, config.k, jobs, meta.retry_errors, max_jobs=options.max_jobs)
    session = Session(
        run_id, loaded, ws, bases, config, ref, sandbox, containers, jobs, options.executor,
        options.keep_worktrees, options.max_cost, options.allow_unpriced, auto,
    )  # fmt: skip

    def record(start: SessionStart) -> Recorded:
        if meta.budget is not None:  # what attempts the budget ended spent: they run again, the money is gone
            start.budget.unrecorded = meta.budget.spent_unrecorded
        earlier = meta.sandboxes or ([meta.sandbox] if meta.sandbox is not None else [])
        update = {
            "jobs": session.jobs,
            "concurrency": meta_concurrency(meta.concurrency, session.auto),
            "retry_errors": options.retry_errors or meta.retry_errors,
            "agent_description": start.description,
            "work_root": str(start.work_root),
            "sandbox": meta.sandbox or start.main_sandbox(),
            "sandboxes": start.sandboxes(earlier),
            "lifted": False,  # the config is stored from now on, as this session runs it
        }
        updated = meta.model_copy(update=update)
        store.write_meta(updated)
        return Recorded(store, updated, stored_records.records)

    return run_session(session, observer, record)


def _refuse_changes(
    run_id: str,
    meta: RunMeta,
    options: RunOptions,
    loaded: LoadedSuite,
    ws: ResolvedWorkspace,
    task_commits: dict[str, str],
    containers: ContainerPlan | None,
) -> None:
    """Refuse, listing every difference, what would measure something other than the stored run."""
    wanted, given = given_config(options, meta.config)
    differences = _suite_differences(loaded, ws.base_commit, task_commits, meta)
    differences += meta.config.differences(wanted, given)
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
            f"pass --base-url {meta.config.base_url} with them again to resume"
        )


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
