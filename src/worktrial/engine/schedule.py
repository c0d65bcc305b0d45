"""What a run starts next: its plan fed to the executor under back-pressure, retries, and the budget's say.

The driver (``engine/run.py``) reads the executor's events; the ``Scheduler`` decides what those events start.
Without a budget it keeps twice ``jobs`` attempts queued (never the whole plan in memory) and tops the queue up as
each one starts; under a budget only ``jobs`` are in flight and each new one starts only while the budget allows
it; once it does not (or a fatal error stops the run), the running ones finish and nothing else starts. An
infrastructure error runs again, up to ``retry_errors`` times, while the run is not stopping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from worktrial.engine.budget import Budget
from worktrial.engine.executor import AttemptJob, AttemptResult, Executor
from worktrial.model.records import RETRYABLE_ERRORS


class Scheduler:
    """The run's scheduling state, one per session; touched by the driver's thread only."""

    def __init__(
        self, executor: Executor, plan: Iterator[AttemptJob], budget: Budget, *, jobs: int, retry_errors: int
    ) -> None:
        self.executor, self.plan, self.budget = executor, plan, budget
        self.jobs = jobs
        """How many attempts run at once (the executor's workers); the queue is kept topped up to it."""
        self.retry_errors = retry_errors
        self.in_flight = 0
        self.stopping = False
        """Nothing more starts: the budget is spent, a fatal error or the gateway's budget stopped the run."""
        self._retries: dict[tuple[str, int], list[str]] = {}

    def begin(self) -> None:
        """The first attempts: ``jobs`` of them under a budget (none queued ahead), else a queue of twice that."""
        self._feed(self.jobs if self.budget.limited else 2 * self.jobs)

    def started(self) -> None:
        """An attempt began on a worker: keep the queue topped up (under a budget, ``recorded`` does that)."""
        if not self.stopping and not self.budget.limited:
            self._feed(1)

    def finished(self) -> None:
        """An attempt's result arrived (whatever becomes of it)."""
        self.in_flight -= 1

    def retried(self, job: AttemptJob, result: AttemptResult) -> bool:
        """Whether the attempt runs again: an infrastructure error (never a failure, a timeout or another error),
        tries left, nothing fatal, the run not stopping and the budget allowing a start. Resubmits it if so."""
        record = result.record
        reasons = self._retries.setdefault(job.key, [])
        if not (
            record.outcome == "error"
            and record.error_category in RETRYABLE_ERRORS
            and len(reasons) < self.retry_errors
            and result.fatal is None
            and not self.stopping
            and (not self.budget.limited or self.budget.allows_start(self.in_flight))
        ):
            return False
        reasons.append(record.reason or record.error_category or "error")
        self.executor.submit(dataclasses.replace(job, try_number=job.try_number + 1))
        self.in_flight += 1
        return True

    def instead(self, job: AttemptJob) -> None:
        """Run ``job`` in place of one that came to nothing (a replay whose change could not be rebuilt), unless
        the run is stopping or the budget allows no start."""
        if self.stopping or (self.budget.limited and not self.budget.allows_start(self.in_flight)):
            return
        self.executor.submit(job)
        self.in_flight += 1

    def retry_reasons(self, job: AttemptJob) -> list[str]:
        """Why each earlier try of the attempt ran again (empty on its first)."""
        return list(self._retries.get(job.key, ()))

    def recorded(self) -> None:
        """A record was stored (and added to the budget): under a budget, stop or start the next attempts."""
        if not self.budget.limited:
            return
        if self.budget.stopped is not None:
            self.stopping = True
        elif not self.stopping:
            self._feed(self.jobs - self.in_flight)

    def stop(self, *, executor: bool = False) -> None:
        """Start nothing more; with ``executor``, also end the running attempts (a fatal error)."""
        self.stopping = True
        if executor:
            self.executor.stop()

    def _feed(self, count: int) -> None:
        for _ in range(count):
            if self.budget.limited and not self.budget.allows_start(self.in_flight):
                self.stopping = True
                return
            job = next(self.plan, None)
            if job is None:
                return
            self.executor.submit(job)
            self.in_flight += 1
