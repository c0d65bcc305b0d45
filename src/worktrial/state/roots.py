"""Where runs are stored: one rule for every command that writes or reads them.

Runs live in ``<root>/.worktrial/runs`` where root is the git repository containing ``--workspace`` (or the
current directory). Outside any git repository, which is only possible when the suite is pinned to another
repository (``workspace.repo``), the root is ``--workspace`` or the current directory itself. ``eval`` stores
there and ``runs``, ``report``, ``show``, ``view``, ``compare`` and ``audit`` look there, so a run is found from
where it was started.
"""

from __future__ import annotations

from pathlib import Path

from worktrial.errors import BadInputError
from worktrial.isolation.workspace import find_workspace


def state_root(workspace: Path | None = None) -> Path:
    try:
        return find_workspace(workspace)
    except BadInputError:
        if workspace is not None and not workspace.is_dir():
            raise
        return (workspace or Path.cwd()).resolve()
