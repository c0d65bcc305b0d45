"""What a run starts next: its plan fed to the executor under back-pressure, retries, and the budget's say.

The driver (``engine/session.py``) reads the executor's events; the ``Scheduler`` decides what those events start.
How many attempts run at once is its ``Concurrency``'s level (``engine/concurrency.py``): a fixed ``--jobs N``, or
``--jobs auto``'s, which the scheduler tells what it sees (``tick``, on every event) and follows as it changes.
With a fixed level and no budget it keeps twice the level queued (never the whole plan in memory) and tops the
queue up as each one starts; under a budget or ``--jobs auto`` only the level is in flight (a queued attempt would
start on a free worker whatever the level says) and each new one starts as one is recorded, while the budget
allows it; once it does not (or a fatal error stops the run), the running ones finish and nothing else starts. An
infrastructure error runs again, up to ``retry_errors`` times, while the run is not stopping; under ``--jobs auto``
an attempt the provider rate-limited also runs again (up to ``RATE_LIMIT_RETRIES`` more times), since the level
that caused it goes down.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator

from worktrial.engine.budget import Budget
from worktrial.engine.concurrency import Concurrency, FixedLevel
from worktrial.engine.executor import AttemptJob, AttemptResult, Executor
from worktrial.model.records import RETRYABLE_ERRORS, ErrorCategory

RATE_LIMIT_RETRIES = 5
"""Under ``--jobs auto``: tries beyond ``--retry-errors`` for an attempt that ended on the provider's 429."""


class Scheduler:
    """The run's scheduling state, one per session; touched by the driver's thread only."""

    def __init__(
        self,
        executor: Executor,
        plan: Iterator[AttemptJob],
        budget: Budget,
        *,
        jobs: int | Concurrency,
        retry_errors: int,
        rate_limits: Callable[[], int] | None = None,
        on_level: Callable[[int, str], None] | None = None,
    ) -> None:
        self.executor, self.plan, self.budget = executor, plan, budget
        self.concurrency: Concurrency = FixedLevel(jobs) if isinstance(jobs, int) else jobs
        self.retry_errors = retry_errors
        self.rate_limits = rate_limits
        """The provider's 429s seen live at the run's gateway, a running total (None: counted from the results)."""
        self.on_level = on_level
        self.in_flight = 0
        self.stopping = False
        """Nothing more starts: the budget is spent, a fatal error or the gateway's budget stopped the run."""
        self._retries: dict[tuple[str, int], list[str]] = {}
        self._limited: dict[tuple[str, int], int] = {}
        self._counted_429s = 0
        self._next: AttemptJob | None = None
        self._again: collections.deque[AttemptJob] = collections.deque()
        """Tries to run again, when paced: they wait for room under the level like any attempt."""

    @property
    def jobs(self) -> int:
        """How many attempts run at once now."""
        return self.concurrency.level

    @property
    def _paced(self) -> bool:
        """Only the level is in flight, nothing queued ahead."""
        return self.budget.limited or self.concurrency.adaptive

    def begin(self) -> None:
        """The first attempts: the level's worth when paced, else a queue of twice that."""
        self._feed(self.jobs if self._paced else 2 * self.jobs)

    def started(self) -> None:
        """An attempt began on a worker: keep the queue topped up (when paced, ``recorded`` does that)."""
        if not self.stopping and not self._paced:
            self._feed(1)

    def finished(self, result: AttemptResult | None = None) -> None:
        """An attempt's result arrived (whatever becomes of it)."""
        self.in_flight -= 1
        if result is not None and self.rate_limits is None and (gateway := result.trace.gateway) is not None:
            self._counted_429s += gateway.statuses.get("429", 0)

    def tick(self) -> None:
        """Tell the level what the run looks like now (on every event, before it is handled); start more when it
        went up."""
        seen = self.rate_limits() if self.rate_limits is not None else self._counted_429s
        before = self.concurrency.level
        why = self.concurrency.update(self.in_flight, self._waiting(), seen)
        if why is None:
            return
        if self.on_level is not None:
            self.on_level(self.concurrency.level, why)
        if self.concurrency.level > before and not self.stopping:
            self._feed(self.jobs - self.in_flight)

    def retried(self, job: AttemptJob, result: AttemptResult) -> bool:
        """Whether the attempt runs again: an infrastructure error (never a failure, a timeout or another error),
        tries left, nothing fatal, the run not stopping and the budget allowing a start. Resubmits it if so."""
        record = result.record
        reasons = self._retries.setdefault(job.key, [])
        limited = self._limited.get(job.key, 0)
        rate_limited = self.concurrency.adaptive and record.error_category == ErrorCategory.PROVIDER_RATE_LIMIT
        tries_left = len(reasons) - limited < self.retry_errors or (rate_limited and limited < RATE_LIMIT_RETRIES)
        if not (
            record.outcome == "error"
            and record.error_category in RETRYABLE_ERRORS
            and tries_left
            and result.fatal is None
            and not self.stopping
            and (not self.budget.limited or self.budget.allows_start(self.in_flight))
        ):
            if not reasons:
                self._retries.pop(job.key, None)
            return False
        if rate_limited and len(reasons) - limited >= self.retry_errors:
            self._limited[job.key] = limited + 1  # the level's doing: not one of --retry-errors' tries
        reasons.append(record.reason or record.error_category or "error")
        again = dataclasses.replace(job, try_number=job.try_number + 1)
        if self._paced:
            self._again.append(again)
            self._feed(self.jobs - self.in_flight)
        else:
            self.executor.submit(again)
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
        """Why each earlier try of the attempt ran again (empty on its first); forgotten once asked, since the
        attempt is recorded then."""
        self._limited.pop(job.key, None)
        return self._retries.pop(job.key, [])

    def recorded(self) -> None:
        """A record was stored (and added to the budget): when paced, stop or start the next attempts."""
        if not self._paced:
            return
        if self.budget.limited and self.budget.stopped is not None:
            self.stopping = True
        elif not self.stopping:
            self._feed(self.jobs - self.in_flight)

    def stop(self, *, executor: bool = False) -> None:
        """Start nothing more; with ``executor``, also end the running attempts (a fatal error)."""
        self.stopping = True
        if executor:
            self.executor.stop()

    def _waiting(self) -> bool:
        """Whether an attempt is waiting to start (the plan is looked ahead by one)."""
        if self._again:
            return True
        if self._next is None:
            self._next = next(self.plan, None)
        return self._next is not None

    def _feed(self, count: int) -> None:
        for _ in range(count):
            if self.budget.limited and not self.budget.allows_start(self.in_flight):
                self.stopping = True
                return
            if self._again:
                job: AttemptJob | None = self._again.popleft()
            else:
                job, self._next = self._next, None
                job = job or next(self.plan, None)
            if job is None:
                return
            self.executor.submit(job)
            self.in_flight += 1
