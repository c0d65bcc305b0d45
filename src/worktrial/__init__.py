"""worktrial: evaluate autonomous coding agents with verified outcomes and pass@k / pass^k."""

__version__ = "0.1.0"

from worktrial.run import RunOptions, RunResult, run_suite
from worktrial.suite import load_suite

__all__ = ["RunOptions", "RunResult", "__version__", "load_suite", "run_suite"]
