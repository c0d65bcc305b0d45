"""The builtin agent's tools, run without approval but confined to the attempt's worktree.

Every path argument is resolved (following symlinks) and rejected if it ends up outside the worktree, whether by
``..``, an absolute path or a symlink pointing out. ``bash`` runs through ``worktrial.isolation.proc`` like every other
process, in the worktree, with a per-call timeout that never outlives the attempt's deadline; note that a shell
command itself can still read outside the worktree (there is no sandbox below the process level).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.agents.builtin.specs import (
    SPECS,
    BashArgs,
    EditFileArgs,
    InvalidArguments,
    ListFilesArgs,
    ReadFileArgs,
    SearchArgs,
    ToolArgs,
    WriteFileArgs,
    parse_arguments_for,
)
from worktrial.isolation import proc
from worktrial.model.commands import SHELL

LIST_LIMIT = 1000
SEARCH_MATCH_LIMIT = 200
SEARCH_FILE_BYTES = 2 * 1024 * 1024
SEARCH_LINE_CHARS = 300
BINARY_SNIFF_BYTES = 8192


class ToolFailure(Exception):
    """A tool could not do what was asked; the message goes back to the model (never into a trace)."""


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    output_bytes: int = 0


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within about ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters omitted ...]\n{text[-half:]}"


class _Head:
    """Keeps the first ``limit`` bytes of a stream (proc keeps the tail)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data.extend(chunk[:room])


def _is_binary(path: Path) -> bool:
    with path.open("rb") as fh:
        return b"\0" in fh.read(BINARY_SNIFF_BYTES)


class Toolbox:
    """The tools of one attempt: worktree root, child environment, output limit and the deadline."""

    def __init__(
        self,
        worktree: Path,
        env: dict[str, str],
        *,
        output_limit: int,
        bash_timeout_secs: float,
        remaining: Callable[[], float],
        scope: proc.ProcessScope | None = None,
    ) -> None:
        self.root = worktree.resolve()
        self.env = {**env, "GIT_PAGER": "cat", "PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
        self.output_limit = output_limit
        self.bash_timeout_secs = bash_timeout_secs
        self.remaining = remaining
        self.scope = scope
        self.shell = shutil.which("bash") or SHELL
        # Each handler takes its tool's argument model; execute() validates before dispatching.
        self._handlers: dict[str, Callable[[Any], ToolOutcome]] = {
            "bash": self.bash,
            "read_file": self.read_file,
            "write_file": self.write_file,
            "edit_file": self.edit_file,
            "list_files": self.list_files,
            "search": self.search,
        }

    def execute(self, name: str, arguments: Mapping[str, Any] | ToolArgs) -> ToolOutcome:
        """Run a call (validating raw arguments first); a ToolFailure becomes an error result for the model."""
        try:
            args = arguments if isinstance(arguments, ToolArgs) else parse_arguments_for(SPECS[name], arguments)
            outcome = self._handlers[name](args)
        except InvalidArguments as exc:
            return ToolOutcome(str(exc), is_error=True)
        except ToolFailure as exc:
            return ToolOutcome(str(exc), is_error=True)
        except OSError as exc:
            return ToolOutcome(f"{name} failed: {exc.strerror or exc}", is_error=True)
        return ToolOutcome(truncate_middle(outcome.content, self.output_limit), outcome.is_error, outcome.output_bytes)

    def resolve(self, raw: str) -> Path:
        """The real path inside the worktree that ``raw`` names, or ToolFailure if it leaves the worktree."""
        if not raw.strip() or "\0" in raw:
            raise ToolFailure("path must be a non-empty string")
        given = Path(raw)
        resolved = (given if given.is_absolute() else self.root / given).resolve()
        if not resolved.is_relative_to(self.root):
            raise ToolFailure(f"path {raw!r} is outside the worktree; use paths relative to the repository root")
        return resolved

    def _display(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def bash(self, args: BashArgs) -> ToolOutcome:
        timeout = max(0.0, min(float(args.timeout_secs or self.bash_timeout_secs), self.remaining()))
        if timeout <= 0:
            raise ToolFailure("no time left in this attempt to run a command")
        head = _Head(self.output_limit)
        # One stream, so the model sees stdout and stderr interleaved as a terminal would show them.
        result = proc.run(
            [self.shell, "-c", "exec 2>&1\n" + args.command],
            cwd=self.root,
            env=self.env,
            timeout=timeout,
            tail_bytes=self.output_limit,
            on_stdout=head.feed,
            scope=self.scope,
        )
        if result.start_error or result.not_found:
            raise ToolFailure(f"cannot run the shell: {result.start_error or result.not_found}")
        # Room for the status line and the omission marker, so the result is never truncated twice.
        budget = self.output_limit - 200
        if result.stdout_bytes <= budget:
            output = result.stdout_tail.decode("utf-8", "replace")
        else:
            half = budget // 2
            omitted = result.stdout_bytes - 2 * half
            output = (
                head.data[:half].decode("utf-8", "replace")
                + f"\n[... {omitted} bytes omitted ...]\n"
                + result.stdout_tail[-half:].decode("utf-8", "replace")
            )
        if result.timed_out:
            status = f"timed out after {timeout:.0f}s (the command and its children were killed)"
        else:
            status = f"exit code {result.returncode}"
        return ToolOutcome(f"{status}\n{output}", is_error=result.timed_out, output_bytes=result.output_bytes)

    def read_file(self, args: ReadFileArgs) -> ToolOutcome:
        path = self.resolve(args.path)
        if path.is_dir():
            raise ToolFailure(f"{args.path} is a directory; use list_files")
        if not path.is_file():
            raise ToolFailure(f"{args.path} does not exist")
        if _is_binary(path):
            return ToolOutcome(f"{args.path} is a binary file ({path.stat().st_size} bytes); use bash to inspect it")
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        start = args.start_line or 1
        end = args.end_line or len(lines)
        if start > max(1, len(lines)) or end < start:
            raise ToolFailure(f"line range {start}-{end} is outside the file's {len(lines)} lines")
        numbered = [f"{n:>6}\t{lines[n - 1]}" for n in range(start, min(end, len(lines)) + 1)]
        header = f"{self._display(path)}: lines {start}-{min(end, len(lines))} of {len(lines)}"
        return ToolOutcome("\n".join([header, *numbered]))

    def write_file(self, args: WriteFileArgs) -> ToolOutcome:
        path = self.resolve(args.path)
        if path.is_dir():
            raise ToolFailure(f"{args.path} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = args.content.encode("utf-8")
        path.write_bytes(data)
        return ToolOutcome(f"wrote {len(data)} bytes to {self._display(path)}")

    def edit_file(self, args: EditFileArgs) -> ToolOutcome:
        path = self.resolve(args.path)
        old, new = args.old_string, args.new_string
        if not path.is_file():
            raise ToolFailure(f"{args.path} does not exist or is not a file")
        if not old:
            raise ToolFailure("old_string must not be empty; use write_file to create or replace a whole file")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(f"{args.path} is not a UTF-8 text file; use bash to change it") from None
        count = text.count(old)
        if count == 0:
            raise ToolFailure(f"old_string was not found in {args.path}; read the file and copy the text exactly")
        if count > 1:
            raise ToolFailure(
                f"old_string occurs {count} times in {args.path}; include more surrounding text so it matches once"
            )
        path.write_bytes(text.replace(old, new, 1).encode("utf-8"))
        return ToolOutcome(f"replaced 1 occurrence in {self._display(path)}")

    def _walk(self, top: Path, max_depth: int | None) -> list[Path]:
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(top):
            here = Path(dirpath)
            depth = len(here.relative_to(top).parts)
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            found.extend(here / d for d in dirnames)
            if max_depth is not None and depth + 1 >= max_depth:
                dirnames[:] = []
            found.extend(here / f for f in sorted(filenames))
        return found

    def list_files(self, args: ListFilesArgs) -> ToolOutcome:
        top = self.resolve(args.path or ".")
        if not top.is_dir():
            raise ToolFailure(f"{args.path} is not a directory")
        entries = self._walk(top, args.depth or 2)
        shown = sorted(self._display(p) + ("/" if p.is_dir() else "") for p in entries)
        more = len(shown) - LIST_LIMIT
        text = "\n".join(shown[:LIST_LIMIT]) or "(empty)"
        return ToolOutcome(text + (f"\n[... {more} more entries]" if more > 0 else ""))

    def search(self, args: SearchArgs) -> ToolOutcome:
        try:
            pattern = re.compile(args.pattern)
        except re.error as exc:
            raise ToolFailure(f"invalid regular expression: {exc}") from None
        top = self.resolve(args.path or ".")
        glob = args.glob
        files = [top] if top.is_file() else [p for p in self._walk(top, None) if p.is_file()]
        matches: list[str] = []
        stop_at = time.monotonic() + min(30.0, max(1.0, self.remaining()))
        for file in files:
            if len(matches) >= SEARCH_MATCH_LIMIT or time.monotonic() > stop_at:
                break
            real = file.resolve()
            shown = self._display(file)
            if glob and not (fnmatch.fnmatch(shown, glob) or fnmatch.fnmatch(file.name, glob)):
                continue
            if not real.is_relative_to(self.root) or real.stat().st_size > SEARCH_FILE_BYTES or _is_binary(real):
                continue
            for n, line in enumerate(real.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
                if pattern.search(line[:SEARCH_LINE_CHARS]):
                    matches.append(f"{shown}:{n}: {line[:SEARCH_LINE_CHARS]}")
                    if len(matches) >= SEARCH_MATCH_LIMIT:
                        break
        if not matches:
            return ToolOutcome("no matches")
        suffix = f"\n[stopped at {SEARCH_MATCH_LIMIT} matches]" if len(matches) >= SEARCH_MATCH_LIMIT else ""
        return ToolOutcome("\n".join(matches) + suffix)
