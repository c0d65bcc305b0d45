"""Run work items on N worker threads; every event comes back to the caller's thread.

Workers do the waiting (on agent processes and git), so threads are enough; each worker owns one
resource (a pooled workspace) for its whole life. The caller iterates ``events()`` and so handles
progress, persistence and Ctrl-C in one place, its own thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from worktrial.errors import HarnessError

T = TypeVar("T")
R = TypeVar("R")
Resource = TypeVar("Resource")


@dataclass(frozen=True)
class Event(Generic[T, R]):
    kind: Literal["start", "done"]
    item: T
    result: R | None = None


_POLL_SECS = 0.1


class LocalExecutor(Generic[T, R, Resource]):
    def __init__(
        self,
        jobs: int,
        work: Callable[[T, Resource], R | None],
        make_resource: Callable[[int], Resource],
        close_resource: Callable[[Resource], None],
    ) -> None:
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.jobs = jobs
        self._work = work
        self._make = make_resource
        self._close = close_resource
        self._todo: queue.Queue[T] = queue.Queue()
        self._events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def stop(self) -> None:
        """Start no more items; running ones finish (or are ended by whoever stopped the run)."""
        self._stop.set()

    def events(self, items: Sequence[T]) -> Iterator[Event[T, R]]:
        """Run every item; yield a start and a done event for each, in the caller's thread.

        An item whose work returns None (abandoned because the run is stopping) gets no done event.
        """
        for item in items:
            self._todo.put(item)
        workers = min(self.jobs, len(items))
        for i in range(workers):
            thread = threading.Thread(target=self._worker, args=(i,), name=f"worktrial-job-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()
        finished = 0
        while finished < workers:
            try:
                kind, item, payload = self._events.get(timeout=_POLL_SECS)
            except queue.Empty:
                continue
            if kind == "exit":
                finished += 1
            elif kind == "crash":
                self.stop()
                raise HarnessError(f"internal error in a job: {payload}") from payload
            elif kind == "start":
                yield Event("start", item)
            elif payload is not None:
                yield Event("done", item, payload)

    def join(self, timeout: float) -> bool:
        """Wait for the workers to end; False if some are still busy after ``timeout`` seconds."""
        per = timeout / max(1, len(self._threads))
        for thread in self._threads:
            thread.join(per)
        return not any(t.is_alive() for t in self._threads)

    def _worker(self, index: int) -> None:
        resource: Resource | None = None
        try:
            resource = self._make(index)
            while not self._stop.is_set():
                try:
                    item = self._todo.get_nowait()
                except queue.Empty:
                    break
                self._events.put(("start", item, None))
                result = self._work(item, resource)
                self._events.put(("done", item, result))
        except BaseException as exc:
            self._events.put(("crash", None, exc))
        finally:
            if resource is not None:
                try:
                    self._close(resource)
                except Exception as exc:
                    self._events.put(("crash", None, exc))
            self._events.put(("exit", None, None))
