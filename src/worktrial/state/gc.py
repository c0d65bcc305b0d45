"""``worktrial gc``: remove old runs, the environment cache and worktrial's own container images.

Runs are chosen by age (``older_than_days``, from the start time in the run id) or by count (all but the newest
``keep`` of each suite), and a run goes whole: its directory in the run store, its trace files, the page ``view``
wrote of it alone, and its signing key. A run whose lock a live process holds (it is running, or being resumed)
is never touched: gc holds that lock itself while it removes a run, so no ``resume`` can start on a run half gone.
Nothing under the state root is followed through a symlink: ``.worktrial`` and the directories in it are opened
without following links, a run directory that is a symlink is left alone, and removal unlinks a link, never its
target. The environment cache goes under its own lock (``EnvironmentCache.exclusive``): an attempt restoring an
entry never sees it half removed. Container images, volumes and leftover containers are worktrial's only by name:
images tagged ``localhost/worktrial-env:*`` (an image with another tag of the user's keeps it), the
``worktrial-tools`` volume, containers of a harness that is gone; the runtime refuses what a container still uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from worktrial.errors import BadInputError, WorkspaceError
from worktrial.isolation import container, safefs
from worktrial.isolation.env_cache import EnvironmentCache
from worktrial.state import signing
from worktrial.state.leftovers import PROCESSES_FILE, end_previous
from worktrial.state.store import LOCK_FILE, RUN_FILE, RunMeta, is_run_id

Kind = Literal["run", "environment cache", "image", "volume", "container"]
_MAX_META_BYTES = 16 * 1024 * 1024
_O_LOCK = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Item:
    """One thing gc removed (or, in a dry run, would remove), or left with the reason."""

    kind: Kind
    name: str
    size: int | None = None
    """Bytes on disk (None: unknown)."""
    detail: str = ""
    why_kept: str | None = None


@dataclass
class GcReport:
    removed: list[Item] = field(default_factory=list)
    kept: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(item.size or 0 for item in self.removed)


@dataclass(frozen=True)
class GcOptions:
    older_than_days: float | None = None
    keep: int | None = None
    """Runs to keep per suite, the newest."""
    cache: bool = False
    images: bool = False
    runtime: container.RuntimeChoice = "auto"
    dry_run: bool = False

    def chosen(self) -> bool:
        return self.older_than_days is not None or self.keep is not None or self.cache or self.images


def collect(state_root: Path | None, cache_root: Path, options: GcOptions, now: datetime | None = None) -> GcReport:
    """Remove (or with ``dry_run`` only list) what ``options`` choose; never raises for one thing it cannot remove."""
    if not options.chosen():
        raise BadInputError(
            "say what to remove: --older-than DAYS and/or --keep N (runs), --cache (the environment cache), "
            "--images (worktrial's container images); --dry-run lists it first"
        )
    report = GcReport()
    if options.older_than_days is not None or options.keep is not None:
        if state_root is None:
            report.notes.append("no run store here: no runs to remove")
        else:
            _runs(state_root, options, now or datetime.now(UTC), report)
    if options.cache:
        _environment_cache(cache_root / "environments", options.dry_run, report)
    if options.images:
        _images(options, report)
    return report


# -- runs --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    id: str
    started: datetime
    suite: str


def _started(run_id: str) -> datetime:
    return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


@contextlib.contextmanager
def _state_dirs(state_root: Path) -> Iterator[tuple[int | None, int | None]]:
    """Descriptors of ``.worktrial/runs`` and ``.worktrial/eval/traces`` (None where missing), every component
    opened without following a symlink: a ``.worktrial`` that is a link is refused, not followed."""
    with contextlib.ExitStack() as stack:
        try:
            top = stack.enter_context(safefs.opened_dir(".worktrial", None, dir_fd=_open_root(state_root, stack)))
        except WorkspaceError as exc:
            if not os.path.lexists(state_root / ".worktrial"):
                yield None, None
                return
            raise BadInputError(f"{state_root / '.worktrial'}: {exc}; gc never follows it") from None
        runs = _subdir(stack, top, "runs")
        evals = _subdir(stack, top, "eval")
        yield runs, _subdir(stack, evals, "traces") if evals is not None else None


def _open_root(state_root: Path, stack: contextlib.ExitStack) -> int:
    fd = os.open(state_root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    stack.callback(os.close, fd)
    return fd


def _subdir(stack: contextlib.ExitStack, parent: int, name: str) -> int | None:
    try:
        return stack.enter_context(safefs.opened_dir(name, None, dir_fd=parent))
    except WorkspaceError:
        return None  # missing, or a symlink: nothing of worktrial's is reached through it


def _run_meta(runs_fd: int, run_id: str) -> RunMeta | None:
    try:
        with safefs.opened_dir(run_id, None, dir_fd=runs_fd) as fd:
            data = safefs.read_regular(safefs.fd_path(fd) / RUN_FILE, _MAX_META_BYTES)
        return RunMeta.model_validate_json(data)
    except (OSError, ValueError, ValidationError, WorkspaceError):
        return None


def _listed(runs_fd: int, report: GcReport) -> list[_Run]:
    found = []
    for name in sorted(os.listdir(runs_fd)):
        if not is_run_id(name):
            continue
        if not stat.S_ISDIR(os.lstat(name, dir_fd=runs_fd).st_mode):
            report.kept.append(Item("run", name, why_kept="not a directory (a symlink is never followed)"))
            continue
        meta = _run_meta(runs_fd, name)
        found.append(_Run(name, _started(name), meta.suite_id if meta is not None else "?"))
    return found


def _chosen(runs: list[_Run], options: GcOptions, now: datetime) -> list[tuple[_Run, str]]:
    """Runs older than the limit, and all but the newest ``keep`` of each suite, with why each was chosen. Newest by
    run id: its start time, and for runs started within the same second the id's random part."""
    why: dict[str, str] = {}
    if options.older_than_days is not None:
        limit = now - timedelta(days=options.older_than_days)
        for run in runs:
            if run.started < limit:
                why[run.id] = f"{(now - run.started).days} days old"
    if options.keep is not None:
        by_suite: dict[str, list[_Run]] = {}
        for run in runs:
            by_suite.setdefault(run.suite, []).append(run)
        for listed in by_suite.values():
            for run in sorted(listed, key=lambda r: r.id, reverse=True)[options.keep :]:
                why.setdefault(run.id, f"beyond the newest {options.keep} of its suite")
    return [(run, why[run.id]) for run in runs if run.id in why]


def _runs(state_root: Path, options: GcOptions, now: datetime, report: GcReport) -> None:
    if not options.dry_run:
        end_previous(state_root)  # what killed harnesses left running: ended (as eval does), their journals removed
    with _state_dirs(state_root) as (runs_fd, traces_fd):
        if runs_fd is None:
            report.notes.append(f"no runs stored under {state_root}")
            return
        for run, why in _chosen(_listed(runs_fd, report), options, now):
            try:
                _one_run(runs_fd, traces_fd, state_root, run, why, options.dry_run, report)
            except (OSError, WorkspaceError) as exc:  # gone meanwhile, or a file that cannot be removed
                report.kept.append(Item("run", run.id, detail=why, why_kept=f"could not be removed: {exc}"))


def _one_run(
    runs_fd: int, traces_fd: int | None, state_root: Path, run: _Run, why: str, dry_run: bool, report: GcReport
) -> None:
    with safefs.opened_dir(run.id, None, dir_fd=runs_fd) as run_fd:
        size = _size(run_fd) + (_size_of(traces_fd, run.id) if traces_fd is not None else 0)
        held = _hold_lock(run_fd)
        if held is None:
            report.kept.append(Item("run", run.id, size, why, why_kept="still running (a live process holds its lock)"))
            return
        try:
            if os.path.lexists(safefs.fd_path(run_fd) / PROCESSES_FILE) and not dry_run:
                report.kept.append(Item("run", run.id, size, why, why_kept="processes of it may still run"))
                return
            if not dry_run:  # with its lock held, so no resume starts on a run half gone
                if traces_fd is not None:
                    with contextlib.suppress(FileNotFoundError):
                        safefs.remove_at(traces_fd, run.id)
                _remove_page(state_root, run.id)
                safefs.remove_at(runs_fd, run.id)
        finally:
            os.close(held)
    if not dry_run and not os.path.lexists(state_root / ".worktrial" / "runs" / run.id):
        with contextlib.suppress(OSError, ValueError):
            signing.key_path(run.id).unlink()  # only once nothing of the run is left that the key could verify
    report.removed.append(Item("run", run.id, size, f"suite {run.suite}, {why}"))


def _hold_lock(run_fd: int) -> int | None:
    """The run's lock, taken (a descriptor to close), or None when a live process holds it."""
    try:
        fd = os.open(LOCK_FILE, _O_LOCK | os.O_CREAT, 0o600, dir_fd=run_fd)
    except OSError:
        return None  # a lock that cannot be opened (a symlink planted there): never act on the run
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _remove_page(state_root: Path, run_id: str) -> None:
    """The page ``view`` wrote of this run alone (``.worktrial/view/<id>.html``), never through a link."""
    with contextlib.ExitStack() as stack, contextlib.suppress(OSError, WorkspaceError):
        top = stack.enter_context(safefs.opened_dir(".worktrial", None, dir_fd=_open_root(state_root, stack)))
        view = stack.enter_context(safefs.opened_dir("view", None, dir_fd=top))
        os.unlink(f"{run_id}.html", dir_fd=view)


def _size_of(parent: int, name: str) -> int:
    try:
        with safefs.opened_dir(name, None, dir_fd=parent) as fd:
            return _size(fd)
    except (OSError, WorkspaceError):
        return 0


def _size(dir_fd: int) -> int:
    """Bytes on disk below a directory, links counted as themselves, never followed."""
    total = 0
    for name in os.listdir(dir_fd):
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            continue
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            total += _size_of(dir_fd, name)
    return total


# -- the environment cache ----------------------------------------------------------------------------------------


def _environment_cache(root: Path, dry_run: bool, report: GcReport) -> None:
    try:
        fd = safefs.open_dir(root, None)
    except WorkspaceError:
        if os.path.lexists(root):
            report.kept.append(Item("environment cache", str(root), why_kept="not a directory (never followed)"))
        return
    try:
        size = _size(fd)
    finally:
        os.close(fd)
    cache = EnvironmentCache(root)
    entries = cache.names()
    if not entries:
        return
    what = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    if dry_run:
        report.removed.append(Item("environment cache", str(root), size, what))
        return
    with cache.exclusive() as got:
        if not got:
            report.kept.append(Item("environment cache", str(root), size, what, "a running worktrial is using it"))
            return
        cache.clear()
    report.removed.append(Item("environment cache", str(root), size, what))


# -- container images, volumes, leftover containers ------------------------------------------------------------


def _images(options: GcOptions, report: GcReport) -> None:
    try:
        runtime = container.find_runtime(options.runtime)
    except BadInputError:
        report.notes.append(f"no container runtime ({options.runtime}): no images to remove")
        return
    orphans = container.orphan_containers(runtime)
    if orphans and not options.dry_run:
        container.remove_containers(runtime, orphans)
    report.removed += [Item("container", name, detail="left by a killed worktrial") for name in orphans]
    for tag in container.worktrial_images(runtime):
        size = container.image_size(runtime, tag)
        problem = None if options.dry_run else container.remove_image(runtime, tag)
        if problem is None:
            report.removed.append(Item("image", tag, size, runtime.name))
        else:
            report.kept.append(Item("image", tag, size, runtime.name, why_kept=problem))
    if container.has_volume(runtime, container.TOOLS_VOLUME):
        problem = None if options.dry_run else container.remove_volume(runtime, container.TOOLS_VOLUME)
        item = Item("volume", container.TOOLS_VOLUME, None, "agent CLIs installed into images")
        if problem is None:
            report.removed.append(item)
        else:
            report.kept.append(Item(item.kind, item.name, None, item.detail, why_kept=problem))
