"""``worktrial audit``: re-verify a published envelope against its suite and its own per-attempt records.

The digest of the suite file must match; every published metric must equal what this harness recomputes from
the per-attempt records (only fields the envelope actually publishes are compared, so an envelope from an
older version is judged on what it claims); every attempt's outcome must agree with its ``claimed`` and
``verified`` facts; every referenced trace file must exist, describe the same attempt, and hold no
transcript fields; and every trajectory file a record names (``--trajectories``) must have the digest recorded
with it, where it is present (trajectories stay local: an envelope published without them only gets a note).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.analysis.stats import IntervalRule
from worktrial.errors import BadInputError
from worktrial.jsonlimits import MAX_ENVELOPE_BYTES, MAX_TRACE_BYTES, loads_limited
from worktrial.model.envelope import Envelope, parse_envelope_json
from worktrial.model.records import AttemptRecord
from worktrial.model.suite import LoadedSuite
from worktrial.model.trace import FORBIDDEN_KEYS
from worktrial.model.trajectory import MAX_TRAJECTORY_BYTES
from worktrial.safe_read import InputFileError, read_input
from worktrial.safe_text import for_terminal


class AuditReport(BaseModel):
    envelope_path: str
    suite_path: str
    attempts: int
    values_compared: int
    traces_checked: int
    trajectories_checked: int = 0
    mismatches: list[str]
    notes: list[str]
    ok: bool


# Report fields added after schema_version 1 shipped: an older envelope without them is not wrong.
ADDED_AFTER_V1 = frozenset({"report.honesty"})
# Fields added after schema_version 1 shipped, wherever they occur (metrics, task reports).
ADDED_KEYS_AFTER_V1 = frozenset({"interval", "clusters", "cluster", "tasks_measured"})


def _brief(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _same(published: Any, recomputed: Any) -> bool:
    if isinstance(published, bool) or isinstance(recomputed, bool):
        return published is recomputed
    if isinstance(published, int | float) and isinstance(recomputed, int | float):
        return math.isclose(published, recomputed, rel_tol=1e-9, abs_tol=1e-12)
    return bool(published == recomputed)


def _key(item: Any, index: int) -> str:
    if isinstance(item, dict):
        for name in ("task_id", "attempt"):
            if name in item:
                return f"[{item[name]}]"
    return f"[{index}]"


class _Differ:
    """Walks the published JSON and the recomputed one side by side, recording every difference."""

    def __init__(self) -> None:
        self.mismatches: list[str] = []
        self.unknown: list[str] = []
        self.compared = 0

    def walk(self, published: Any, recomputed: Any, path: str) -> None:
        if isinstance(published, dict) and isinstance(recomputed, dict):
            for key, value in published.items():
                if key not in recomputed:
                    self.unknown.append(f"{path}.{key}")
                    continue
                self.walk(value, recomputed[key], f"{path}.{key}")
            for key in recomputed.keys() - published.keys():
                if f"{path}.{key}" not in ADDED_AFTER_V1 and key not in ADDED_KEYS_AFTER_V1:
                    self.mismatches.append(
                        f"{path}.{key}: missing from the envelope, recomputed {_brief(recomputed[key])}"
                    )
            return
        if isinstance(published, list) and isinstance(recomputed, list):
            if len(published) != len(recomputed):
                self.mismatches.append(f"{path}: published {len(published)} entries, recomputed {len(recomputed)}")
                return
            for i, (p, r) in enumerate(zip(published, recomputed, strict=True)):
                self.walk(p, r, path + _key(p, i))
            return
        self.compared += 1
        if not _same(published, recomputed):
            self.mismatches.append(f"{path}: published {json.dumps(published)}, recomputed {json.dumps(recomputed)}")


def _outcome_problems(record: AttemptRecord) -> list[str]:
    """An attempt passes exactly when it claimed success and verification passed."""
    where = f"report.tasks[{record.task_id}].attempts[{record.attempt}]"
    if record.outcome == "pass" and not (record.claimed is True and record.verified is True):
        return [f"{where}: outcome pass but claimed={record.claimed}, verified={record.verified}"]
    if record.outcome != "pass" and record.claimed is True and record.verified is True:
        return [f"{where}: outcome {record.outcome} although it claimed success and verification passed"]
    return []


MAX_TRAJECTORY_FILE_BYTES = 4 * MAX_TRAJECTORY_BYTES
_IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


def _image_problems(envelope: Envelope, loaded: LoadedSuite) -> list[str]:
    """Every container task ran in an image the envelope pins by id, and only those tasks; a reward, where a
    verifier wrote one, agrees with the verdict (1 and only 1 verifies)."""
    suite = loaded.suite
    container = {t.id for t in suite.tasks if (env := suite.environment_for(t)) is not None and env.container}
    ran = {t.task_id for t in envelope.report.tasks}
    pinned = envelope.environment_images or {}
    problems = [
        f"environment_images: task {task_id} has a container environment but the envelope pins no image for it"
        for task_id in sorted((container & ran) - set(pinned))
    ]
    problems += [
        f"environment_images[{task_id}]: {digest!r} is not an image id (sha256:<64 hex>)"
        for task_id, digest in sorted(pinned.items())
        if not _IMAGE_ID.match(digest)
    ]
    problems += [
        f"environment_images[{task_id}]: the suite's task has no container environment"
        for task_id in sorted(set(pinned) - container)
    ]
    for task in envelope.report.tasks:
        for record in task.attempts:
            if record.reward is not None and record.verified is not None and (record.reward == 1) != record.verified:
                problems.append(
                    f"report.tasks[{record.task_id}].attempts[{record.attempt}]: reward {record.reward:g} but "
                    f"verified={record.verified}"
                )
    return problems


def _forbidden(value: Any, path: str = "$") -> list[str]:
    """Transcript-named keys holding content; a count under such a name (``tokens.output``) is a number."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in FORBIDDEN_KEYS and not (item is None or isinstance(item, int | float)):
                found.append(f"{path}.{key}")
            found += _forbidden(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _forbidden(item, f"{path}[{i}]")
    return found


def trace_root(envelope_path: Path, envelope: Envelope) -> Path:
    """Trace paths are relative to the state root that stored the run: ``<root>/.worktrial/runs/<id>/envelope.json``.

    For a run of a suite pinned to another repository that root is not the recorded workspace (the pinned clone):
    an envelope still inside its run store names its root by where it sits, any other copy by ``run.trace_root``
    (envelopes written before it existed fall back to the recorded workspace).
    """
    parents = envelope_path.resolve().parents
    if len(parents) > 3 and parents[1].name == "runs" and parents[2].name == ".worktrial":
        return parents[3]
    return Path(envelope.run.trace_root or envelope.run.workspace.path)


def _trace_problems(record: AttemptRecord, workspace: Path) -> list[str]:
    assert record.trace is not None
    where = f"report.tasks[{record.task_id}].attempts[{record.attempt}].trace"
    path = Path(record.trace)
    path = path if path.is_absolute() else workspace / path
    try:
        data = loads_limited(read_input(path, MAX_TRACE_BYTES).decode("utf-8"))
    except InputFileError as exc:
        # Not a finding about the published numbers: an input worktrial refuses to read (a FIFO, a device).
        raise BadInputError(f"{where}: trace file {path} {exc.problem}; refusing to read it") from None
    except FileNotFoundError:
        return [f"{where}: trace file {path} does not exist"]
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSON problems included
        return [f"{where}: trace file {path} is not readable JSON ({exc})"]
    if not isinstance(data, dict):
        return [f"{where}: trace file {path} is not a JSON object"]
    problems = [f"{where}: trace file {path} holds transcript field {key}" for key in _forbidden(data)]
    for name in ("task_id", "attempt", "outcome"):
        if data.get(name) != getattr(record, name):
            problems.append(
                f"{where}: trace says {name} {json.dumps(data.get(name))}, the envelope "
                f"{json.dumps(getattr(record, name))}"
            )
    return problems


def _trajectory_problems(record: AttemptRecord, root: Path) -> list[str] | None:
    """Mismatches of the trajectory file a record names (None: the file is not there, as when not published)."""
    ref = record.trajectory
    assert ref is not None
    where = f"report.tasks[{record.task_id}].attempts[{record.attempt}].trajectory"
    path = Path(ref.path)
    path = path if path.is_absolute() else root / path
    try:
        digest = hashlib.sha256(read_input(path, MAX_TRAJECTORY_FILE_BYTES, follow_symlinks=False)).hexdigest()
    except FileNotFoundError:
        return None
    except InputFileError as exc:
        return [f"{where}: trajectory file {path} {exc.problem}"]
    except OSError as exc:
        return [f"{where}: trajectory file {path} cannot be read ({exc.strerror or exc})"]
    if digest != ref.sha256:
        return [f"{where}: trajectory file {path} has sha256 {digest}, the record says {ref.sha256}"]
    return []


def attempt_count_problems(envelope: Envelope) -> list[str]:
    """Each task holds attempts 1..run.attempts at most once each, and (in a complete run) every one of them."""
    problems: list[str] = []
    planned = envelope.run.attempts
    for t in envelope.report.tasks:
        numbers = [a.attempt for a in t.attempts]
        where = f"report.tasks[{t.task_id}]"
        outside = sorted({n for n in numbers if not 1 <= n <= planned})
        if outside:
            problems.append(f"{where}: attempt numbers {outside[:8]} are outside the run's 1..{planned}")
        duplicated = sorted(n for n, count in Counter(numbers).items() if count > 1)
        if duplicated:
            problems.append(f"{where}: attempts {duplicated[:8]} appear more than once")
        if envelope.run.complete and len(numbers) != planned:
            problems.append(f"{where}: {len(numbers)} attempts, but the run has {planned} per task")
    return problems


def reuse_count_problems(envelope: Envelope) -> list[str]:
    """``run.reuse``'s counts are those of the records' provenance (a run made from another run's attempts)."""
    reuse = envelope.run.reuse
    if reuse is None:
        return []
    kinds = Counter(
        a.provenance.kind if a.provenance is not None else "ran" for t in envelope.report.tasks for a in t.attempts
    )
    return [
        f"run.reuse.{kind}: {getattr(reuse, kind)}, but {kinds[kind]} record(s) say so"
        for kind in ("reused", "regraded", "ran")
        if getattr(reuse, kind) != kinds[kind]
    ]


def load_envelope_json(path: Path) -> tuple[dict[str, Any], Envelope]:
    try:
        raw = parse_envelope_json(read_input(path, MAX_ENVELOPE_BYTES).decode("utf-8"))
    except InputFileError as exc:
        raise BadInputError(f"{path}: {exc.problem}; an envelope is a JSON file") from None
    except FileNotFoundError:
        raise BadInputError(f"{path}: envelope file not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadInputError(f"{path}: not a readable JSON envelope ({exc})") from None
    try:
        return raw, Envelope.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{path}: not a worktrial envelope ({where}: {first['msg']})") from None


def _bundle_change(envelope: Envelope, loaded: LoadedSuite) -> str:
    """Which declared files differ between the envelope's list and the suite on disk."""
    before = {f.name: f.sha256 for f in envelope.suite_files}
    now = {f.name: f.sha256 for f in loaded.files}
    changed = sorted(n for n in before.keys() & now.keys() if before[n] != now[n])
    parts = [f"changed: {', '.join(changed[:5])}"] if changed else []
    if now.keys() - before.keys():
        parts.append(f"added: {', '.join(sorted(now.keys() - before.keys())[:5])}")
    if before.keys() - now.keys():
        parts.append(f"removed: {', '.join(sorted(before.keys() - now.keys())[:5])}")
    return "; ".join(parts) or "the declared files differ"


def interval_rule(published: Any) -> IntervalRule:
    """How the envelope's intervals were written, so it is judged on what it claimed.

    No ``interval`` key: the 1.96-SE intervals of the first envelopes. "wilson...": Wilson intervals with CR1
    cluster errors, and a headline only when every task reached k. Anything else: the current rule.
    """
    overall = published.get("overall", {}) if isinstance(published, dict) else {}
    if not isinstance(overall, dict) or "interval" not in overall:
        return "normal"
    methods = [overall.get("interval")]
    categories = published.get("categories", {})
    if isinstance(categories, dict):
        methods += [m.get("interval") for m in categories.values() if isinstance(m, dict)]
    if any(isinstance(m, str) and m.startswith("wilson") for m in methods):
        return "wilson"
    if "tasks_measured" not in overall and overall.get("pass_at_k") is None:
        return "wilson"
    return "current"


def audit_envelope(
    envelope_path: Path, loaded: LoadedSuite, *, workspace: Path | None = None, check_traces: bool = True
) -> AuditReport:
    """Every mismatch between the envelope, its suite and its own records (empty list: it checks out)."""
    raw, envelope = load_envelope_json(envelope_path)
    mismatches: list[str] = []
    notes: list[str] = []
    if envelope.suite_sha256 != loaded.sha256:
        mismatches.append(
            f"suite_sha256: the envelope was produced from suite file sha256 {envelope.suite_sha256}, "
            f"but {loaded.path} has file sha256 {loaded.sha256} (the suite file differs)"
        )
    elif envelope.bundle_digest != loaded.digest:
        mismatches.append(
            f"suite_bundle_sha256: the envelope was produced from suite bundle sha256 {envelope.bundle_digest}, "
            f"but {loaded.path} and its declared files now digest to {loaded.digest} "
            f"({_bundle_change(envelope, loaded)})"
        )
    mismatches += _image_problems(envelope, loaded)
    report = envelope.report
    if envelope.run.k != report.k:
        mismatches.append(f"run.k: {envelope.run.k}, but report.k is {report.k}")
    records = [a for t in report.tasks for a in t.attempts]
    for record in records:
        mismatches += _outcome_problems(record)
    for t in report.tasks:
        strays = [a.attempt for a in t.attempts if a.task_id != t.task_id]
        if strays:
            mismatches.append(f"report.tasks[{t.task_id}]: attempts {strays} belong to another task id")
    mismatches += attempt_count_problems(envelope)
    mismatches += reuse_count_problems(envelope)
    expected = len(loaded.suite.tasks) * envelope.run.attempts
    if envelope.run.complete and len(records) != expected:
        mismatches.append(f"run.complete: true, but it holds {len(records)} attempts, not {expected}")
    tasks = [TaskInfo(t.id, t.display_name, t.category, t.cluster) for t in loaded.suite.tasks]
    published = raw.get("report", {}) if isinstance(raw, dict) else {}
    recomputed = build_report(
        loaded.suite.id, loaded.suite.display_name, tasks, records, report.k, rule=interval_rule(published)
    )
    differ = _Differ()
    differ.walk(published, recomputed.model_dump(mode="json"), "report")
    mismatches += differ.mismatches
    if differ.unknown:
        notes.append(f"not recomputable by this harness version (skipped): {', '.join(differ.unknown[:8])}")
    traces = trajectories = 0
    if check_traces:
        root = workspace or trace_root(envelope_path, envelope)
        if envelope.run.paths_redacted and workspace is None:
            notes.append(
                "the envelope's paths were redacted for publishing: its trace files were looked up from the current "
                "directory (give --workspace for another)"
            )
        for record in records:
            if record.trace is not None:
                traces += 1
                mismatches += _trace_problems(record, root)
        missing = [f"{r.task_id}#{r.attempt}" for r in records if r.trace is None]
        if missing:
            notes.append(f"{len(missing)} attempt(s) reference no trace file: {', '.join(missing[:8])}")
        absent = []
        for record in records:
            if record.trajectory is None:
                continue
            found = _trajectory_problems(record, root)
            if found is None:
                absent.append(f"{record.task_id}#{record.attempt}")
                continue
            trajectories += 1
            mismatches += found
        if absent:
            notes.append(
                f"{len(absent)} trajectory file(s) are not here (they stay local unless shared): "
                + ", ".join(absent[:8])
            )
    return AuditReport(
        envelope_path=str(envelope_path),
        suite_path=str(loaded.path),
        attempts=len(records),
        values_compared=differ.compared,
        traces_checked=traces,
        trajectories_checked=trajectories,
        mismatches=mismatches,
        notes=notes,
        ok=not mismatches,
    )


def render_audit(report: AuditReport) -> str:
    """Plain text: one line per mismatch, so a CI log shows exactly what does not add up."""
    head = (
        f"audit of {for_terminal(report.envelope_path)} against {for_terminal(report.suite_path)}: "
        f"{report.attempts} attempts, {report.values_compared} published values recomputed, "
        f"{report.traces_checked} trace files checked"
        + (f", {report.trajectories_checked} trajectory files checked" if report.trajectories_checked else "")
    )
    lines = [head]
    # Each finding quotes the envelope (task ids, paths): one line each, so none can forge another.
    lines += [f"note: {for_terminal(n)}" for n in report.notes]
    if report.ok:
        lines.append("ok: every published number matches its records and suite")
    else:
        lines.append(f"{len(report.mismatches)} mismatch(es):")
        lines += [f"  - {for_terminal(m)}" for m in report.mismatches]
    return "\n".join(lines) + "\n"
