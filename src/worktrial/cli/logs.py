"""Where log records go: stderr, warnings by default, more with the global ``-v`` (info) or ``-vv`` (debug).

Library code logs under the ``worktrial`` logger (``logging.getLogger(__name__)``) and never configures logging
itself, so an embedding program keeps control; only the command line installs a handler.
"""

from __future__ import annotations

import logging
import sys

from worktrial.safe_text import for_terminal

ROOT = "worktrial"
LEVELS = (logging.WARNING, logging.INFO, logging.DEBUG)


class _CliHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler the CLI installed, so a second invocation in one process replaces it."""


class _TerminalFormatter(logging.Formatter):
    """Log messages quote paths and agent text: their control characters are shown escaped, never sent raw."""

    def format(self, record: logging.LogRecord) -> str:
        return for_terminal(super().format(record), multiline=True)


def configure(verbosity: int) -> logging.Logger:
    """Send ``worktrial`` records at the level ``verbosity`` asks for to the current stderr."""
    logger = logging.getLogger(ROOT)
    for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
        logger.removeHandler(handler)
    handler = _CliHandler(sys.stderr)  # the stream of this invocation (tests swap sys.stderr per invocation)
    handler.setFormatter(_TerminalFormatter("worktrial: %(levelname)s: %(message)s [%(name)s]"))
    logger.addHandler(handler)
    logger.setLevel(LEVELS[min(max(verbosity, 0), len(LEVELS) - 1)])
    logger.propagate = False
    return logger
