"""What every export format reads: a run's envelope and what its store kept per attempt."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from worktrial.errors import BadInputError, WorktrialError
from worktrial.model.artifacts import AttemptArtifacts
from worktrial.model.envelope import Envelope
from worktrial.model.records import AttemptRecord
from worktrial.model.run_config import RunConfig
from worktrial.state.artifacts import artifacts_for_envelope, run_dir_of
from worktrial.state.history import resolve_envelope
from worktrial.state.store import RunStore
from worktrial.state.trajectories import read_trajectory_file


@dataclass
class ExportSource:
    """One run to export: the envelope, and (for a run in a store) its artifacts and trajectories by attempt."""

    envelope: Envelope
    envelope_json: str
    run_dir: Path | None
    artifacts: dict[tuple[str, int], AttemptArtifacts] = field(default_factory=dict)
    trajectory_files: dict[tuple[str, int], bytes] = field(default_factory=dict)
    """Each stored trajectory file's bytes, exactly as its record's digest covers them."""
    trajectory_problems: list[str] = field(default_factory=list)
    config: RunConfig | None = None
    """The run's frozen config, from its store (None for an envelope published elsewhere)."""

    def records(self) -> list[AttemptRecord]:
        return [a for t in self.envelope.report.tasks for a in t.attempts]


def load_source(ref: str, state_root: Callable[[], Path]) -> ExportSource:
    """The run ``ref`` names (a stored run id, a run directory or an envelope file), with what its store kept."""
    loaded = resolve_envelope(ref, state_root)
    envelope = loaded.envelope
    run_dir = run_dir_of(loaded.source)
    source = ExportSource(envelope, envelope.to_json(), run_dir)
    keys = [(a.task_id, a.attempt) for a in source.records()]
    source.artifacts = artifacts_for_envelope(loaded.source, keys)
    if run_dir is None:
        return source
    with contextlib.suppress(WorktrialError, OSError):
        source.config = RunStore.open(run_dir.parents[2], run_dir.name).meta().config
    for record in source.records():
        data, why = read_trajectory_file(run_dir, record.task_id, record.attempt, record.trajectory)
        if data is not None:
            source.trajectory_files[(record.task_id, record.attempt)] = data
        elif why:
            source.trajectory_problems.append(f"{record.task_id} #{record.attempt}: {why}")
    return source


@dataclass(frozen=True)
class ExportOptions:
    """What a format may ask of the user besides the run: the leaderboard's ``metadata.yaml`` fields (harbor) and
    whether to write a run that breaks a leaderboard's rules."""

    agent_url: str | None = None
    agent_display_name: str | None = None
    agent_org: str | None = None
    model_display_name: str | None = None
    model_org: str | None = None
    unchecked: bool = False


def prepare_output(output: Path) -> None:
    """An export writes a new directory (or an empty one): it never mixes into or overwrites earlier files."""
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise BadInputError(f"--output {output} exists and is not an empty directory; choose a new one")
    output.mkdir(parents=True, exist_ok=True)
