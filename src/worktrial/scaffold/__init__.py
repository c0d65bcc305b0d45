"""``worktrial init``: a starter suite for the repository it runs in (its kind detected, its environment set up, a
working task, a planted bug with its hidden test), as a suite file or as Harbor task directories.

Only the CLI imports this package; it imports nothing of worktrial but ``errors``.
"""
