"""``worktrial check``'s progress: every phase with its counts and an ETA, on a terminal and off one.

A check is two to four phases: the oracle's run, the nop's run, the container tasks' verifier re-runs (runs of the
oracle) and the verifier re-runs on the host, one task after another. Each phase begins with a line naming it
(``check 3/4: ...``). A run is shown as ``eval`` shows one (``ProgressReporter``); the host re-runs get the same
kind of display: a live bar with the count, the elapsed time, the ETA and what runs now on a terminal; off one, a
line whenever a task's re-runs are done and a status line after every quiet ``PLAIN_EVERY_SECS``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from worktrial.cli.progress import PLAIN_EVERY_SECS, REFRESH_PER_SECOND, PlainTicker, ProgressReporter, _clock, bar
from worktrial.cli.progress import eta_text as _eta
from worktrial.engine.check import CheckObserver, CheckPhase
from worktrial.safe_text import for_terminal, terminal_text


class CheckProgress(CheckObserver):
    """The display of one ``check``: ``quiet`` shows only warnings."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        stream: IO[str] | None = None,
        on_warning: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        every: float = PLAIN_EVERY_SECS,
    ) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.on_warning = on_warning
        self.live_mode = not quiet and self.stream.isatty()
        self._clock = clock
        self._every = every
        self._console = Console(file=self.stream)
        self._lock = threading.RLock()
        self._live: Live | None = None
        self.phase: CheckPhase | None = None
        self.began = clock()
        self.done = 0
        self.task_id = ""
        self.activity = ""
        self.ticker = PlainTicker(self.status_line, self._line, clock, every)

    def warning(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            self._line(f"worktrial: warning: {message}")

    def _line(self, text: str) -> None:
        with self._lock:
            if self._live is not None:
                self._live.console.print(Text(for_terminal(text)))
            else:
                print(for_terminal(text), file=self.stream, flush=True)
            self.ticker.wrote()

    def _announce(self, phase: CheckPhase) -> None:
        if not self.quiet:
            self._line(f"worktrial: check {phase.number}/{phase.of}: {phase.title}")

    @contextlib.contextmanager
    def _watching(self, phase: CheckPhase) -> Iterator[ProgressReporter]:
        self._announce(phase)
        reporter = ProgressReporter(
            quiet=self.quiet,
            stream=self.stream,
            on_warning=self.warning,
            clock=self._clock,
            every=self._every,
            title=f"check {phase.number}/{phase.of}",
        )
        try:
            yield reporter
        finally:
            reporter.close()

    def run(self, phase: CheckPhase) -> contextlib.AbstractContextManager[ProgressReporter]:
        return self._watching(phase)

    # -- the verifier re-runs ----------------------------------------------------------------------------

    def begin_reruns(self, phase: CheckPhase) -> None:
        self._announce(phase)
        with self._lock:
            self.phase, self.began, self.done, self.task_id, self.activity = phase, self._clock(), 0, "", ""
        if self.quiet:
            return
        if self.live_mode:
            self._live = Live(get_renderable=self.render, console=self._console, refresh_per_second=REFRESH_PER_SECOND)
            self._live.__enter__()
        else:
            self.ticker.start()

    def rerun(self, task_id: str, activity: str, done: int) -> None:
        with self._lock:
            previous = self.task_id
            finished_task = previous not in ("", task_id)
            self.task_id, self.activity, self.done = task_id, activity, done
        if self.quiet or self._live is not None:
            return
        if finished_task:  # the previous task's re-runs are all done: one line for it
            self._line(self.status_line(previous_task=previous) or "")

    def end_reruns(self) -> None:
        if self.quiet:
            return
        self.ticker.stop()
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)
            self._live = None
        elif self.task_id:
            self._line(self.status_line(previous_task=self.task_id) or "")

    def eta_secs(self) -> float | None:
        """Seconds left: the mean time per finished re-run (the rebuilds and probes included) times those left."""
        if self.phase is None or self.done == 0:
            return None
        per = (self._clock() - self.began) / self.done
        return per * max(0, self.phase.total - self.done)

    def status_line(self, previous_task: str | None = None) -> str | None:
        """Off a terminal: the count, the task (done, or what it does now), elapsed time and the ETA."""
        phase = self.phase
        if phase is None:
            return None
        doing = f"{previous_task} done" if previous_task is not None else f"{self.task_id}: {self.activity}"
        return (
            f"worktrial: [{self.done}/{phase.total}] verifier re-runs · {doing} · elapsed "
            f"{_clock(self._clock() - self.began)} · ETA {_eta(self.eta_secs())}"
        )

    def render(self) -> RenderableType:
        """The live view of the re-runs as of now (called by rich on every refresh)."""
        phase = self.phase
        if phase is None:
            return Text("")
        head = Text.assemble(
            (f"check {phase.number}/{phase.of} · verifier re-runs ", "bold"),
            bar(self.done, phase.total),
            f" {self.done}/{phase.total} · elapsed {_clock(self._clock() - self.began)} · ETA {_eta(self.eta_secs())}",
        )
        now = terminal_text(f"  {self.task_id}: {self.activity}") if self.task_id else Text("")
        now.overflow = "fold"
        return Group(head, now)

    def close(self) -> None:
        self.ticker.stop()
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
