"""Live progress of a run: a rich display on a terminal, one plain line per attempt elsewhere."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from worktrial.engine.run import RunObserver
from worktrial.model.records import OUTCOMES, AttemptRecord

_STYLE = {"pass": "green", "fail": "red", "timeout": "yellow", "error": "magenta"}


class ProgressReporter(RunObserver):
    """Observes a run; ``quiet`` shows nothing, ``verbose`` adds every attempt's reason."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        verbose: bool = False,
        stream: IO[str] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self.on_warning = on_warning
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.live_mode = not quiet and self.stream.isatty()
        self.counts: Counter[str] = Counter()
        self.spend = 0.0
        self.priced = False
        self.running: dict[tuple[str, int], float] = {}
        self.total = 0
        self._console = Console(file=self.stream)
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self._console,
        )
        self._bar_task = self._bar.add_task("attempts", total=0)
        self._live: Live | None = None

    # -- callbacks ---------------------------------------------------------------------------------------

    def warning(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            print(f"worktrial: warning: {message}", file=self.stream, flush=True)

    def begin(self, run_id: str, to_run: int, already_done: int) -> None:
        self.total = to_run + already_done
        self._bar.update(self._bar_task, total=self.total, completed=already_done, description=f"run {run_id}")
        if self.live_mode:
            self._live = Live(self._render(), console=self._console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        elif not self.quiet:
            resumed = f" ({already_done} already done)" if already_done else ""
            self._line(f"worktrial: run {run_id}: {to_run} attempts to run{resumed}")

    def start(self, task_id: str, attempt: int) -> None:
        self.running[(task_id, attempt)] = time.monotonic()
        self._refresh()

    def attempt(self, record: AttemptRecord) -> None:
        self.running.pop((record.task_id, record.attempt), None)
        self.counts[record.outcome] += 1
        if record.cost_usd is not None:
            self.spend += record.cost_usd
            self.priced = True
        self._bar.advance(self._bar_task)
        if self.quiet:
            return
        if self._live is not None:
            if self.verbose:
                self._live.console.print(self._plain(record), highlight=False, markup=False)
            self._refresh()
        else:
            self._line(self._plain(record))

    def close(self) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    # -- rendering ---------------------------------------------------------------------------------------

    def _plain(self, record: AttemptRecord) -> str:
        show_reason = record.reason and (self.verbose or record.outcome != "pass")
        why = f" — {record.reason}" if show_reason else ""
        retried = f" (after {record.retries} retries)" if record.retries else ""
        done = int(self._bar.tasks[0].completed)
        return (
            f"[{done}/{self.total}] {record.outcome:>7} {record.task_id} #{record.attempt} "
            f"({record.duration_secs:.1f}s){retried}{why}"
        )

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> RenderableType:
        summary = " · ".join(f"[{_STYLE[o]}]{self.counts[o]} {o}[/]" for o in OUTCOMES)
        if self.priced:
            summary += f" · spend ${self.spend:.4f}"
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for (task_id, attempt), started in sorted(self.running.items(), key=lambda kv: kv[1])[:12]:
            table.add_row(f"  running {task_id} #{attempt}", f"{now - started:5.0f}s")
        return Group(self._bar, summary, table)
