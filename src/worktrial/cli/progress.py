"""Live progress of a run: a rich display on a terminal, one plain line per attempt elsewhere.

The live view is redrawn four times a second from the current state (not only when an attempt starts or ends),
so each running attempt's elapsed time and phase (setup, agent, verify) stay true while it runs. The ETA comes
from the durations of attempts that finished in this session, and only once there are some; after ``resume``
the bar and the counts both include the attempts done earlier.
"""

from __future__ import annotations

import sys
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

_STYLE = {"pass": "green", "fail": "red", "timeout": "yellow", "error": "magenta"}
REFRESH_PER_SECOND = 4
MAX_RUNNING_SHOWN = 12
BAR_WIDTH = 30


@dataclass
class _Running:
    started: float
    phase: str = "starting"


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressReporter(RunObserver):
    """Observes a run; ``quiet`` shows nothing, ``reasons`` adds every attempt's reason (--reasons)."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        reasons: bool = False,
        stream: IO[str] | None = None,
        on_warning: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
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
        self.run_id = ""
        self._clock = clock
        self._began = clock()
        self._live: Live | None = None

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

    def start(self, task_id: str, attempt: int) -> None:
        self.running[(task_id, attempt)] = _Running(self._clock())
        self.most_parallel = max(self.most_parallel, len(self.running))

    def phase(self, task_id: str, attempt: int, phase: str) -> None:
        running = self.running.get((task_id, attempt))
        if running is not None:
            running.phase = phase

    def attempt(self, record: AttemptRecord) -> None:
        self.running.pop((record.task_id, record.attempt), None)
        self.counts[record.outcome] += 1
        self.done += 1
        self.finished += 1
        self.finished_secs += record.duration_secs + (record.setup_secs or 0.0)  # both are the run's wall time
        if record.cost_usd is not None and self.max_cost is None:  # under a budget, ``spend`` says the run's total
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
        queued = max(0, self.total - self.done - len(self.running))
        left_running = sum(max(0.0, mean - (now - r.started)) for r in self.running.values())
        return (queued * mean + left_running) / max(1, self.most_parallel)

    # -- rendering ---------------------------------------------------------------------------------------

    def _plain(self, record: AttemptRecord) -> str:
        """One line per attempt; the task id and reason (agent text) with their control characters escaped."""
        show_reason = record.reason and (self.reasons or record.outcome != "pass")
        why = f" — {for_terminal(record.reason or '')}" if show_reason else ""
        retried = f" (after {plural(record.retries, 'retry', 'retries')})" if record.retries else ""
        spend = f" · spent ${self.spent:.4f} of ${self.max_cost:g}" if self.max_cost is not None else ""
        setup = f" + setup {record.setup_secs:.1f}s" if record.setup_secs is not None and record.setup_secs >= 1 else ""
        return (
            f"[{self.done}/{self.total}] {record.outcome:>7} {for_terminal(record.task_id)} #{record.attempt} "
            f"({record.duration_secs:.1f}s{setup}){retried}{spend}{why}"
        )

    def _line(self, text: str) -> None:
        print(for_terminal(text), file=self.stream, flush=True)

    def render(self) -> RenderableType:
        """The live view as of now (called by rich on every refresh)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        now = self._clock()
        filled = int(BAR_WIDTH * self.done / self.total) if self.total else 0
        eta = self.eta_secs()
        head = Text.assemble(
            (f"run {for_terminal(self.run_id)} ", "bold"),
            ("━" * filled, "green"),
            ("━" * (BAR_WIDTH - filled), "grey37"),
            f" {self.done}/{self.total} · elapsed {_clock(now - self._began)} · ETA ",
            "—" if eta is None else f"~{_clock(eta)}",
        )
        summary = Text(" · ".join(f"{self.counts[o]} {o}" for o in OUTCOMES))
        for outcome in OUTCOMES:
            summary.highlight_words([f"{self.counts[outcome]} {outcome}"], style=_STYLE[outcome])
        if self.earlier:
            summary.append(f" · {self.earlier} done before this session")
        if self.priced:
            summary.append(f" · spend ${self.spent:.4f}" + (f" of ${self.max_cost:g}" if self.max_cost else ""))
        table = Table.grid(padding=(0, 2))
        ordered = sorted(self.running.items(), key=lambda kv: kv[1].started)
        for (task_id, attempt), running in ordered[:MAX_RUNNING_SHOWN]:
            table.add_row(terminal_text(f"  {task_id} #{attempt}"), running.phase, f"{now - running.started:4.0f}s")
        if len(ordered) > MAX_RUNNING_SHOWN:
            table.add_row(f"  … and {len(ordered) - MAX_RUNNING_SHOWN} more running", "", "")
        return Group(head, summary, table)
