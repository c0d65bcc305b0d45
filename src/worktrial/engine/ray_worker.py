"""The worker half of the Ray executor: what one actor does on its node, written without importing Ray.

A ``SlotWorker`` lives in one Ray actor for the whole run, like one thread of the local executor: it builds the
agent from the node's own environment (keys never travel), owns its slots (private clone + worktree), and turns a
wire job into an ``AttemptResult``. What it needs from the driver arrives as *shipments* named by their SHA-256 —
git bundles of the base commits and the suite's declared files — fetched through a callback (``ray.get`` in the
actor) only the first time this worker sees them, checked against their names, and cached on its disk. Before each
attempt the suite digest and the base commit are checked here, on the worker: a mismatch is an infrastructure error
that stops the run, never an attempt silently run on other code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.agents import create_agent
from worktrial.agents.base import Agent, AgentError
from worktrial.engine.attempt import run_attempt
from worktrial.engine.checkout import new_slot
from worktrial.engine.executor import AgentRef, AttemptJob, AttemptResult, RepoSource
from worktrial.engine.model_gateway import RunGateway
from worktrial.engine.node_containers import ImageMismatch, NodeContainers, NodeUnready
from worktrial.errors import WorktrialError
from worktrial.isolation.gitbundle import file_sha256
from worktrial.isolation.pool import Slot
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.workspace import SourceRepo, materialize_source, remove_tree, resolve_commit
from worktrial.model.bundle import BundleFile, bundle_digest
from worktrial.model.records import AttemptRecord, ErrorCategory, Usage
from worktrial.model.trace import build_trace
from worktrial.version import __version__

log = logging.getLogger(__name__)

SLOTS_PER_WORKER = 2
"""Slots kept for different task bases (repository, commit, environment), as in the local executor."""
BUNDLE_PREFIX = "bundle:"
SUITE_PREFIX = "suite:"

Fetch = Callable[[str], Any]
"""Fetches a shipment from the driver by name: ``bundle:<sha256>`` (bytes) or ``suite:<digest>`` (a SuitePack)."""


@dataclass(frozen=True)
class SuitePack:
    """The suite's declared files as data: what ``$WORKTRIAL_SUITE_DIR`` holds on a remote worker."""

    suite_sha256: str
    files: tuple[tuple[str, str, bytes], ...]
    """(name relative to the suite directory, sha256, content) per declared file."""

    def digest(self) -> str:
        listed = tuple(BundleFile(name=n, sha256=hashlib.sha256(b).hexdigest(), size=len(b)) for n, _, b in self.files)
        return bundle_digest(self.suite_sha256, listed)


def pack_suite_dir(suite_dir: Path, suite_sha256: str) -> SuitePack:
    """Every regular file under the run's read-only suite copy, in name order."""
    files: list[tuple[str, str, bytes]] = []
    for path in sorted(p for p in suite_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        files.append((path.relative_to(suite_dir).as_posix(), hashlib.sha256(data).hexdigest(), data))
    return SuitePack(suite_sha256, tuple(files))


class SourceMismatch(WorktrialError):
    """What arrived on the worker is not what the driver pinned (digest or commit)."""


def error_result(
    job: AttemptJob, category: ErrorCategory, reason: str, *, worker: str | None, fatal: bool = False
) -> AttemptResult:
    """An attempt that ended before the agent ran, for an infrastructure reason (a lost worker, a mismatch)."""
    record = AttemptRecord(
        task_id=job.task.id,
        attempt=job.attempt,
        outcome="error",
        claimed=None,
        verified=None,
        reason=reason,
        duration_secs=0.0,
        agent_secs=0.0,
        verify_secs=0.0,
        error_category=category,
    )
    trace = build_trace(
        task_id=job.task.id,
        attempt=job.attempt,
        outcome="error",
        duration_secs=0.0,
        agent_secs=0.0,
        verify_secs=0.0,
        usage=Usage(),
    )
    return AttemptResult(
        record=record,
        trace=trace,
        worker=worker,
        fatal=AgentError(category, reason, fatal=True) if fatal else None,
    )


class SlotWorker:
    """One remote worker: an agent built on this node, cached shipments, and up to two slots for the run."""

    def __init__(self, parent: str | None, name: str) -> None:
        self.name = name
        self.root = Path(tempfile.mkdtemp(prefix="worktrial-ray-", dir=parent))
        self.scope = ProcessScope()
        self.gateway = RunGateway()
        """This node's model gateway for the run's attempts (keys and sessions never cross nodes)."""
        self._agent: Agent | None = None
        self._sources: dict[str, tuple[SourceRepo, str]] = {}  # bundle name -> clone, local bundle path
        self._suites: dict[str, str] = {}  # suite digest -> local directory
        self._slots: dict[str, Slot[Any]] = {}  # task base key -> slot, least recently used first
        self._made = 0
        self._containers = NodeContainers(f"Ray worker {name} (host {socket.gethostname()})")

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        """The agent's description, or ``{"error": message}`` when it cannot work on this node."""
        try:
            built = create_agent(agent.name, agent.options)
            built.preflight()
        except WorktrialError as exc:
            return {"error": str(exc)}
        self._agent = built
        return {"describe": built.describe(), "version": __version__}

    def run(self, job: AttemptJob, fetch: Fetch) -> AttemptResult:
        """Run one wire job (sources named by shipment) to a result; never raises for the attempt's own failures."""
        if self._agent is None:
            return error_result(
                job, ErrorCategory.CRASHED, "internal error: the worker was not preflighted", worker=self.name
            )
        try:
            local = self._localise(job, fetch)
        except SourceMismatch as exc:
            return error_result(job, ErrorCategory.SOURCE_MISMATCH, str(exc), worker=self.name, fatal=True)
        except (WorktrialError, OSError) as exc:
            reason = f"cannot prepare the repository on {self.name}: {exc}"
            return error_result(job, ErrorCategory.WORKTREE, reason, worker=self.name)
        try:
            local = self._contained(local)
        except ImageMismatch as exc:
            return error_result(job, ErrorCategory.SOURCE_MISMATCH, str(exc), worker=self.name, fatal=True)
        except NodeUnready as exc:
            return error_result(job, ErrorCategory.NODE_RUNTIME, str(exc), worker=self.name)
        source = self._sources[_name_of(job.resolved_base().source)][0]
        slot = None if local.spec.keep_worktrees else self._slot_for(local, source)
        attempts = self.root / "attempts"
        gateway = self.gateway.for_attempt(local.spec)
        return run_attempt(
            self._agent, local, source, attempts, slot=slot, scope=self.scope, worker=self.name, gateway=gateway
        )

    def stop(self) -> None:
        self.scope.stop()

    def close(self) -> None:
        self.scope.kill_all()
        self.gateway.close()
        for slot in self._slots.values():
            try:
                slot.close()
            except Exception as exc:
                log.warning("could not remove a workspace slot of %s: %s", self.name, exc)
        self._slots.clear()
        remove_tree(self.root)

    def _localise(self, job: AttemptJob, fetch: Fetch) -> AttemptJob:
        """The job with shipment names replaced by this worker's paths, after checking digest and commit."""
        spec = job.spec
        suite_dir = self._suite(spec.suite_dir, spec.suite_sha256, spec.suite_digest, fetch) if spec.suite_dir else None
        base = job.resolved_base()
        spec_source = self._source(spec.source, spec.base_commit, fetch)
        base_source = self._source(base.source, base.commit, fetch)
        # What the sandbox can be (the uid a root worker switches to, slirp4netns for the attempts' own network) is
        # this node's to find out, not the driver's.
        local_spec = dataclasses.replace(
            spec, source=spec_source, suite_dir=suite_dir, artifacts_dir=None, sandbox_decision=None
        )
        local_base = dataclasses.replace(base, source=base_source)
        return dataclasses.replace(job, spec=local_spec, base=local_base)

    def _contained(self, job: AttemptJob) -> AttemptJob:
        """A container task's job with the run's plan made this node's (``engine/node_containers.py``)."""
        plan = job.spec.containers
        if plan is None or job.task.id not in plan.tasks:
            return job
        assert self._agent is not None
        base = job.resolved_base()
        local = self._containers.plan_for(
            plan, job.task.id, base.environment, job.spec.suite_dir, self._agent.describe()
        )
        return dataclasses.replace(job, spec=dataclasses.replace(job.spec, containers=local))

    def _source(self, shipped: RepoSource, commit: str, fetch: Fetch) -> RepoSource:
        name = _name_of(shipped)
        if name not in self._sources:
            data = fetch(name)
            expected = name[len(BUNDLE_PREFIX) :]
            if hashlib.sha256(data).hexdigest() != expected:
                raise SourceMismatch(f"the repository bundle that reached {self.name} does not match its digest")
            bundles = self.root / "bundles"
            bundles.mkdir(parents=True, exist_ok=True)
            bundle_file = bundles / f"{expected[:16]}.bundle"
            bundle_file.write_bytes(data)
            if file_sha256(bundle_file) != expected:
                raise SourceMismatch(f"the repository bundle written on {self.name} does not match its digest")
            clone = materialize_source("bundle", str(bundle_file), self.root / "sources")
            self._sources[name] = (clone, str(bundle_file))
        source, path = self._sources[name]
        try:
            found = resolve_commit(source.path, commit)
        except WorktrialError:
            found = None
        if found != commit:
            raise SourceMismatch(
                f"base commit {commit[:12]} is not in the repository that reached {self.name}; "
                "the run stops rather than run attempts on other code"
            )
        return RepoSource("bundle", path)

    def _suite(self, shipped: str, suite_sha256: str, digest: str | None, fetch: Fetch) -> str:
        if not shipped.startswith(SUITE_PREFIX):
            raise SourceMismatch(f"internal error: suite files {shipped!r} were not shipped to {self.name}")
        name = shipped[len(SUITE_PREFIX) :]
        if name not in self._suites:
            pack = fetch(shipped)
            if not isinstance(pack, SuitePack):
                raise SourceMismatch(f"internal error: the suite files that reached {self.name} are not a suite pack")
            got = pack.digest()
            if pack.suite_sha256 != suite_sha256 or got != name or (digest is not None and got != digest):
                raise SourceMismatch(
                    f"the suite files that reached {self.name} have digest {got[:12]}, the run pinned "
                    f"{(digest or name)[:12]}; the run stops rather than verify against other files"
                )
            target = self.root / "suite" / name[:16]
            if target.exists():
                shutil.rmtree(target)
            for rel, _, data in pack.files:
                path = target / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            self._suites[name] = str(target)
        return self._suites[name]

    def _slot_for(self, job: AttemptJob, source: SourceRepo) -> Slot[Any]:
        base = job.resolved_base()
        slot = self._slots.pop(base.key, None)
        if slot is None:
            while len(self._slots) >= SLOTS_PER_WORKER:
                oldest = self._slots.pop(next(iter(self._slots)))
                try:
                    oldest.close()
                except Exception as exc:
                    log.warning("could not remove a workspace slot of %s: %s", self.name, exc)
            assert self._agent is not None
            slot = new_slot(base, job.spec, self._agent, source, self.root / f"slot-{self._made}", self.scope)
            self._made += 1
        self._slots[base.key] = slot
        return slot


def _name_of(source: RepoSource) -> str:
    if source.kind != "bundle" or not source.location.startswith(BUNDLE_PREFIX):
        raise SourceMismatch(f"internal error: repository {source.location!r} was not shipped as a bundle")
    return source.location


def node_dir() -> str | None:
    """Where a worker keeps its slots: ``$WORKTRIAL_RAY_WORKDIR`` on the node, else the system's temp directory."""
    return os.environ.get("WORKTRIAL_RAY_WORKDIR") or None
