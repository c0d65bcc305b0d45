"""JUnit XML of a run, for CI test reporters: one testsuite per category, one testcase per task.

A task's testcase passes when every attempt passed (the pass^k view: CI cares whether the agent is reliable),
fails with the failed attempts' reasons (and the first failing verify command's output tail, when artifacts
were kept), is an ``error`` when every attempt broke (the run measured nothing for it), and is ``skipped`` when
no attempt ran. The XML is built with ElementTree, so any text an agent produced is escaped, and characters XML
cannot carry are dropped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from worktrial.model.artifacts import AttemptArtifacts, last_lines
from worktrial.model.envelope import Envelope, TaskReport
from worktrial.model.records import AttemptRecord
from worktrial.util import plural

# XML 1.0 allows tab, newline, carriage return and most of the rest; control characters are not representable.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
TAIL_LINES = 40

Artifacts = Mapping[tuple[str, int], AttemptArtifacts]


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _attempt_line(record: AttemptRecord) -> str:
    return f"attempt {record.attempt}: {record.outcome}" + (f" — {record.reason}" if record.reason else "")


def _details(task: TaskReport, artifacts: Artifacts) -> str:
    parts = []
    for record in task.attempts:
        if record.outcome == "pass":
            continue
        parts.append(_attempt_line(record))
        extra = artifacts.get((task.task_id, record.attempt))
        failing = extra.first_failure() if extra else None
        if failing is not None:
            parts.append(f"  {failing.phase} command {failing.index} exited {failing.exit_code}: {failing.command}")
            tail = last_lines(failing.output_tail, TAIL_LINES)
            parts += ["  | " + line for line in tail.splitlines()]
    return "\n".join(parts)


def _testcase(parent: ET.Element, envelope: Envelope, task: TaskReport, artifacts: Artifacts) -> str:
    """Add the task's testcase and return its result: passed, failure, error or skipped."""
    case = ET.SubElement(
        parent,
        "testcase",
        name=_xml_text(task.task_id),
        classname=_xml_text(f"{envelope.report.suite_id}.{task.category}"),
        time=f"{sum(a.duration_secs for a in task.attempts):.3f}",
    )
    attempts = task.attempts
    failed = [a for a in attempts if a.outcome != "pass"]
    summary = f"{task.passed_runs}/{plural(task.total_runs, 'attempt')} passed"
    if not attempts:
        ET.SubElement(case, "skipped", message="no attempt ran (the run was interrupted)")
        return "skipped"
    if all(a.outcome == "error" for a in attempts):
        element = ET.SubElement(case, "error", message=_xml_text(f"every attempt broke: {attempts[0].reason}"))
        element.set("type", attempts[0].error_category or "error")
        element.text = _xml_text(_details(task, artifacts))
        return "error"
    if failed:
        first = failed[0]
        message = f"{summary}; attempt {first.attempt}: {first.outcome}"
        message += f" — {first.reason}" if first.reason else ""
        element = ET.SubElement(case, "failure", message=_xml_text(message))
        element.set("type", first.outcome)
        element.text = _xml_text(_details(task, artifacts))
        return "failure"
    ET.SubElement(case, "system-out").text = summary
    return "passed"


def render_junit(envelope: Envelope, artifacts: Artifacts | None = None) -> str:
    """The run as JUnit XML (``<testsuites>`` root), with optional artifacts for verify output tails."""
    artifacts = artifacts or {}
    report = envelope.report
    root = ET.Element("testsuites", name=_xml_text(f"worktrial {report.suite_id}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_category: dict[str, list[TaskReport]] = {}
    for task in report.tasks:
        by_category.setdefault(task.category, []).append(task)
    for category, tasks in by_category.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_xml_text(f"{report.suite_id}.{category}"),
            timestamp=envelope.run.started_at[:19],
        )
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        seconds = 0.0
        for task in tasks:
            result = _testcase(suite, envelope, task, artifacts)
            counts["tests"] += 1
            if result == "failure":
                counts["failures"] += 1
            elif result == "error":
                counts["errors"] += 1
            elif result == "skipped":
                counts["skipped"] += 1
            seconds += sum(a.duration_secs for a in task.attempts)
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{seconds:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
