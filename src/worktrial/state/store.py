"""The run store: ``<workspace>/.worktrial/runs/<run-id>/`` with run.json, attempts.jsonl and envelope.json.

Attempts are appended and fsynced the moment they finish, so a crash at any point loses at most the
attempts that were running. A torn last line (the crash hit mid-write) is ignored on reading.

The store belongs to the harness, not to the agent that can find it (DESIGN.md, "Trust boundary"): every
record and every version of run.json is signed with the run's key (``signing``), and on reading only signed
records of planned (task, attempt) pairs count, each once; anything else is ignored and counted. One process
writes a run at a time (an advisory lock on ``lock`` in the run directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from worktrial.errors import BadInputError, HarnessError
from worktrial.isolation.safefs import read_regular
from worktrial.jsonlimits import loads_limited
from worktrial.model.envelope import (
    BudgetInfo,
    ConcurrencyInfo,
    Envelope,
    ReuseInfo,
    SandboxInfo,
    Selection,
    SuiteFileInfo,
)
from worktrial.model.newer_fields import NewerFieldsOmitted
from worktrial.model.records import AttemptRecord
from worktrial.model.run_config import RunConfig
from worktrial.model.suite import Category
from worktrial.state import signing
from worktrial.util import replace_file

RUN_FILE = "run.json"
RUN_SIG_FILE = "run.json.sig"
ATTEMPTS_FILE = "attempts.jsonl"
ENVELOPE_FILE = "envelope.json"
ENVELOPE_SIG_FILE = "envelope.json.sig"
LOCK_FILE = "lock"
_MAX_META_BYTES = 16 * 1024 * 1024
_MAX_ATTEMPTS_BYTES = 1024 * 1024 * 1024
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class TaskMeta(BaseModel):
    id: str
    name: str
    category: Category
    cluster: str | None = None
    digest: str | None = None
    """The task's definition digest (``model/task_digest.py``); None in runs stored before it was kept."""
    parts: dict[str, str] = Field(default_factory=dict)
    """The digest of each part of its definition, what ``eval --reuse`` compares."""


class RunMeta(NewerFieldsOmitted):
    """What identifies a run and how to continue or re-render it (never secrets)."""

    NEWER_FIELDS = ("concurrency",)

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
    environment_images: dict[str, str] = Field(default_factory=dict)
    """Task id -> the image id its attempts ran in, for tasks with a container environment."""
    suite_id: str
    suite_name: str
    tasks: list[TaskMeta]
    workspace: str
    source_repo: str
    base_commit: str
    dirty: bool
    agent_description: dict[str, Any] = Field(default_factory=dict)
    """The agent's own ``describe()``, as it goes into the envelope."""
    base_url_redacted: bool = False
    """Whether anything (user info, query, fragment) was removed from the config's base URL."""
    jobs: int
    """Attempts at once: ``--jobs N``, or with ``--jobs auto`` its ``--max-jobs``."""
    concurrency: ConcurrencyInfo | None = None
    """``--jobs auto``: its ``--max-jobs`` and the level over time (every session's); None: a fixed ``--jobs``."""
    retry_errors: int = 0
    work_root: str | None = None
    """Temp directory of the run's worktrees, removed on resume if a crash left it behind."""
    selection: Selection | None = None
    sandbox: SandboxInfo | None = None
    """The containment of the run's first session (runs stored before ``sandboxes`` have only this)."""
    sandboxes: list[SandboxInfo] = Field(default_factory=list)
    """Every containment the run's sessions used, in order; each record's ``sandbox`` is an index into it."""
    budget: BudgetInfo | None = None
    """The last session's budget (``--max-cost`` may change on resume) and whether it stopped the run."""
    config: RunConfig
    """What the run measures, frozen at its start: resume reloads it whole. The only place it is kept."""
    lifted: bool = False
    """The config was made from the flat fields of a run stored before configs were (``_lift``); such a run
    recorded no ``--grace-secs``."""
    signed: bool = False
    """Records and run.json carry signatures under the run's key (every run since records were signed)."""
    reuse: ReuseInfo | None = None
    """A run made from another run's attempts (``regrade``, ``eval --reuse``): its source and what could not be
    regraded (the counts are the records', filled in the envelope)."""
    dirty_excluded: list[str] = Field(default_factory=list)
    """Uncommitted paths of the workspace that did not make it dirty: the suite file and its declared files."""

    @model_validator(mode="before")
    @classmethod
    def _lift(cls, data: Any) -> Any:
        """A run.json of an older worktrial: its flat agent, model, attempts, ... fields become the config (runs
        stored before the config existed), and the copies of the config's fields beside it are dropped."""
        if not isinstance(data, dict):
            return data
        flat = {k: data[k] for k in _FLAT_CONFIG_FIELDS if k in data}
        data = {k: v for k, v in data.items() if k not in _FLAT_CONFIG_FIELDS}
        if data.get("config") is None:
            selection = data.get("selection") or {}
            if isinstance(selection, BaseModel):
                selection = selection.model_dump()
            picked = {key: selection[key] for key in ("tasks", "categories", "limit") if key in selection}
            data["config"] = {**flat, **picked}
            data["lifted"] = True
        return data


_FLAT_CONFIG_FIELDS = frozenset(
    {"agent", "agent_cmd", "model", "base_url", "agent_settings", "pass_env", "attempts", "k", "verify_always"}
    | {"label", "artifacts"}
)
"""What run.json kept beside its config before the config was the only copy (and before it existed at all)."""


@dataclass
class StoredRecords:
    """The records that count, and how many lines were ignored for which reason."""

    records: list[AttemptRecord]
    ignored: Counter[str] = field(default_factory=Counter)

    def warning(self) -> str | None:
        """One line for the user, or None when every line counted."""
        if not self.ignored:
            return None
        parts = ", ".join(f"{n} {why}" for why, n in sorted(self.ignored.items()))
        total = sum(self.ignored.values())
        return f"ignored {total} line(s) of {ATTEMPTS_FILE} the harness did not write for this run ({parts})"


def runs_dir(state_root: Path) -> Path:
    return state_root / ".worktrial" / "runs"


RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")
"""The run ids worktrial generates (``engine.session.new_run_id``): UTC start time and 6 random hex digits."""
RUN_ID_EXAMPLE = "20260101T120000Z-1a2b3c"


def is_run_id(text: str) -> bool:
    return RUN_ID.fullmatch(text) is not None


def checked_run_id(run_id: str, where: str = "run id") -> str:
    """``run_id`` when it has the form worktrial generates, else one line of bad input: every path built from a
    run id (a run directory, a page named after it) is built from one of these only, so an envelope with
    ``run.id = "../../x"`` (or ``/``, NUL, ``..`` in it) can never reach outside where it belongs."""
    if not is_run_id(run_id):
        raise BadInputError(
            f"{where} {run_id!r} is not a worktrial run id (they look like {RUN_ID_EXAMPLE}); refusing to use it"
        )
    return run_id


class RunStore:
    """One run's directory. ``append`` may be called from several threads."""

    def __init__(self, directory: Path, key: bytes | None = None) -> None:
        self.dir = directory
        self._key = key if key is not None else signing.load_key(directory.name)
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._append_fd: int | None = None

    @classmethod
    def create(cls, state_root: Path, meta: RunMeta) -> RunStore:
        directory = runs_dir(state_root) / meta.id
        directory.mkdir(parents=True, exist_ok=False)
        store = cls(directory, key=signing.create_key(meta.id))
        store.lock()
        store.write_meta(meta.model_copy(update={"signed": True}))
        store._open_attempts(create=True)
        return store

    @classmethod
    def open(cls, state_root: Path, run_id: str, *, writer: bool = False) -> RunStore:
        """An existing run; ``writer`` takes the run's lock (refusing if a live process holds it)."""
        directory = runs_dir(state_root) / run_id
        if not is_run_id(run_id) or not (directory / RUN_FILE).is_file():
            known = ", ".join(sorted(p.name for p in list_run_dirs(state_root))[-5:]) or "none"
            raise BadInputError(
                f"no run {run_id!r} in {runs_dir(state_root)} (recent runs: {known}); `worktrial runs` lists them"
            )
        store = cls(directory)
        if writer:
            store.lock()
            store._open_attempts(create=False)
        return store

    def lock(self) -> None:
        """Become the one writer of this run until ``close`` (or this process ends)."""
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, 0o600)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HarnessError(f"{self.dir / LOCK_FILE} is not a regular file; remove it and try again")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                raise BadInputError(
                    f"run {self.dir.name} is being written by another worktrial process (pid {holder}); "
                    "wait for it to finish or stop it, then try again"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def close(self) -> None:
        """Release the lock and the append descriptor."""
        for fd in (self._append_fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._append_fd = self._lock_fd = None

    def _open_attempts(self, *, create: bool) -> None:
        """Open attempts.jsonl for appending now, before any agent runs: later appends go to this file only."""
        flags = os.O_WRONLY | os.O_APPEND | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | os.O_CREAT
        if create:
            flags |= os.O_EXCL
        try:
            fd = os.open(self.dir / ATTEMPTS_FILE, flags, 0o644)
        except OSError as exc:
            raise HarnessError(f"{self.dir / ATTEMPTS_FILE}: cannot open the run store: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise HarnessError(f"{self.dir / ATTEMPTS_FILE} is not a regular file; the run store was tampered with")
        self._append_fd = fd

    def _read_meta(self) -> tuple[bytes, RunMeta]:
        try:
            data = read_regular(self.dir / RUN_FILE, _MAX_META_BYTES)
            loads_limited(data)  # the limits every JSON input gets (depth, number range), before the model's
            return data, RunMeta.model_validate_json(data)
        except (OSError, ValueError, ValidationError) as exc:
            raise BadInputError(f"{self.dir / RUN_FILE}: unreadable run record ({type(exc).__name__})") from None

    def unverified_meta(self) -> RunMeta:
        """``run.json`` as it stands, signature unchecked: only to list a run that cannot be verified here."""
        return self._read_meta()[1]

    def meta(self) -> RunMeta:
        data, meta = self._read_meta()
        if self._key is None:
            if meta.signed:
                raise BadInputError(
                    f"{self.dir / RUN_FILE}: the run's signing key ({signing.key_path(self.dir.name)}) is missing, "
                    "so its records cannot be verified"
                )
            if meta.id != self.dir.name:  # a signed run.json is checked below, with its signature
                raise BadInputError(f"{self.dir / RUN_FILE}: names run {meta.id!r}, not its directory's; refusing it")
            return meta
        try:
            sig = read_regular(self.dir / RUN_SIG_FILE, 1024).decode("ascii").strip()
        except (OSError, ValueError):
            sig = ""
        if not signing.verify(self._key, self.dir.name, "run", data, sig) or meta.id != self.dir.name:
            raise BadInputError(
                f"{self.dir / RUN_FILE} was changed outside worktrial (its signature does not match); "
                "refusing to use this run"
            )
        return meta

    def write_meta(self, meta: RunMeta) -> None:
        data = meta.model_dump_json(indent=2) + "\n"
        replace_file(self.dir / RUN_FILE, data)
        if self._key is not None:
            replace_file(self.dir / RUN_SIG_FILE, signing.sign(self._key, meta.id, "run", data.encode()) + "\n")

    def _line(self, record: AttemptRecord) -> str:
        body = record.model_dump_json()
        if self._key is None:
            return body + "\n"
        sig = signing.sign(self._key, self.dir.name, "record", body.encode())
        return f'{{"sig":"{sig}","record":{body}}}\n'

    def append(self, record: AttemptRecord) -> None:
        data = self._line(record).encode("utf-8")
        with self._lock:
            if self._append_fd is None:
                self._open_attempts(create=False)
            assert self._append_fd is not None
            view = memoryview(data)
            while view:
                written = os.write(self._append_fd, view)
                view = view[written:]
            os.fsync(self._append_fd)

    def records(self) -> list[AttemptRecord]:
        """The attempts that count: signed by this run's harness, planned, first of each (task, attempt)."""
        return self.load_records().records

    def load_records(self, meta: RunMeta | None = None) -> StoredRecords:
        """Stored attempts that count, and what was ignored (see ``StoredRecords.warning``)."""
        meta = meta or self.meta()
        planned = {t.id for t in meta.tasks}
        out = StoredRecords(records=[])
        seen: set[tuple[str, int]] = set()
        for why, record in self._iter_records(meta):
            if record is None:
                out.ignored[why] += 1
                continue
            key = (record.task_id, record.attempt)
            if record.task_id not in planned:
                out.ignored["for tasks not in the run"] += 1
            elif not 1 <= record.attempt <= meta.config.attempts:
                out.ignored[f"with attempt numbers outside 1..{meta.config.attempts}"] += 1
            elif key in seen:
                out.ignored["duplicates"] += 1
            else:
                seen.add(key)
                out.records.append(record)
        return out

    def _iter_records(self, meta: RunMeta) -> Iterator[tuple[str, AttemptRecord | None]]:
        try:
            data = read_regular(self.dir / ATTEMPTS_FILE, _MAX_ATTEMPTS_BYTES)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            yield f"unreadable ({exc})", None
            return
        lines = data.split(b"\n")
        torn = lines.pop() if lines else b""  # no newline yet: a crash hit mid-write
        if torn.strip():
            yield "torn (incomplete last line)", None
        for line in lines:
            if line.strip():
                yield self._parse(line, meta)

    def _parse(self, line: bytes, meta: RunMeta) -> tuple[str, AttemptRecord | None]:
        try:
            raw = loads_limited(line)
        except ValueError:
            return "not JSON", None
        signed = isinstance(raw, dict) and set(raw) == {"sig", "record"}
        if meta.signed or self._key is not None:
            if not signed or self._key is None:
                return "unsigned", None
            try:
                record = AttemptRecord.model_validate(raw["record"])
            except ValidationError:
                return "not an attempt record", None
            body = record.model_dump_json().encode()
            if not signing.verify(self._key, self.dir.name, "record", body, raw["sig"]):
                return "with a wrong signature", None
            return "", record
        try:  # a run stored before records were signed
            return "", AttemptRecord.model_validate(raw["record"] if signed else raw)
        except ValidationError:
            return "not an attempt record", None

    def write_envelope(self, envelope: Envelope) -> Path:
        path = self.dir / ENVELOPE_FILE
        data = envelope.to_json()
        replace_file(path, data)
        if self._key is not None:
            sig = signing.sign(self._key, self.dir.name, "envelope", data.encode())
            replace_file(self.dir / ENVELOPE_SIG_FILE, sig + "\n")
        return path

    def envelope(self) -> Envelope | None:
        """The stored envelope, or None if there is none or it is not the one this harness wrote."""
        try:
            data = read_regular(self.dir / ENVELOPE_FILE, _MAX_ATTEMPTS_BYTES)
            if self._key is not None:
                sig = read_regular(self.dir / ENVELOPE_SIG_FILE, 1024).decode("ascii").strip()
                if not signing.verify(self._key, self.dir.name, "envelope", data, sig):
                    return None
            loads_limited(data)
            envelope = Envelope.model_validate_json(data)
        except (OSError, ValueError, ValidationError):
            return None
        return envelope if envelope.run.id == self.dir.name else None  # else rebuilt from the records


def list_run_dirs(state_root: Path) -> list[Path]:
    base = runs_dir(state_root)
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if is_run_id(p.name) and (p / RUN_FILE).is_file()), key=lambda p: p.name)
