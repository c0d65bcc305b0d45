"""Per-attempt artifacts: what explains an attempt's outcome, kept locally in the run store, never published.

The envelope and the trace files stay content-free (DESIGN.md); these records hold content (command output, the
agent's stdout/stderr, its patch), always bounded and redacted before they are written. Renderers take them as
optional extras, so a published envelope without artifacts renders too.
"""

from __future__ import annotations

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
