"""The run store: ``<workspace>/.worktrial/runs/<run-id>/`` with run.json, attempts.jsonl and envelope.json.

Attempts are appended and fsynced the moment they finish, so a crash at any point loses at most the
attempts that were running. A torn last line (the crash hit mid-write) is ignored on reading.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope, SandboxInfo, Selection, SuiteFileInfo
from worktrial.model.records import AttemptRecord
from worktrial.model.suite import Category
from worktrial.util import atomic_write_text

RUN_FILE = "run.json"
ATTEMPTS_FILE = "attempts.jsonl"
ENVELOPE_FILE = "envelope.json"


class TaskMeta(BaseModel):
    id: str
    name: str
    category: Category


class RunMeta(BaseModel):
    """What identifies a run and how to continue or re-render it (never secrets)."""

    id: str
    started_at: str
    suite_path: str
    """Absolute path of the suite file, to reload it on resume."""
    suite_display_path: str
    suite_sha256: str
    suite_bundle_sha256: str | None = None
    """Digest over the suite file and its declared files; None in runs stored before bundles existed."""
    suite_files: list[SuiteFileInfo] = Field(default_factory=list)
    task_base_commits: dict[str, str] = Field(default_factory=dict)
    """Task id -> base commit, for tasks pinned to their own repository or commit."""
    suite_id: str
    suite_name: str
    tasks: list[TaskMeta]
    workspace: str
    source_repo: str
    base_commit: str
    dirty: bool
    agent: str
    agent_description: dict[str, Any] = Field(default_factory=dict)
    """The agent's own ``describe()``, as it goes into the envelope."""
    agent_cmd: str | None = None
    model: str | None = None
    base_url: str | None = None
    """Without user info, query or fragment; ``base_url_redacted`` says whether anything was removed."""
    base_url_redacted: bool = False
    agent_settings: dict[str, Any] = Field(default_factory=dict)
    attempts: int
    k: int
    jobs: int
    verify_always: bool = False
    retry_errors: int = 0
    work_root: str | None = None
    """Temp directory of the run's worktrees, removed on resume if a crash left it behind."""
    label: str | None = None
    selection: Selection | None = None
    artifacts: bool = True
    sandbox: SandboxInfo | None = None
    """The sandbox the run's attempts use (``run.sandbox`` in the envelope)."""


def runs_dir(state_root: Path) -> Path:
    return state_root / ".worktrial" / "runs"


class RunStore:
    """One run's directory. ``append`` may be called from several threads."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._lock = threading.Lock()

    @classmethod
    def create(cls, state_root: Path, meta: RunMeta) -> RunStore:
        store = cls(runs_dir(state_root) / meta.id)
        store.dir.mkdir(parents=True, exist_ok=False)
        store.write_meta(meta)
        (store.dir / ATTEMPTS_FILE).touch()
        return store

    @classmethod
    def open(cls, state_root: Path, run_id: str) -> RunStore:
        directory = runs_dir(state_root) / run_id
        if not run_id or "/" in run_id or not (directory / RUN_FILE).is_file():
            known = ", ".join(sorted(p.name for p in list_run_dirs(state_root))[-5:]) or "none"
            raise BadInputError(
                f"no run {run_id!r} in {runs_dir(state_root)} (recent runs: {known}); `worktrial runs` lists them"
            )
        return cls(directory)

    def meta(self) -> RunMeta:
        try:
            return RunMeta.model_validate_json((self.dir / RUN_FILE).read_bytes())
        except (OSError, ValidationError) as exc:
            raise BadInputError(f"{self.dir / RUN_FILE}: unreadable run record ({type(exc).__name__})") from None

    def write_meta(self, meta: RunMeta) -> None:
        atomic_write_text(self.dir / RUN_FILE, meta.model_dump_json(indent=2) + "\n")

    def append(self, record: AttemptRecord) -> None:
        line = record.model_dump_json() + "\n"
        with self._lock, open(self.dir / ATTEMPTS_FILE, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def records(self) -> list[AttemptRecord]:
        """Stored attempts, first record of each (task, attempt) only; a torn line is skipped."""
        seen: set[tuple[str, int]] = set()
        out: list[AttemptRecord] = []
        for record in self._iter_records():
            key = (record.task_id, record.attempt)
            if key not in seen:
                seen.add(key)
                out.append(record)
        return out

    def _iter_records(self) -> Iterator[AttemptRecord]:
        try:
            text = (self.dir / ATTEMPTS_FILE).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                yield AttemptRecord.model_validate_json(line)
            except ValidationError:
                continue

    def write_envelope(self, envelope: Envelope) -> Path:
        path = self.dir / ENVELOPE_FILE
        atomic_write_text(path, envelope.to_json())
        return path

    def envelope(self) -> Envelope | None:
        try:
            return Envelope.model_validate_json((self.dir / ENVELOPE_FILE).read_bytes())
        except (OSError, ValidationError):
            return None


def list_run_dirs(state_root: Path) -> list[Path]:
    base = runs_dir(state_root)
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if (p / RUN_FILE).is_file()), key=lambda p: p.name)
