"""The Ray executor: a run's attempts on a pool of Ray actors across a cluster, with the local executor's contract.

Design (docs/cluster.md has the user's view):

- **Workers own slots.** ``--jobs`` actors, each holding one ``SlotWorker`` (``engine/ray_worker.py``) for the
  whole run, so a slot's clone, worktree and environment setup are made once per actor, as with the local threads.
  Each actor asks Ray for ``--ray-cpus-per-attempt`` CPUs and any custom resources (``{"agent_claude": 1}``).
- **The repository travels once.** The driver bundles each base commit it is asked for (``isolation/gitbundle``)
  and the suite's declared files, ``ray.put``s each once, and sends jobs that name them by digest; a worker fetches
  a shipment the first time it needs it and checks it. Jobs and shipments never hold a secret: workers build the
  agent from their node's environment.
- **Results stream back** one attempt at a time (``ray.wait`` on the in-flight calls); the driver persists them
  exactly as for a local run, so the run store, resume, reports and ``view`` cannot tell the executors apart.
- **Lost workers.** A call that fails because its actor or node died becomes an ``error`` with category
  ``worker_lost`` (an infrastructure error the driver retries under ``--retry-errors``); the actor leaves the pool
  and queued work goes to the survivors (a dead node's CPUs are not coming back for a replacement).
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from worktrial.engine.executor import (
    TICK_SECS,
    AgentRef,
    AttemptJob,
    AttemptResult,
    AttemptSpec,
    ExecutorEvent,
    RepoSource,
    TaskBase,
)
from worktrial.engine.node_containers import unfilled
from worktrial.engine.ray_worker import BUNDLE_PREFIX, SUITE_PREFIX, SlotWorker, error_result, node_dir, pack_suite_dir
from worktrial.errors import BadInputError, HarnessError
from worktrial.isolation.gitbundle import create_bundle
from worktrial.model.records import ErrorCategory
from worktrial.util import public_url
from worktrial.version import __version__

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'worktrial[ray]'"
READY_TIMEOUT_SECS = 300.0
"""How long actors may take to be placed and started (a cluster may be pulling images or autoscaling)."""
_POLL_SECS = 0.1


@dataclass(frozen=True)
class RaySettings:
    """How to reach the cluster and what each attempt asks of it."""

    address: str | None = None
    """``ray.init`` address (``auto``, ``HOST:PORT``, ``ray://HOST:10001``); None: ``$RAY_ADDRESS`` or a local Ray."""
    cpus_per_attempt: float = 1.0
    resources: dict[str, float] = field(default_factory=dict)
    """Custom resources each actor needs, e.g. ``{"agent_claude": 1}`` for nodes with that agent CLI."""


def import_ray() -> Any:
    """The ``ray`` module, or one clear error saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise BadInputError(
            f"--executor ray needs Ray, which is not installed; install it with: {INSTALL_HINT}"
        ) from None


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """The exceptions that mean "the actor or its node is gone", as opposed to a bug in the call."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError", "OwnerDiedError")
    found = [getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name)]
    return tuple(found)


class _Actor:
    """The Ray actor class body; Ray turns it into a remote class in ``_actor_class``."""

    def __init__(self, parent: str | None) -> None:
        ray = importlib.import_module("ray")
        context = ray.get_runtime_context()
        self.node_id: str = context.get_node_id()
        self.worker = SlotWorker(parent, f"ray:{self.node_id[:12]}/{os.getpid()}")

    def where(self) -> tuple[str, str]:
        return self.node_id, self.worker.name

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        return self.worker.preflight(agent)

    def run(self, job: AttemptJob, refs: dict[str, Any]) -> Any:
        ray = importlib.import_module("ray")
        return self.worker.run(job, lambda name: ray.get(refs[name]))

    def stop(self) -> None:
        self.worker.stop()

    def close(self) -> None:
        self.worker.close()


class RayExecutor:
    """Runs jobs on ``jobs`` Ray actors; the driver thread is the only one that talks to Ray."""

    def __init__(self, jobs: int, work_root: Path, *, keep_worktrees: bool = False, settings: RaySettings) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        if keep_worktrees:
            raise BadInputError(
                "--keep-worktrees keeps worktrees for inspection on this machine, but Ray attempts run on other "
                "nodes; rerun the task with the local executor to inspect its worktree"
            )
        if settings.cpus_per_attempt <= 0:
            raise BadInputError(f"--ray-cpus-per-attempt must be more than 0 (got {settings.cpus_per_attempt})")
        self.ray = import_ray()
        self.jobs = jobs
        self.work_root = work_root
        self.keep_worktrees = keep_worktrees
        self.settings = settings
        self.placements: collections.Counter[str] = collections.Counter()
        """Node id -> attempts finished there (diagnostics and tests)."""
        self.lost = 0
        self._owns_connection = False
        self._actors: list[Any] = []
        self._nodes: dict[Any, str] = {}
        self._idle: list[Any] = []
        self._queue: collections.deque[AttemptJob] = collections.deque()
        self._inflight: dict[Any, tuple[Any, AttemptJob, float]] = {}
        self._pending = 0
        self._stopping = False
        self._shipped: dict[tuple[str, str], str] = {}  # (repository path, commit) -> shipment name
        self._refs: dict[str, Any] = {}  # shipment name -> ObjectRef
        self._wire_specs: dict[int, tuple[AttemptSpec, AttemptSpec]] = {}
        self._stdout: TextIO | None = None
        self._connect()

    # -- connection and pool -------------------------------------------------------------------------------------

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        address = self.settings.address or os.environ.get("RAY_ADDRESS") or None
        # Ray's driver prints cluster events ("raylet died") to sys.stdout from a thread of its own, which would
        # corrupt a JSON report on stdout: while this executor is connected they go to stderr with the progress.
        self._stdout, sys.stdout = sys.stdout, sys.stderr
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            self._restore_stdout()
            where = address or "a new local Ray instance"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BadInputError(
                f"cannot connect to Ray at {where}: {first}; "
                "start a cluster (`ray start --head`) or check --ray-address"
            ) from None
        self._owns_connection = True

    def _check_resources(self) -> None:
        available = self.ray.cluster_resources()
        if available.get("CPU", 0) < self.settings.cpus_per_attempt:
            raise BadInputError(
                f"no Ray node has {self.settings.cpus_per_attempt:g} CPUs for one attempt "
                f"(the cluster has {available.get('CPU', 0):g} in all); lower --ray-cpus-per-attempt"
            )
        for name, amount in self.settings.resources.items():
            if available.get(name, 0) < amount:
                raise BadInputError(
                    f"no Ray node offers resource {name!r} x{amount:g} (cluster: {available.get(name, 0):g}); "
                    f"start nodes with `ray start --resources '{{\"{name}\": 1}}'` or drop it from --ray-resource"
                )

    def _start_actors(self) -> None:
        self._check_resources()
        ray = self.ray
        remote = ray.remote(_Actor).options(
            num_cpus=self.settings.cpus_per_attempt,
            resources=dict(self.settings.resources),
            max_restarts=0,
            max_concurrency=2,  # ``stop`` must reach an actor that is busy in ``run``
        )
        actors = [remote.remote(node_dir()) for _ in range(self.jobs)]
        calls = {actor.where.remote(): actor for actor in actors}
        ready, waiting = ray.wait(list(calls), num_returns=len(calls), timeout=READY_TIMEOUT_SECS)
        for ref in waiting:
            ray.kill(calls[ref], no_restart=True)
        for ref in ready:
            actor = calls[ref]
            try:
                node, _ = ray.get(ref)
            except _lost_errors(ray) as exc:
                log.warning("a Ray worker failed to start: %s", exc)
                continue
            self._actors.append(actor)
            self._nodes[actor] = node
        if not self._actors:
            raise BadInputError(
                f"no Ray worker could start within {READY_TIMEOUT_SECS:g}s; check the cluster has room for "
                f"{self.settings.cpus_per_attempt:g} CPUs and {self.settings.resources or 'no custom resources'} "
                "per attempt (`ray status`)"
            )
        if waiting:
            log.warning(
                "%d of %d Ray workers could not be placed; running with %d", len(waiting), self.jobs, len(ready)
            )

    # -- the Executor protocol -----------------------------------------------------------------------------------

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        """Start the actors and build the agent on every one of them (each from its own node's environment)."""
        check_shippable(agent)
        if not self._actors:
            self._start_actors()
        answers = self.ray.get([actor.preflight.remote(agent) for actor in self._actors])
        for actor, answer in zip(self._actors, answers, strict=True):
            if "error" in answer:
                raise BadInputError(f"{answer['error']} (on Ray node {self._nodes[actor][:12]})")
            if answer.get("version") != __version__:
                raise BadInputError(
                    f"Ray node {self._nodes[actor][:12]} has worktrial {answer.get('version')}, this driver "
                    f"{__version__}; install the same version on every node"
                )
        self._idle = list(self._actors)
        description: dict[str, Any] = answers[0]["describe"]
        return description

    def submit(self, job: AttemptJob) -> None:
        if not self._actors:
            raise HarnessError("internal error: preflight() must run before submit()")
        self._pending += 1
        self._queue.append(job)

    def events(self) -> Iterator[ExecutorEvent]:
        ray = self.ray
        ticked = time.monotonic()
        while self._pending > 0:
            if self._stopping and self._queue:
                self._pending -= len(self._queue)  # abandoned: they rerun on resume
                self._queue.clear()
            yield from self._dispatch()
            if not self._inflight:
                if self._pending > 0 and not self._actors:
                    raise HarnessError(
                        "every Ray worker was lost; the finished attempts are stored: continue with "
                        "`worktrial resume RUN_ID --executor ray` once the cluster is back"
                    )
                continue
            ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=_POLL_SECS)
            if not ready and time.monotonic() - ticked >= TICK_SECS:
                ticked = time.monotonic()
                yield ExecutorEvent("tick")
            finished = [self._collect(ref) for ref in ready]
            yield from self._dispatch()  # freed workers start their next attempt before the driver persists this one
            for job, result in finished:
                if not self._stopping:  # a job ended by the stop is not a result: it reruns on resume
                    yield ExecutorEvent("done", job, result)

    def _dispatch(self) -> Iterator[ExecutorEvent]:
        while self._queue and self._idle and not self._stopping:
            job = self._queue.popleft()
            actor = self._idle.pop()
            wire, refs = self._wire(job)
            self._inflight[actor.run.remote(wire, refs)] = (actor, job, time.monotonic())
            yield ExecutorEvent("start", job)

    def _collect(self, ref: Any) -> tuple[AttemptJob, AttemptResult]:
        """The result of a finished call; a call whose actor or node died becomes a ``worker_lost`` error."""
        ray = self.ray
        actor, job, started = self._inflight.pop(ref)
        self._pending -= 1
        try:
            result: AttemptResult = ray.get(ref)
        except _lost_errors(ray) as exc:
            self._drop(actor)
            self.lost += 1
            node = self._nodes.get(actor, "?")[:12]
            reason = f"Ray worker lost on node {node}: {_first_line(exc)}"
            lost = error_result(job, ErrorCategory.WORKER_LOST, reason, worker=f"ray:{node}")
            elapsed = round(time.monotonic() - started, 3)
            return job, replace(lost, record=lost.record.model_copy(update={"duration_secs": elapsed}))
        except ray.exceptions.RayTaskError as exc:
            self.stop()
            raise HarnessError(f"internal error in a Ray worker: {_first_line(exc)}") from None
        self._idle.append(actor)
        self.placements[self._nodes.get(actor, "?")] += 1
        return job, result

    def stop(self) -> None:
        self._stopping = True
        for actor, _, _ in list(self._inflight.values()):
            with contextlib.suppress(Exception):
                actor.stop.remote()

    def close(self, timeout: float | None) -> bool:
        ray = self.ray
        clean = True
        if self._actors:
            closing = [actor.close.remote() for actor in self._actors]
            wait = None if timeout is None else max(timeout, 0.1)
            _, waiting = ray.wait(closing, num_returns=len(closing), timeout=wait)
            clean = not waiting
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            self._actors.clear()
            self._idle.clear()
        self._refs.clear()
        if self._owns_connection:
            with contextlib.suppress(Exception):
                ray.shutdown()  # joins Ray's printing threads before stdout is given back
            self._owns_connection = False
        self._restore_stdout()
        return clean and not self._inflight

    def _restore_stdout(self) -> None:
        if self._stdout is not None:
            sys.stdout, self._stdout = self._stdout, None

    # -- shipping ------------------------------------------------------------------------------------------------

    def _drop(self, actor: Any) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
        if actor in self._idle:
            self._idle.remove(actor)
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)  # it may still be running the attempt: it must not come back

    def _wire(self, job: AttemptJob) -> tuple[AttemptJob, dict[str, Any]]:
        """The job as it travels: repository paths and the suite directory replaced by shipment names."""
        base = job.resolved_base()
        cached = self._wire_specs.get(id(job.spec))
        if cached is None or cached[0] is not job.spec:
            spec = job.spec
            suite = self._ship_suite(spec) if spec.suite_dir else None
            wire_spec = replace(
                spec,
                source=self._ship_repo(spec.source, spec.base_commit),
                suite_dir=suite,
                artifacts_dir=None,
                containers=unfilled(spec.containers),
            )
            self._wire_specs[id(job.spec)] = (job.spec, wire_spec)
        else:
            wire_spec = cached[1]
        wire_base = TaskBase(self._ship_repo(base.source, base.commit), base.commit, base.environment)
        wire = replace(job, spec=wire_spec, base=wire_base)
        names = [wire_base.source.location, wire_spec.source.location]
        if wire_spec.suite_dir:
            names.append(wire_spec.suite_dir)
        return wire, {name: self._refs[name] for name in names}

    def _ship_repo(self, source: RepoSource, commit: str) -> RepoSource:
        if source.kind != "path":
            raise HarnessError(f"internal error: the Ray executor ships local repositories, not {source.kind}")
        key = (source.location, commit)
        if key not in self._shipped:
            dest = self.work_root / "bundles" / f"{len(self._shipped)}.bundle"
            digest = create_bundle(Path(source.location), [commit], dest)
            name = BUNDLE_PREFIX + digest
            if name not in self._refs:
                self._refs[name] = self.ray.put(dest.read_bytes())
            dest.unlink()
            self._shipped[key] = name
        return RepoSource("bundle", self._shipped[key])

    def _ship_suite(self, spec: AttemptSpec) -> str:
        assert spec.suite_dir is not None
        pack = pack_suite_dir(Path(spec.suite_dir), spec.suite_sha256)
        digest = pack.digest()
        if spec.suite_digest is not None and digest != spec.suite_digest:
            raise HarnessError(
                f"the run's copy of the suite files has digest {digest[:12]}, not {spec.suite_digest[:12]}; "
                "something changed it during the run"
            )
        name = SUITE_PREFIX + digest
        if name not in self._refs:
            self._refs[name] = self.ray.put(pack)
        return name


def check_shippable(agent: AgentRef) -> None:
    """Refuse an agent whose options hold a credential: everything in a job travels to the cluster's nodes."""
    url = agent.options.base_url
    if url and public_url(url) != url:
        raise BadInputError(
            "--base-url has user info or a query (credentials), which would travel to every Ray node; pass it "
            "without them and "
            "give the workers their key in their own environment (see docs/cluster.md)"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
