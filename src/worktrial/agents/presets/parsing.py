"""Shared pieces for reading agent CLIs' machine output into a Usage and a claim.

Every parser follows one contract: it is fed stdout incrementally (``feed``), then asked once for the
verdict (``finish``). It must never raise and never grow without bound: an agent that prints gigabytes,
stops mid-line at a timeout or mixes log lines into its JSON still costs constant memory and yields
"usage unknown" with a note saying why, never a crashed run.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from worktrial.agents.pricing import cost_usd
from worktrial.model.config import Price
from worktrial.model.records import ErrorCategory, Tokens, Usage

if TYPE_CHECKING:
    from worktrial.agents.base import AgentContext

log = logging.getLogger(__name__)
MAX_LINE_BYTES = 8 * 1024 * 1024
"""A single JSON event larger than this is skipped (and noted) instead of buffered."""
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""Upper bound for parsers that need the whole stdout as one JSON document."""
MAX_FILE_BYTES = 64 * 1024 * 1024
"""Upper bound for usage logs and trajectories read from the scratch directory."""


@dataclass(frozen=True)
class ExitInfo:
    """How the agent process ended, as far as a parser needs to know."""

    returncode: int | None
    timed_out: bool
    scratch: Path
    """The attempt's scratch directory, where file-based parsers find their logs."""
    stderr_tail: bytes = b""
    """The end of the agent's stderr, for CLIs that print their final error there (Gemini CLI)."""


@dataclass
class Verdict:
    """What a parser concluded: the claim, a content-free reason, usage, and whether the agent broke."""

    claimed: bool | None
    usage: Usage
    reason: str | None = None
    error_category: ErrorCategory | None = None
    """Set when the agent itself broke (exited non-zero without reporting anything) or its provider failed."""
    fatal: bool = False
    """The error would repeat on every attempt (a rejected key, an unknown model): stop the run."""
    model: str | None = None
    """The model the CLI says it used (from its own init or metadata events), when it says so."""


class OutputParser(Protocol):
    """Reads one attempt's output. ``feed`` may be called from a reader thread; ``finish`` exactly once."""

    def feed(self, chunk: bytes) -> None: ...

    def finish(self, exit_info: ExitInfo) -> Verdict: ...


ParserFactory = Callable[[], OutputParser]


class StreamingUsage(Protocol):
    """A parser that knows the tokens spent so far while the agent runs (its events carry usage per model call):
    the attempt's cost cap (``--max-cost-per-attempt``) then ends the agent as it passes the cap."""

    def tokens_so_far(self) -> Tokens | None: ...


def watch_spend(parser: OutputParser, price: Callable[[], Price | None], ctx: AgentContext) -> Callable[[bytes], None]:
    """``parser.feed``, which also ends the agent (``ctx.cancel``) once its streamed spend passes its cost cap.

    Only parsers that see usage as it streams (``StreamingUsage``) can do that; for the others the cap is checked
    after the agent ends (docs/agents.md).
    """
    streaming = getattr(parser, "tokens_so_far", None)
    if ctx.cost_cap is None or streaming is None:
        return parser.feed

    def feed(chunk: bytes) -> None:
        parser.feed(chunk)
        if ctx.cancel.is_set():
            return
        tokens = streaming()
        if tokens is not None:
            ctx.over_cap(cost_usd(tokens, price()))

    return feed


# --- small, total accessors: wrong types read as "absent", never as an exception ---------------------


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    """A non-negative integer, or None (booleans, floats with fractions and negatives are rejected)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def as_cost(value: Any) -> float | None:
    """A finite, non-negative number of dollars, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) and number >= 0 else None
    return None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def plus(a: int | None, b: int | None) -> int | None:
    """Sum where None means "not reported": None + None stays None."""
    return None if a is None and b is None else (a or 0) + (b or 0)


def add_cost(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def bump(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def tokens_from(fields: dict[str, Any], mapping: dict[str, str]) -> Tokens:
    """Build Tokens from ``fields`` using ``{Tokens attribute: source key}``; bad values become None."""
    return Tokens(**{attr: as_int(fields.get(key)) for attr, key in mapping.items()})


def exit_reason(label: str, exit_info: ExitInfo) -> str:
    if exit_info.returncode is not None and exit_info.returncode < 0:
        return f"{label} killed by signal {-exit_info.returncode}"
    return f"{label} exited {exit_info.returncode}"


# --- incremental line splitting with a bounded buffer ---------------------------------------------------


class LineSplitter:
    """Splits a byte stream into lines, holding at most ``limit`` bytes of one unfinished line.

    A longer line is dropped (counted in ``oversized``) and the splitter resynchronises at the next newline.
    """

    def __init__(self, on_line: Callable[[bytes], None], limit: int = MAX_LINE_BYTES) -> None:
        self.on_line = on_line
        self.limit = limit
        self.oversized = 0
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not self._skipping:
                self._buffer += chunk[start:end]
                if len(self._buffer) > self.limit:
                    self._buffer.clear()
                    self._skipping = True
                    self.oversized += 1
            if newline < 0:
                return
            if not self._skipping:
                self.on_line(bytes(self._buffer))
            self._buffer.clear()
            self._skipping = False
            start = newline + 1

    def close(self) -> bool:
        """Flush a final unterminated line; True when the stream ended mid-line."""
        partial = bool(self._buffer) or self._skipping
        if self._buffer and not self._skipping:
            self.on_line(bytes(self._buffer))
        self._buffer.clear()
        self._skipping = False
        return partial


@dataclass
class StreamState:
    """Counters every JSON-lines parser keeps so ``finish`` can explain an unusable stream."""

    events: int = 0
    garbage_lines: int = 0
    handler_errors: int = 0
    notes: list[str] = field(default_factory=list)


class JsonLinesParser:
    """Base for agents that print one JSON object per line; subclasses implement ``on_event`` and ``verdict``.

    Lines that are not JSON objects (log output, banners, a half-written last line) are counted, not fatal.
    An exception inside ``on_event`` (a shape the parser did not expect) is counted and the line skipped.
    """

    label = "agent"

    def __init__(self) -> None:
        self.state = StreamState()
        self._lock = threading.Lock()
        self._splitter = LineSplitter(self._line)
        self._finished = False

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            if not self._finished:
                self._splitter.feed(chunk)

    def _line(self, raw: bytes) -> None:
        text = raw.strip()
        if not text:
            return
        try:
            event = json.loads(text)
        except (UnicodeDecodeError, ValueError):
            self.state.garbage_lines += 1
            return
        if not isinstance(event, dict):
            self.state.garbage_lines += 1
            return
        self.state.events += 1
        try:
            self.on_event(event)
        except Exception:  # a surprising shape costs one event, never the attempt
            self.state.handler_errors += 1
            log.debug("%s: event of unexpected shape ignored", self.label, exc_info=True)

    def on_event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        raise NotImplementedError

    def finish(self, exit_info: ExitInfo) -> Verdict:
        with self._lock:
            cut_mid_line = self._splitter.close()
            self._finished = True
        try:
            result = self.verdict(exit_info)
        except Exception as exc:  # the contract: a parser never crashes the run
            log.warning(
                "%s parser failed (usage unknown): %r", self.label, exc, exc_info=log.isEnabledFor(logging.DEBUG)
            )
            result = Verdict(claimed=None, usage=Usage(), reason=f"{self.label} output could not be interpreted")
            result.usage.notes.append(f"{self.label} parser failed: {type(exc).__name__}; usage unknown")
        notes = result.usage.notes
        if self.state.garbage_lines:
            notes.append(f"{self.label}: {self.state.garbage_lines} non-JSON output line(s) ignored")
        if self.state.handler_errors:
            notes.append(f"{self.label}: {self.state.handler_errors} event(s) of unexpected shape ignored")
        if self._splitter.oversized:
            notes.append(f"{self.label}: {self._splitter.oversized} line(s) over {MAX_LINE_BYTES} bytes skipped")
        if cut_mid_line and exit_info.timed_out:
            notes.append(f"{self.label}: output was cut off mid-event by the timeout")
        if self.state.events == 0:
            notes.append(f"{self.label}: no JSON events in the output; usage unknown")
        notes.extend(self.state.notes)
        return result

    def fallback(self, exit_info: ExitInfo, usage: Usage, what: str) -> Verdict:
        """The verdict when the final event never came: judge by the exit status alone."""
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if exit_info.returncode == 0:
            return Verdict(claimed=None, usage=usage, reason=f"{self.label} exited 0 without {what}")
        if self.state.events == 0:
            return Verdict(
                claimed=None,
                usage=usage,
                reason=exit_reason(self.label, exit_info) + " before reporting anything",
                error_category=ErrorCategory.AGENT_FAILED,
            )
        return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))


class DocumentParser:
    """Base for agents that print a single JSON document at exit; the buffer is bounded."""

    label = "agent"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            if self._overflow:
                return
            self._buffer += chunk
            if len(self._buffer) > MAX_DOCUMENT_BYTES:
                self._buffer.clear()
                self._overflow = True

    def document(self) -> tuple[dict[str, Any] | None, str | None]:
        """The parsed object (or None) and a short note: why there is none, or what was skipped to find it."""
        with self._lock:
            if self._overflow:
                return None, f"{self.label}: output larger than {MAX_DOCUMENT_BYTES} bytes; usage unknown"
            text = bytes(self._buffer).decode("utf-8", "replace").strip()
        if not text:
            return None, f"{self.label}: empty output; usage unknown"
        candidates = [text]
        # Tolerate log lines printed before the document: retry from each line that opens an object.
        start = text.find("\n{")
        while start >= 0 and len(candidates) < 16:
            candidates.append(text[start + 1 :])
            start = text.find("\n{", start + 1)
        for index, candidate in enumerate(candidates):
            try:
                value = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(value, dict):
                skipped = text[: len(text) - len(candidate)].count("\n")
                return value, (f"{self.label}: {skipped} non-JSON line(s) before the result ignored" if index else None)
        return None, f"{self.label}: output is not a JSON document; usage unknown"


def read_json_file(path: Path, label: str, notes: list[str]) -> Any:
    """A JSON file the agent wrote into scratch, or None with a note (missing, too big, malformed)."""
    try:
        size = path.stat().st_size
    except OSError:
        notes.append(f"{label}: {path.name} was not written; usage unknown")
        return None
    if size > MAX_FILE_BYTES:
        notes.append(f"{label}: {path.name} is larger than {MAX_FILE_BYTES} bytes; usage unknown")
        return None
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        notes.append(f"{label}: {path.name} is not valid JSON; usage unknown")
        return None


def iter_json_lines(path: Path, label: str, notes: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file in scratch; malformed lines are counted in a note."""
    events: list[dict[str, Any]] = []
    bad = 0
    try:
        with path.open("rb") as fh:
            read = 0
            for raw in fh:
                read += len(raw)
                if read > MAX_FILE_BYTES:
                    notes.append(f"{label}: {path.name} truncated at {MAX_FILE_BYTES} bytes")
                    break
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(value, dict):
                    events.append(value)
                else:
                    bad += 1
    except OSError:
        notes.append(f"{label}: {path.name} was not written; usage unknown")
        return events
    if bad:
        notes.append(f"{label}: {bad} malformed line(s) in {path.name} ignored")
    return events
