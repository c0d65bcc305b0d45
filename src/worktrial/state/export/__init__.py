"""``worktrial export RUN --format F --output DIR``: a stored run in another tool's layout, one module per format.

Each format is a function from a run (its envelope, and the artifacts and trajectories its store kept) to a new
directory; it returns the lines the command prints. ``FORMATS`` names them for ``--format``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from worktrial.state.export.harbor import export_harbor
from worktrial.state.export.source import ExportOptions, ExportSource, load_source
from worktrial.state.export.swebench import export_swebench

Exporter = Callable[[ExportSource, Path, ExportOptions], list[str]]
FORMATS: dict[str, Exporter] = {
    "harbor": export_harbor,
    "swe-bench": export_swebench,
}

__all__ = ["FORMATS", "ExportOptions", "ExportSource", "Exporter", "load_source"]
