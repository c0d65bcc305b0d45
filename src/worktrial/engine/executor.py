"""Executors run attempt plans and hand results back to the run, in the caller's thread."""

from worktrial.engine.local import Event, LocalExecutor

__all__ = ["Event", "LocalExecutor"]
