"""Defaults that the command line's help shows, apart from the models: ``worktrial --help`` imports no pydantic."""

DEFAULT_GRACE_SECS = 5.0
"""Between SIGTERM at an agent's deadline and SIGKILL (``--grace-secs``): time for the agent to save its work."""
