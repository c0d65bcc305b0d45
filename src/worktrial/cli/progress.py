"""Live progress of a run: a rich display on a terminal, plain lines elsewhere.

The live view is redrawn four times a second from the current state (not only when an attempt starts or ends),
so each running attempt's elapsed time and phase (setup, agent, verify) stay true while it runs. The ETA comes
from the durations of attempts that finished in this session, and only once there are some; after ``resume``
the bar and the counts both include the attempts done earlier. Off a terminal (a pipe, a CI log) each attempt is
one line with the counts and the ETA, and a status line follows whenever ``PLAIN_EVERY_SECS`` passed without
one (``PlainTicker``), so a log never goes quiet for minutes while a long attempt runs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from worktrial.engine.run import RunObserver
from worktrial.model.records import OUTCOMES, AttemptRecord
from worktrial.safe_text import for_terminal, terminal_text
from worktrial.util import plural

if TYPE_CHECKING:  # rich is imported for the live view only: plain lines and -q need none of it
    from rich.console import RenderableType
    from rich.live import Live
    from rich.text import Text

_STYLE = {"pass": "green", "fail": "red", "timeout": "yellow", "error": "magenta"}
REFRESH_PER_SECOND = 4
MAX_RUNNING_SHOWN = 12
BAR_WIDTH = 30
PLAIN_EVERY_SECS = 30.0
"""Off a terminal, a status line after this long without any line."""
PLAIN_RUNNING_NAMED = 3


@dataclass
class _Running:
    started: float
    phase: str = "starting"


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_text(eta: float | None) -> str:
    return "—" if eta is None else f"~{_clock(eta)}"


def bar(done: int, total: int) -> Text:
    from rich.text import Text

    filled = int(BAR_WIDTH * done / total) if total else 0
    return Text.assemble(("━" * filled, "green"), ("━" * (BAR_WIDTH - filled), "grey37"))


class PlainTicker:
    """Off a terminal: ``status()`` as a line whenever ``every`` seconds passed without one (``wrote`` says one was
    just written). A daemon thread calls ``tick`` once a second between ``start`` and ``stop``; tests call it."""

    def __init__(
        self,
        status: Callable[[], str | None],
        write: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        every: float = PLAIN_EVERY_SECS,
    ) -> None:
        self._status, self._write, self._clock, self.every = status, write, clock, every
        self._last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        self._last = self._clock()

    def tick(self) -> None:
        now = self._clock()
        if now - self._last < self.every:
            return
        self._last = now
        line = self._status()
        if line is not None:
            self._write(line)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="worktrial-progress-ticker", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class ProgressReporter(RunObserver):
    """Observes a run; ``quiet`` shows nothing, ``reasons`` adds every attempt's reason (--reasons), ``title`` names
    the run in the live view (``check``'s phases)."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        reasons: bool = False,
        stream: IO[str] | None = None,
        on_warning: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        title: str | None = None,
        every: float = PLAIN_EVERY_SECS,
    ) -> None:
        self.on_warning = on_warning
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.reasons = reasons
        self.live_mode = not quiet and self.stream.isatty()
        self.counts: Counter[str] = Counter()
        self.earlier = 0
        self.spent = 0.0
        self.priced = False
        self.max_cost: float | None = None
        self.running: dict[tuple[str, int], _Running] = {}
        self.total = 0
        self.done = 0
        self.finished = 0
        """Attempts finished in this session, and their total duration (the ETA's mean; nothing per attempt is kept)."""
        self.finished_secs = 0.0
        self.most_parallel = 1
        self.level: int | None = None
        """Under ``--jobs auto``: attempts allowed at once now (None: a fixed ``--jobs``)."""
        self.run_id = ""
        self._clock = clock
        self._began = clock()
        self._live: Live | None = None
        self.title = title
        self._lock = threading.RLock()  # the ticker's thread reads what the run's thread changes
        self.ticker = PlainTicker(self.status_line, self._line, clock, every)

    # -- callbacks ---------------------------------------------------------------------------------------

    def warning(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            print(f"worktrial: warning: {for_terminal(message, multiline=True)}", file=self.stream, flush=True)

    def begin(self, run_id: str, to_run: int, done: int) -> None:
        self.run_id = run_id
        self.total = to_run + done
        self.done = self.earlier = done
        self._began = self._clock()
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                get_renderable=self.render,
                console=Console(file=self.stream),
                refresh_per_second=REFRESH_PER_SECOND,
                transient=False,
            )
            self._live.__enter__()
        elif not self.quiet:
            resumed = f" ({done} already done)" if done else ""
            self._line(f"worktrial: run {run_id}: {plural(to_run, 'attempt')} to run{resumed}")
            self.ticker.start()

    def start(self, task_id: str, attempt: int) -> None:
        with self._lock:
            self.running[(task_id, attempt)] = _Running(self._clock())
            self.most_parallel = max(self.most_parallel, len(self.running))

    def phase(self, task_id: str, attempt: int, phase: str) -> None:
        running = self.running.get((task_id, attempt))
        if running is not None:
            running.phase = phase

    def attempt(self, record: AttemptRecord) -> None:
        with self._lock:
            self.running.pop((record.task_id, record.attempt), None)
            self.counts[record.outcome] += 1
            self.done += 1
            # Both are the run's wall time; a regraded attempt's agent ran in another run, only its verifier here.
            spent_here = record.verify_secs if record.provenance is not None else record.duration_secs
            self.finished += 1
            self.finished_secs += spent_here + (record.setup_secs or 0.0)
            if record.cost_usd is not None and self.max_cost is None:  # under a budget, ``spend`` says the total
                self.spent += record.cost_usd
                self.priced = True
        if self.quiet:
            return
        if self._live is not None:
            if self.reasons:
                self._live.console.print(self._plain(record), highlight=False, markup=False)
        else:
            self._line(self._plain(record))

    def spend(self, spent: float, max_cost: float | None) -> None:
        """The run's spend (earlier sessions included) against its budget; shown from the next line on."""
        self.spent, self.max_cost, self.priced = spent, max_cost, True

    def concurrency(self, level: int, why: str) -> None:
        """``--jobs auto`` chose a level: shown in the live view's head, a line of its own elsewhere."""
        self.level = level
        if not self.quiet and self._live is None:
            self._line(f"worktrial: --jobs auto: {plural(level, 'attempt')} at once ({why})")

    def stopping(self, waiting: bool = False) -> None:
        """Said at once on Ctrl-C: the bar stops (it would tick on while attempts end) and one line says why."""
        self.close()
        again = "(Ctrl-C again ends everything at once)"
        if waiting:
            line = f"worktrial: still stopping: waiting for an attempt to finish a step no signal ends {again}"
        else:
            line = f"worktrial: stopping… ending the running attempts; finished ones are kept {again}"
        print(line, file=self.stream, flush=True)

    def close(self) -> None:
        self.ticker.stop()
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)
            self._live = None

    # -- figures -----------------------------------------------------------------------------------------

    def eta_secs(self) -> float | None:
        """Seconds left, from the mean duration of attempts finished in this session; None before the first."""
        if not self.finished:
            return None
        mean = self.finished_secs / self.finished
        now = self._clock()
        with self._lock:
            queued = max(0, self.total - self.done - len(self.running))
            left_running = sum(max(0.0, mean - (now - r.started)) for r in self.running.values())
        return (queued * mean + left_running) / max(1, self.most_parallel)

    def status_line(self) -> str | None:
        """Off a terminal, after a quiet while: the counts, what runs now, elapsed time and the ETA."""
        now = self._clock()
        with self._lock:
            ordered = sorted(self.running.items(), key=lambda kv: kv[1].started)
        if not ordered:
            return None
        named = ", ".join(
            f"{task_id} #{attempt} ({running.phase} {_clock(now - running.started)})"
            for (task_id, attempt), running in ordered[:PLAIN_RUNNING_NAMED]
        )
        more = f" and {len(ordered) - PLAIN_RUNNING_NAMED} more" if len(ordered) > PLAIN_RUNNING_NAMED else ""
        return (
            f"[{self.done}/{self.total}] running: {named}{more} · elapsed {_clock(now - self._began)} "
            f"· ETA {eta_text(self.eta_secs())}"
        )

    # -- rendering ---------------------------------------------------------------------------------------

    def _plain(self, record: AttemptRecord) -> str:
        """One line per attempt; the task id and reason (agent text) with their control characters escaped."""
        show_reason = record.reason and (self.reasons or record.outcome != "pass")
        why = f" — {for_terminal(record.reason or '')}" if show_reason else ""
        retried = f" (after {plural(record.retries, 'retry', 'retries')})" if record.retries else ""
        retried += f" ({record.provenance.kind})" if record.provenance is not None else ""
        spend = f" · spent ${self.spent:.4f} of ${self.max_cost:g}" if self.max_cost is not None else ""
        setup = f" + setup {record.setup_secs:.1f}s" if record.setup_secs is not None and record.setup_secs >= 1 else ""
        eta = self.eta_secs() if self.done < self.total else None
        left = f" · ETA {eta_text(eta)}" if eta is not None else ""
        return (
            f"[{self.done}/{self.total}] {record.outcome:>7} {for_terminal(record.task_id)} #{record.attempt} "
            f"({record.duration_secs:.1f}s{setup}){retried}{spend}{left}{why}"
        )

    def _line(self, text: str) -> None:
        with self._lock:
            print(for_terminal(text), file=self.stream, flush=True)
            self.ticker.wrote()

    def render(self) -> RenderableType:
        """The live view as of now (called by rich on every refresh)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        now = self._clock()
        name = f"{self.title} · run {self.run_id}" if self.title else f"run {self.run_id}"
        head = Text.assemble(
            (f"{for_terminal(name)} ", "bold"),
            bar(self.done, self.total),
            f" {self.done}/{self.total} · elapsed {_clock(now - self._began)} · ETA {eta_text(self.eta_secs())}",
        )
        if self.level is not None:
            head.append(f" · jobs auto: {self.level}")
        summary = Text(" · ".join(f"{self.counts[o]} {o}" for o in OUTCOMES))
        for outcome in OUTCOMES:
            summary.highlight_words([f"{self.counts[outcome]} {outcome}"], style=_STYLE[outcome])
        if self.earlier:
            summary.append(f" · {self.earlier} done before this session")
        if self.priced:
            summary.append(f" · spend ${self.spent:.4f}" + (f" of ${self.max_cost:g}" if self.max_cost else ""))
        table = Table.grid(padding=(0, 2))
        table.add_column(overflow="fold")  # a task id wraps, never ends in "…" (several ids can share a prefix)
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, justify="right")
        with self._lock:
            ordered = sorted(self.running.items(), key=lambda kv: kv[1].started)
        for (task_id, attempt), running in ordered[:MAX_RUNNING_SHOWN]:
            table.add_row(terminal_text(f"  {task_id} #{attempt}"), running.phase, f"{now - running.started:4.0f}s")
        if len(ordered) > MAX_RUNNING_SHOWN:
            table.add_row(f"  … and {len(ordered) - MAX_RUNNING_SHOWN} more running", "", "")
        return Group(head, summary, table)
