"""The local executor: attempt jobs on N worker threads, each owning one pooled workspace (slot) for its life.

Workers do the waiting (on agent processes and git), so threads are enough. Every event comes back to the
driver's thread through one queue, so progress, persistence, retries and Ctrl-C are handled in one place.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from worktrial.agents import create_agent
from worktrial.agents.base import Agent
from worktrial.engine.attempt import run_attempt
from worktrial.engine.checkout import new_slot
from worktrial.engine.executor import TICK_SECS, AgentRef, AttemptJob, AttemptResult, ExecutorEvent, RepoSource
from worktrial.engine.model_gateway import RunGateway
from worktrial.errors import HarnessError
from worktrial.isolation.pool import Slot
from worktrial.isolation.proc import ProcessScope
from worktrial.isolation.workspace import SourceRepo, materialize_source

log = logging.getLogger(__name__)

SLOTS_PER_WORKER = 2
"""Slots a worker keeps for different task bases (repository, commit, environment); the oldest is closed first."""
_Kind = Literal["start", "phase", "done", "abandoned", "crash"]


class LocalExecutor:
    """Runs jobs on up to ``jobs`` threads in this process; all of them share one process scope (the run's)."""

    def __init__(self, jobs: int, work_root: Path, *, keep_worktrees: bool = False) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.jobs = jobs
        self.work_root = work_root
        self.keep_worktrees = keep_worktrees
        self.scope = ProcessScope()
        self.gateway = RunGateway()
        """The run's model gateway: it listens from the first attempt whose agent routes a provider through it."""
        self._todo: queue.Queue[AttemptJob | None] = queue.Queue()
        self._events: queue.Queue[tuple[_Kind, AttemptJob | None, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pending = 0  # submitted and not yet done or abandoned; touched by the driver's thread only
        self._agent: Agent | None = None
        self._sources: dict[RepoSource, SourceRepo] = {}
        self._sources_lock = threading.Lock()

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        built = create_agent(agent.name, agent.options)
        built.preflight()
        self._agent = built
        return built.describe()

    def submit(self, job: AttemptJob) -> None:
        if self._agent is None:
            raise HarnessError("internal error: preflight() must run before submit()")
        self._pending += 1
        self._todo.put(job)
        if len(self._threads) < min(self.jobs, self._pending):
            index = len(self._threads)
            thread = threading.Thread(target=self._worker, args=(index,), name=f"worktrial-job-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def events(self) -> Iterator[ExecutorEvent]:
        while self._pending > 0:
            try:
                kind, job, payload = self._events.get(timeout=TICK_SECS)
            except queue.Empty:
                yield ExecutorEvent("tick")
                continue
            if kind == "crash":
                self.stop()
                raise HarnessError(f"internal error in a job: {payload}") from payload
            assert job is not None
            if kind == "start":
                yield ExecutorEvent("start", job)
                continue
            if kind == "phase":
                yield ExecutorEvent("phase", job, phase=payload)
                continue
            self._pending -= 1
            if kind == "done" and payload is not None:
                yield ExecutorEvent("done", job, payload)

    def stop(self) -> None:
        self._stop.set()
        self.scope.stop()

    def close(self, timeout: float | None) -> bool:
        for _ in self._threads:
            self._todo.put(None)
        per = None if timeout is None else timeout / max(1, len(self._threads))
        for thread in self._threads:
            thread.join(per)
        self.scope.kill_all()
        self.gateway.close()
        return not any(t.is_alive() for t in self._threads)

    def _phase(self, job: AttemptJob, phase: str) -> None:
        self._events.put(("phase", job, phase))

    def _source(self, source: RepoSource) -> SourceRepo:
        with self._sources_lock:
            if source not in self._sources:
                self._sources[source] = materialize_source(source.kind, source.location, self.work_root / "source")
            return self._sources[source]

    def _worker(self, index: int) -> None:
        slots: dict[str, Slot[Any]] = {}  # by task base, least recently used first
        made = 0
        try:
            while (job := self._todo.get()) is not None:
                if self._stop.is_set():
                    self._events.put(("abandoned", job, None))
                    continue
                base = job.resolved_base()
                source = self._source(base.source)
                slot: Slot[Any] | None = slots.pop(base.key, None)
                if slot is None and not job.spec.keep_worktrees:
                    while len(slots) >= SLOTS_PER_WORKER:
                        _close_slot(slots.pop(next(iter(slots))), index)
                    assert self._agent is not None
                    root = self.work_root / f"slot-{index}-{made}"
                    slot = new_slot(base, job.spec, self._agent, source, root, self.scope)
                    made += 1
                if slot is not None:
                    slots[base.key] = slot
                self._events.put(("start", job, None))
                assert self._agent is not None
                result: AttemptResult | None = run_attempt(
                    self._agent,
                    job,
                    source,
                    self.work_root,
                    slot=slot,
                    scope=self.scope,
                    worker=f"thread-{index}",
                    on_phase=functools.partial(self._phase, job),
                    gateway=self.gateway.for_attempt(job.spec),
                )
                if self.scope.stopping.is_set():
                    result = None  # ended by the stop: not a result, it reruns on resume
                elif result is not None and result.fatal is not None:
                    # It stops the run: no job of this worker may start before the driver has read the result.
                    self._stop.set()
                self._events.put(("done", job, result))
        except BaseException as exc:
            self._events.put(("crash", None, exc))
        finally:
            for slot in slots.values():
                _close_slot(slot, index)


def _close_slot(slot: Slot[Any], index: int) -> None:
    try:
        slot.close()
    except Exception as exc:
        log.warning("could not remove workspace slot %s: %s", index, exc)
