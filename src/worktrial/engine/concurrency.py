"""How many attempts run at once: a fixed ``--jobs N``, or ``--jobs auto``'s level, chosen as the run goes.

``--jobs auto`` starts where a fixed ``--jobs`` would (min(4, CPU cores), within ``--max-jobs``) and follows two
signals, read by the run's driver between its events (``Scheduler.tick``):

- **The machine's pressure** (``Probe``): the share of the last ten seconds in which work waited for a CPU, or
  stalled on memory (Linux's pressure stall information, ``/proc/pressure``), else the load average per core and
  the share of memory in use. High pressure halves the level; low pressure, while every attempt the level allows
  runs and more are waiting, raises it by one, at most once per ``Tuning.grow_secs``.
- **The provider's 429s**, counted at the run's model gateway: a 429 that came while ``running`` attempts ran
  (no more than the level allowed) says the provider takes fewer, so the level drops to ``running - 1`` and stays
  at or below it (a ceiling) until ``Tuning.ceiling_secs`` pass without another 429; then the ceiling rises by
  one, so a provider that recovered is found again.

A signal counts only against a level in effect: right after a decrease more attempts run than it allows until
some finish, and what they cause is the old level's doing (a second halving for the same pressure would overshoot).
Running attempts are never ended: a lower level only holds new ones back. Every change is kept, with its time and
why, in the run's record and envelope (``run.concurrency``), and said in the progress lines.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from worktrial.model.envelope import ConcurrencyInfo, LevelChange
from worktrial.util import utc_now

PSI_CPU_HIGH, PSI_CPU_LOW = 50.0, 20.0
"""``/proc/pressure/cpu`` ``some avg10``: percent of the last 10 s in which some runnable task waited for a CPU."""
PSI_MEMORY_HIGH, PSI_MEMORY_LOW = 10.0, 1.0
"""``/proc/pressure/memory`` ``some avg10``: percent of the last 10 s in which some task stalled on memory."""
LOAD_HIGH, LOAD_LOW = 1.5, 0.8
"""Without PSI: the 1-minute load average per core."""
MEMORY_USED_HIGH, MEMORY_USED_LOW = 90.0, 80.0
"""Without PSI: percent of memory in use (not ``MemAvailable``)."""
KEEP_FIRST, KEEP_LAST = 50, 950
"""Level changes kept in the run's record: the first ones and the latest ones (the rest are counted)."""


@dataclass(frozen=True)
class Pressure:
    """One reading of the machine's pressure (``source`` says which scale the figures are on)."""

    source: Literal["psi", "load"]
    cpu: float
    """``psi``: percent of time some task waited for a CPU; ``load``: the load average per core."""
    memory: float | None
    """``psi``: percent of time some task stalled on memory; ``load``: percent of memory in use; None: unknown."""

    def high(self) -> str | None:
        """Why this reading is too much for more attempts (None: it is not)."""
        if self.source == "psi":
            if self.cpu >= PSI_CPU_HIGH:
                return f"CPU pressure {self.cpu:.0f}% (time work waited for a CPU, last 10 s)"
            if self.memory is not None and self.memory >= PSI_MEMORY_HIGH:
                return f"memory pressure {self.memory:.0f}% (time work stalled on memory, last 10 s)"
            return None
        if self.cpu >= LOAD_HIGH:
            return f"load {self.cpu:.2f} per core"
        if self.memory is not None and self.memory >= MEMORY_USED_HIGH:
            return f"memory {self.memory:.0f}% in use"
        return None

    def low(self) -> bool:
        """Whether there is room for one more attempt."""
        if self.source == "psi":
            return self.cpu < PSI_CPU_LOW and (self.memory is None or self.memory < PSI_MEMORY_LOW)
        return self.cpu < LOAD_LOW and (self.memory is None or self.memory < MEMORY_USED_LOW)

    def describe(self) -> str:
        if self.source == "psi":
            memory = f", memory {self.memory:.0f}%" if self.memory is not None else ""
            return f"CPU pressure {self.cpu:.0f}%{memory}"
        memory = f", memory {self.memory:.0f}% in use" if self.memory is not None else ""
        return f"load {self.cpu:.2f} per core{memory}"


class Probe(Protocol):
    """Where ``--jobs auto`` reads the machine's pressure and the time (tests give a scripted one)."""

    def pressure(self) -> Pressure | None:
        """The pressure now; None when this machine says nothing (the level then follows the 429s only)."""
        ...

    def now(self) -> float:
        """Monotonic seconds."""
        ...


class HostProbe:
    """This machine: ``/proc/pressure/{cpu,memory}`` where the kernel has them, else the load average and
    ``/proc/meminfo``."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def now(self) -> float:
        return time.monotonic()

    def pressure(self) -> Pressure | None:
        cpu = _psi_avg10(f"{self.proc}/pressure/cpu")
        if cpu is not None:
            return Pressure("psi", cpu, _psi_avg10(f"{self.proc}/pressure/memory"))
        try:
            load = os.getloadavg()[0]
        except OSError:
            return None
        return Pressure("load", load / max(1, self.cores), _memory_used(f"{self.proc}/meminfo"))


def _psi_avg10(path: str) -> float | None:
    """``some avg10`` of one PSI file, or None where there is none (a kernel without PSI, not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(4096)
    except (OSError, ValueError):
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                name, _, value = field.partition("=")
                if name == "avg10":
                    try:
                        figure = float(value)
                    except ValueError:
                        return None
                    return figure if math.isfinite(figure) else None
    return None


def _memory_used(path: str) -> float | None:
    """Percent of memory in use (100 less ``MemAvailable``), or None where ``/proc/meminfo`` says nothing."""
    figures: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f.read(65536).splitlines():
                name, _, rest = line.partition(":")
                if name in ("MemTotal", "MemAvailable") and rest.split():
                    figures[name] = int(rest.split()[0])
    except (OSError, ValueError):
        return None
    total, available = figures.get("MemTotal"), figures.get("MemAvailable")
    if not total or available is None:
        return None
    return max(0.0, 100.0 * (total - available) / total)


@dataclass(frozen=True)
class Tuning:
    """How fast ``--jobs auto`` moves (seconds of the probe's clock)."""

    sample_secs: float = 2.0
    """The pressure is read at most this often."""
    grow_secs: float = 10.0
    """After any change, this long before the level grows (PSI's averages take ten seconds to show a change)."""
    settle_secs: float = 10.0
    """After a decrease for pressure, this long before another."""
    ceiling_secs: float = 600.0
    """A 429's ceiling rises by one after this long without another 429."""


class Concurrency(Protocol):
    """How many attempts the scheduler lets run at once, now (``level``), and what it heard since (``update``)."""

    @property
    def level(self) -> int: ...

    @property
    def adaptive(self) -> bool:
        """Whether the level may change (``--jobs auto``): the scheduler then queues nothing ahead of it."""
        ...

    def update(self, running: int, waiting: bool, rate_limited: int) -> str | None:
        """Told how many attempts run, whether more wait to start and how many 429s the provider answered so far
        (a running total); why the level changed, or None."""
        ...

    def info(self) -> ConcurrencyInfo | None:
        """The record of it for the run's record and envelope; None for a fixed level."""
        ...


class FixedLevel:
    """``--jobs N``: N attempts at once, whatever happens. In a run whose earlier sessions ran ``--jobs auto``
    (``earlier``), its record keeps their levels and says this session's."""

    adaptive = False

    def __init__(self, jobs: int, earlier: ConcurrencyInfo | None = None, clock: Callable[[], str] = utc_now) -> None:
        self.level = jobs
        self.earlier = earlier
        self._at = clock()

    def update(self, running: int, waiting: bool, rate_limited: int) -> str | None:
        return None

    def info(self) -> ConcurrencyInfo | None:
        if self.earlier is None:
            return None
        fixed = LevelChange(at=self._at, level=self.level, why=f"--jobs {self.level} for this session")
        return self.earlier.model_copy(update={"levels": [*self.earlier.levels, fixed]})


class AutoLevel:
    """``--jobs auto`` (see the module docstring). Touched by the driver's thread only."""

    adaptive = True

    def __init__(
        self,
        max_jobs: int,
        probe: Probe,
        *,
        start: int,
        earlier: ConcurrencyInfo | None = None,
        tuning: Tuning | None = None,
        machine: bool = True,
        clock: Callable[[], str] = utc_now,
    ) -> None:
        self.max_jobs = max_jobs
        self.probe = probe
        self.tuning = tuning or Tuning()
        self.machine = machine
        """Whether this machine's pressure says anything about the attempts (not when they run on a cluster)."""
        self._utc = clock
        self.level = max(1, min(start, max_jobs))
        self.ceiling = max_jobs
        now = probe.now()
        self._changed_at = now
        self._shrunk_at = -math.inf
        self._sampled_at = -math.inf
        self._limited_at = now
        self._seen = 0
        self._first: list[LevelChange] = []
        self._last: deque[LevelChange] = deque(maxlen=KEEP_LAST)
        self.omitted = 0
        if earlier is not None:  # a resumed run: its earlier sessions' levels come first
            self.omitted = earlier.omitted
            for change in earlier.levels:
                self._keep(change)
        self._keep(LevelChange(at=self._utc(), level=self.level, why=f"start (at most {max_jobs})"))

    def update(self, running: int, waiting: bool, rate_limited: int) -> str | None:
        now = self.probe.now()
        fresh, self._seen = rate_limited - self._seen, rate_limited
        if fresh > 0:
            return self._limited(now, running, fresh)
        if self.ceiling < self.max_jobs and now - self._limited_at >= self.tuning.ceiling_secs:
            self.ceiling += 1  # no 429 for a long while: the provider may take one more again
            self._limited_at = now
        if now - self._sampled_at < self.tuning.sample_secs:
            return None
        self._sampled_at = now
        pressure = self.probe.pressure() if self.machine else None
        high = pressure.high() if pressure is not None else None
        if high is not None:
            if self.level > 1 and running <= self.level and now - self._shrunk_at >= self.tuning.settle_secs:
                self._shrunk_at = now
                return self._change(now, (self.level + 1) // 2, f"{high} with {running} running")
            return None
        grows = pressure.low() if pressure is not None else True
        if (
            grows
            and waiting
            and running >= self.level
            and self.level < min(self.ceiling, self.max_jobs)
            and now - self._changed_at >= self.tuning.grow_secs
        ):
            said = pressure.describe() if pressure is not None else "no pressure reading on this machine"
            return self._change(now, self.level + 1, f"room for more: {said}")
        return None

    def _limited(self, now: float, running: int, fresh: int) -> str | None:
        """The provider answered 429 ``fresh`` times since the last look."""
        self._limited_at = now
        if running > self.level:
            return None  # more run than the level allows (it just went down): theirs, not the level's
        lower = max(1, running - 1)
        self.ceiling = min(self.ceiling, lower)
        if lower >= self.level:
            return None
        said = "a 429" if fresh == 1 else f"{fresh} 429s"
        return self._change(now, lower, f"the provider answered {said} with {running} running")

    def _change(self, now: float, level: int, why: str) -> str:
        self.level = level
        self._changed_at = now
        self._keep(LevelChange(at=self._utc(), level=level, why=why))
        return why

    def _keep(self, change: LevelChange) -> None:
        if len(self._first) < KEEP_FIRST:
            self._first.append(change)
            return
        if len(self._last) == self._last.maxlen:
            self.omitted += 1
        self._last.append(change)

    @property
    def changes(self) -> list[LevelChange]:
        return [*self._first, *self._last]

    def info(self) -> ConcurrencyInfo:
        return ConcurrencyInfo(max_jobs=self.max_jobs, levels=self.changes, omitted=self.omitted)
