"""Trace files on disk: one aggregate-only JSON file per attempt."""

from __future__ import annotations

import json
from pathlib import Path

from worktrial.model.trace import Trace, trace_filename
from worktrial.util import replace_file


def write_trace(trace: Trace, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / trace_filename(trace.task_id, trace.attempt)
    replace_file(path, json.dumps(trace.model_dump(mode="json"), indent=2) + "\n")
    return path
