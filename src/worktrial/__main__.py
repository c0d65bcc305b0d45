"""``python -m worktrial`` runs the CLI."""

from worktrial.cli import entry

entry()
