"""How a task's prompt reaches an agent: always in a file, inline only when it fits.

Linux refuses to start a program when any single argument or environment string is longer than 128 KiB
(``MAX_ARG_STRLEN``), and argv plus the environment share one budget of about 2 MiB: a prompt passed in
``WORKTRIAL_PROMPT`` or as a CLI argument makes every attempt fail with "Argument list too long" once it is
big enough. So the harness writes every prompt to ``prompt.txt`` in the attempt's scratch directory and
gives every agent ``WORKTRIAL_PROMPT_FILE``; ``WORKTRIAL_PROMPT`` (and a preset's prompt argument) carry it
inline only up to ``MAX_INLINE_PROMPT_BYTES``. Presets whose CLI can read the prompt from stdin or a file do
so above that size; for a CLI that takes it only as an argument, a prompt beyond the kernel's limit is a
clear error of the attempt instead of a failed start.
"""

from __future__ import annotations

import os
from pathlib import Path

from worktrial.agents.base import AgentContext

PROMPT_FILE = "prompt.txt"
"""Name of ``$WORKTRIAL_PROMPT_FILE`` in the attempt's scratch directory."""
PROMPT_FILE_ENV = "WORKTRIAL_PROMPT_FILE"
PROMPT_ENV = "WORKTRIAL_PROMPT"
MAX_INLINE_PROMPT_BYTES = 64 * 1024
"""Largest prompt (UTF-8 bytes) passed inline: half the kernel's per-string limit, so the variable's name, the
rest of the environment and the other arguments always fit next to it."""
MAX_ARG_BYTES = 128 * 1024 - 1
"""Longest single argv or environment string Linux accepts (``MAX_ARG_STRLEN`` less the terminating NUL)."""

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fits_inline(prompt: str) -> bool:
    """Whether the prompt may also travel in ``WORKTRIAL_PROMPT`` or as a command-line argument."""
    return len(prompt.encode("utf-8")) <= MAX_INLINE_PROMPT_BYTES


def write_prompt_file(scratch: Path, prompt: str) -> Path:
    """Write the prompt as a new file in the (fresh, harness-made) scratch directory; never through a planted one."""
    path = scratch / PROMPT_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(prompt.encode("utf-8"))
    return path


def prompt_file_env(path: Path) -> dict[str, str]:
    """What every agent's environment gets, whatever the prompt's size."""
    return {PROMPT_FILE_ENV: str(path)}


def inline_prompt_env(prompt: str) -> dict[str, str]:
    """``WORKTRIAL_PROMPT`` for command agents, present only when the prompt fits (docs/agents.md)."""
    return {PROMPT_ENV: prompt} if fits_inline(prompt) else {}


def oversized_argument(argv: list[str]) -> int | None:
    """The size in bytes of the first argument the kernel would refuse (``E2BIG``), or None when all fit."""
    for arg in argv:
        size = len(arg.encode("utf-8", "surrogateescape"))
        if size > MAX_ARG_BYTES:
            return size
    return None


def kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB"


def prompt_file_of(ctx: AgentContext) -> Path:
    """The attempt's prompt file: the one the harness wrote, or (an agent driven without the harness) a new one."""
    if ctx.prompt_file is not None:
        return ctx.prompt_file
    path = ctx.scratch / PROMPT_FILE
    if path.is_file() and not path.is_symlink():
        return path
    return write_prompt_file(ctx.scratch, ctx.task.prompt)
