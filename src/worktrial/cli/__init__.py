"""Command-line interface: commands only; nothing imports it."""

from worktrial.cli.main import main

__all__ = ["main"]
