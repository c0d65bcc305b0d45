"""Error types that map to exit codes; the CLI turns them into one clear message."""

from __future__ import annotations

EXIT_INTERRUPTED = 130
EXIT_BUDGET = 3
"""The run's budget (--max-cost) stopped it before every attempt ran; resume continues it with a higher one."""
"""Exit code of a run or matrix stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it)."""


class WorktrialError(Exception):
    """Base error: ``str(err)`` is the message shown to the user."""

    exit_code = 1


class BadInputError(WorktrialError):
    """The user's input (suite, flags, workspace) is wrong: exit code 2."""

    exit_code = 2


class SuiteError(BadInputError):
    """A suite file failed to load or validate."""


class WorkspaceError(BadInputError):
    """The workspace is not usable (not a git repository, no commits, bad ref)."""


class TrustError(BadInputError):
    """The suite has not been trusted to run commands on this machine."""


class HarnessError(WorktrialError):
    """worktrial itself failed: exit code 1."""


class RunAborted(WorktrialError):
    """The run stopped early because continuing would repeat the same error on every attempt.

    Exit code 2: such an error (a rejected key, an unknown model) is the user's setup, like any other bad input.
    """

    exit_code = 2
