"""``audit`` of a run made from another run's attempts: each record's provenance against the run it names.

A record that says it was reused or regraded from run X attempt N (``AttemptRecord.provenance``) must agree with
X's own signed record of that attempt: a reused record is that record; a regraded one keeps what the agent did
(its claim, time, tokens, cost) and, where its stored change was verified again, names that change's digest; an
attempt whose verdict verification never decided keeps its verdict. Where X is stored here (the state root the
envelope's traces are under, or ``--workspace``), its signed records are read; where it is not, the provenance
can only be checked against the envelope itself, and audit says so.
"""

from __future__ import annotations

from pathlib import Path

from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope
from worktrial.model.records import AttemptRecord, Provenance
from worktrial.state.store import RUN_FILE, RunMeta, RunStore, is_run_id

_WHAT_THE_AGENT_DID: tuple[str, ...] = (
    "claimed", "agent_secs", "setup_secs", "cost_usd", "tokens", "turns", "tool_calls", "model",
)  # fmt: skip
_VERDICT = ("outcome", "verified", "reason", "error_category")


def provenance_problems(envelope_path: Path, envelope: Envelope, root: Path) -> tuple[list[str], list[str]]:
    """Mismatches and notes for every record with a provenance: its shape, the run's ``reuse``, and the source
    run's signed record where that run is stored under ``root``."""
    records = [a for t in envelope.report.tasks for a in t.attempts if a.provenance is not None]
    if not records:
        return [], []
    problems: list[str] = []
    reuse = envelope.run.reuse
    if reuse is None:
        problems.append("run.reuse: absent, though records say they were reused or regraded from another run")
    sources: dict[str, tuple[RunMeta, dict[tuple[str, int], AttemptRecord]] | str] = {}
    this_meta = _own_meta(envelope_path)
    for record in records:
        origin = record.provenance
        assert origin is not None
        where = f"report.tasks[{record.task_id}].attempts[{record.attempt}].provenance"
        problems += [f"{where}: {p}" for p in _shape(record, origin, reuse.mode if reuse else None)]
        if reuse is not None and (origin.run, origin.suite_digest) != (reuse.source, reuse.source_suite_digest):
            problems.append(f"{where}: names run {origin.run} at {origin.suite_digest[:12]}, run.reuse another")
        if not is_run_id(origin.run):
            continue
        if origin.run not in sources:
            sources[origin.run] = _source(root, origin.run)
        found = sources[origin.run]
        if isinstance(found, str):
            continue
        meta, signed = found
        source = signed.get((record.task_id, origin.attempt))
        if source is None:
            problems.append(f"{where}: run {origin.run} has no signed record of {record.task_id} #{origin.attempt}")
            continue
        if origin.suite_digest != (meta.suite_bundle_sha256 or meta.suite_sha256):
            problems.append(f"{where}: run {origin.run} measured another suite than the digest it names")
        problems += [f"{where}: {p}" for p in _against(record, origin, source)]
        if origin.kind == "reused" and this_meta is not None:
            problems += [f"{where}: {p}" for p in _same_task(record.task_id, this_meta, meta)]
    notes = [
        f"provenance of records from run {run_id} not checked against its records: {why}"
        for run_id, why in sources.items()
        if isinstance(why, str)
    ]
    return problems, notes


def _shape(record: AttemptRecord, origin: Provenance, mode: str | None) -> list[str]:
    problems = []
    if mode == "regrade" and origin.kind != "regraded":
        problems.append(f"{origin.kind} in a regraded run, where every record is regraded")
    if origin.kind == "reused" and (origin.reverified or origin.change_sha256 is not None):
        problems.append("a reused record was not verified again, yet names a change")
    if origin.kind == "regraded" and origin.reverified != (origin.change_sha256 is not None):
        problems.append("verified again exactly when it names the stored change it was verified from")
    if origin.change_sha256 is not None and record.change is not None and record.change.sha256 != origin.change_sha256:
        problems.append("names another change than the record keeps")
    return problems


def _against(record: AttemptRecord, origin: Provenance, source: AttemptRecord) -> list[str]:
    """How ``record`` contradicts the source's signed record of the attempt it names."""
    fields = _WHAT_THE_AGENT_DID + (_VERDICT if origin.kind == "reused" or not origin.reverified else ())
    problems = [
        f"{name} {getattr(record, name)!r} here, {getattr(source, name)!r} in run {origin.run}"
        for name in fields
        if getattr(record, name) != getattr(source, name)
    ]
    if origin.reverified:
        kept = source.change.sha256 if source.change is not None else None
        if kept != origin.change_sha256:
            problems.append(f"run {origin.run} kept no change with the digest it names")
    return problems


def _same_task(task_id: str, meta: RunMeta, source: RunMeta) -> list[str]:
    """A reused record's task has the same definition in both runs (where both recorded it)."""
    mine = next((t.digest for t in meta.tasks if t.id == task_id), None)
    theirs = next((t.digest for t in source.tasks if t.id == task_id), None)
    if mine is None or theirs is None or mine == theirs:
        return []
    return [f"reused, but task {task_id}'s definition differs from the one run {source.id} measured"]


def _source(root: Path, run_id: str) -> tuple[RunMeta, dict[tuple[str, int], AttemptRecord]] | str:
    """The source run's meta and signed records, or why they cannot be read here."""
    try:
        store = RunStore.open(root, run_id)
        meta = store.meta()
        return meta, {(r.task_id, r.attempt): r for r in store.load_records(meta).records}
    except BadInputError as exc:
        return str(exc)


def _own_meta(envelope_path: Path) -> RunMeta | None:
    """The run.json next to an envelope that sits in its run store (its task digests), if it verifies."""
    directory = envelope_path.resolve().parent
    if not (directory / RUN_FILE).is_file():
        return None
    try:
        return RunStore(directory).meta()
    except BadInputError:
        return None
