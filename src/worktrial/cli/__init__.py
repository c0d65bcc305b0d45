"""Command-line interface: commands only; nothing imports it."""

from worktrial.cli.main import main
from worktrial.isolation.tracking import enable_subreaper

__all__ = ["entry", "main"]


def entry() -> None:
    """The ``worktrial`` program: the harness process reaps its agents' orphans, then runs the CLI.

    Only the real program becomes a child subreaper, not a process that merely calls ``main`` (a test runner).
    """
    enable_subreaper()
    main()
