"""Per-attempt artifacts: what explains an attempt's outcome, kept locally in the run store, never published.

The envelope and the trace files stay content-free (DESIGN.md); these records hold content (command output, the
agent's stdout/stderr, its patch), always bounded and redacted before they are written. Renderers take them as
optional extras, so a published envelope without artifacts renders too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Phase = Literal["setup", "agent", "verify"]

# Tails are bounded so a 50 MB log costs at most this much memory and disk per stream.
STREAM_TAIL_BYTES = 1024 * 1024
COMMAND_TAIL_BYTES = 64 * 1024
PATCH_MAX_BYTES = 1024 * 1024


class CommandLog(BaseModel):
    """One setup or verify command as it ran: exit code, duration and the tail of its combined output."""

    phase: Literal["setup", "verify"]
    index: int = Field(description="1-based position among the task's commands of this phase.")
    command: str
    exit_code: int | None = Field(description="None when it never exited on its own (timeout, not started).")
    timed_out: bool = False
    duration_secs: float
    output_tail: str = ""
    output_bytes: int = Field(default=0, description="Bytes the command printed in total (the tail may be shorter).")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def truncated(self) -> bool:
        return self.output_bytes > len(self.output_tail.encode("utf-8", errors="replace"))


class StreamTail(BaseModel):
    """The last bytes of one agent output stream, decoded leniently; ``total_bytes`` is what it printed."""

    text: str = ""
    total_bytes: int = 0
    truncated: bool = False


class Patch(BaseModel):
    """The agent's change against the base commit as a git diff (binary files named, not inlined)."""

    diff: str = ""
    total_bytes: int = 0
    truncated: bool = False
    files: list[str] = Field(default_factory=list, description="Paths the patch touches, untracked files included.")
    ignored: list[str] = Field(
        default_factory=list,
        description="Paths of the patch the tree's ignore rules match: build output the environment's setup "
        "committed into the base (``__pycache__``), which reports show collapsed into one line.",
    )


class AttemptArtifacts(BaseModel):
    """Everything kept for one attempt; each part is None when it never happened (e.g. no agent after setup)."""

    task_id: str
    attempt: int
    commands: list[CommandLog] = Field(default_factory=list)
    agent_stdout: StreamTail | None = None
    agent_stderr: StreamTail | None = None
    patch: Patch | None = None
    redactions: int = Field(default=0, description="How many secret values were replaced by a placeholder.")

    def first_failure(self) -> CommandLog | None:
        """The first setup or verify command that did not succeed: usually the whole story of a failure."""
        return next((c for c in self.commands if not c.ok), None)

    def first_failing_verify(self) -> CommandLog | None:
        return next((c for c in self.commands if c.phase == "verify" and not c.ok), None)


def last_lines(text: str, count: int = 20) -> str:
    """The last ``count`` non-trailing lines of ``text`` (what a report shows of a long output)."""
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-count:])


BUILD_DIRS = frozenset({"__pycache__", ".pytest_cache"})
BUILD_SUFFIXES = (".pyc", ".pyo")
"""Build output that fills patches whatever the repository ignores: Python's byte-code caches."""


def is_build_file(path: str) -> bool:
    parts = path.split("/")
    return path.endswith(BUILD_SUFFIXES) or any(part in BUILD_DIRS for part in parts[:-1])


@dataclass(frozen=True)
class PatchDisplay:
    """A patch as reports show it: the diff of what the agent wrote, and the build files collapsed into one line."""

    diff: str
    collapsed: list[str]
    collapsed_diff: str = ""
    """The sections of the collapsed files, for a page that can unfold them."""


def display_patch(patch: Patch) -> PatchDisplay:
    """The patch without the sections of ignored build files (``Patch.ignored`` and byte-code caches), and their
    paths. Only a section whose header names its path plainly is collapsed: a quoted (unusual) name is always shown."""
    ignored = set(patch.ignored)
    kept: list[str] = []
    folded: list[str] = []
    collapsed: list[str] = []
    hiding = False
    for line in patch.diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            path = _header_path(line)
            hiding = path is not None and (path in ignored or is_build_file(path))
            if path is not None and hiding:
                collapsed.append(path)
        (folded if hiding else kept).append(line)
    return PatchDisplay("".join(kept), collapsed, "".join(folded))


def _header_path(line: str) -> str | None:
    """``P`` of ``diff --git a/P b/P`` (patches have no renames, so both names are the same), else None."""
    names = line[len("diff --git ") :].rstrip("\n")
    size = (len(names) - 5) // 2
    if size < 1 or len(names) != 2 * size + 5 or not names.startswith("a/"):
        return None
    path = names[2 : 2 + size]
    return path if names[2 + size :] == f" b/{path}" else None


def collapsed_line(paths: list[str], shown: int = 3) -> str:
    """One line for the collapsed build files: how many, and the first few paths."""
    names = ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
    noun = "ignored build file" if len(paths) == 1 else "ignored build files"
    return f"{len(paths)} {noun} changed: {names}"
