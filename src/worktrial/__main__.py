"""``python -m worktrial`` runs the CLI."""

from worktrial.cli.main import main

main()
