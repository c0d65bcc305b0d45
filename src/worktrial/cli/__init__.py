"""Command-line interface: commands only; nothing imports it."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["entry", "main"]


def __getattr__(name: str) -> Any:
    if name == "main":  # the click group, imported on first use (``worktrial --version`` never needs it)
        from worktrial.cli.main import main

        return main
    raise AttributeError(name)


def entry() -> None:
    """The ``worktrial`` program: the harness process reaps its agents' orphans, then runs the CLI.

    Only the real program becomes a child subreaper, not a process that merely calls ``main`` (a test runner).
    ``worktrial --version`` answers before the commands (and everything they import) are loaded.
    """
    if sys.argv[1:] == ["--version"]:
        from worktrial.version import __version__

        print(f"worktrial, version {__version__}")
        return
    from worktrial.cli.main import main
    from worktrial.isolation.tracking import enable_subreaper

    enable_subreaper()
    main()
