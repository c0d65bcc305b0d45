"""worktrial: evaluate autonomous coding agents with verified outcomes and pass@k / pass^k."""

from worktrial.engine.run import RunObserver, RunOptions, RunResult, run_suite
from worktrial.model.suite import load_suite
from worktrial.version import __version__

__all__ = ["RunObserver", "RunOptions", "RunResult", "__version__", "load_suite", "run_suite"]
