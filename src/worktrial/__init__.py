"""worktrial: evaluate autonomous coding agents with verified outcomes and pass@k / pass^k.

The public names are loaded on first use, so ``worktrial --help`` or ``worktrial runs`` never import the engine,
the agents or a provider SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worktrial.version import __version__

if TYPE_CHECKING:
    from worktrial.engine.run import RunObserver, RunOptions, RunResult, run_suite
    from worktrial.model.suite import load_suite

__all__ = ["RunObserver", "RunOptions", "RunResult", "__version__", "load_suite", "run_suite"]

_LAZY = {
    "RunObserver": "worktrial.engine.run",
    "RunOptions": "worktrial.engine.run",
    "RunResult": "worktrial.engine.run",
    "run_suite": "worktrial.engine.run",
    "load_suite": "worktrial.model.suite",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'worktrial' has no attribute {name!r}")
