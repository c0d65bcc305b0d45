"""``--format swe-bench``: a run as a submission directory of the SWE-bench leaderboard's experiments layout.

```
DIR/
  all_preds.jsonl          one prediction per task: instance_id, model_name_or_path, model_patch
  metadata.yaml            info (name, report, site, authors: yours to fill in) and tags
  README.md                what this was made from, and what is left to do
  logs/<instance_id>/      patch.diff, report.json, test_output.txt, run_instance.log
  trajs/<instance_id>.json the attempt's ATIF trajectory (runs made with --trajectories)
  envelope.json            worktrial's envelope of the whole run, alongside
```

The leaderboard takes one prediction per instance (pass@1), so each task's attempt 1 is exported; the envelope
alongside keeps every attempt. Task ids are the instance ids; a file name made from one is a safe one (the id
itself stays in ``all_preds.jsonl``). Everything exported was redacted when it was stored.
"""

from __future__ import annotations

import json
from pathlib import Path

from worktrial.model.artifacts import AttemptArtifacts
from worktrial.model.records import AttemptRecord
from worktrial.state.artifacts import task_dirname
from worktrial.state.export.source import ExportOptions, ExportSource, prepare_output
from worktrial.util import atomic_write_text
from worktrial.version import __version__

EXPORTED_ATTEMPT = 1


def export_swebench(source: ExportSource, output: Path, options: ExportOptions) -> list[str]:
    """Write the submission directory; the lines to print (what was written, what is missing)."""
    prepare_output(output)
    envelope = source.envelope
    model_name = _model_name(source)
    exported: list[AttemptRecord] = []
    missing_attempt: list[str] = []
    for task in envelope.report.tasks:
        record = next((a for a in task.attempts if a.attempt == EXPORTED_ATTEMPT), None)
        if record is None:
            missing_attempt.append(task.task_id)
        else:
            exported.append(record)
    predictions = []
    no_patch: list[str] = []
    cut_patch: list[str] = []
    trajectories = 0
    for record in exported:
        key = (record.task_id, record.attempt)
        artifacts = source.artifacts.get(key)
        patch = artifacts.patch if artifacts is not None else None
        if patch is None:
            no_patch.append(record.task_id)
        elif patch.truncated:
            cut_patch.append(record.task_id)
        diff = patch.diff if patch is not None else ""
        predictions.append(
            json.dumps({"instance_id": record.task_id, "model_name_or_path": model_name, "model_patch": diff})
        )
        name = task_dirname(record.task_id)
        _write_logs(output / "logs" / name, record, artifacts, diff)
        data = source.trajectory_files.get(key)
        if data is not None:
            (output / "trajs").mkdir(exist_ok=True)
            (output / "trajs" / f"{name}.json").write_bytes(data)
            trajectories += 1
    atomic_write_text(output / "all_preds.jsonl", "".join(line + "\n" for line in predictions))
    atomic_write_text(output / "metadata.yaml", _metadata(source, model_name))
    atomic_write_text(output / "envelope.json", source.envelope_json)
    lines = [f"wrote {len(predictions)} prediction(s) of run {envelope.run.id} in the SWE-bench layout to {output}"]
    recorded = any(r.trajectory is not None for r in source.records())
    if not recorded:
        lines.append(
            f"no trajectories: run {envelope.run.id} was made without --trajectories, so trajs/ is left out "
            "(the leaderboard asks for them: run the suite again with --trajectories)"
        )
    else:
        lines.append(f"{trajectories} trajectory file(s) in trajs/")
    for problem in source.trajectory_problems:
        lines.append(f"trajectory left out: {problem}")
    if missing_attempt:
        lines.append(f"no attempt {EXPORTED_ATTEMPT} (no prediction): {', '.join(missing_attempt[:10])}")
    if no_patch:
        lines.append(f"no stored patch, exported as empty (--no-artifacts, or an envelope alone): {_few(no_patch)}")
    if cut_patch:
        lines.append(f"patch cut at its size limit (it will not apply): {_few(cut_patch)}")
    atomic_write_text(output / "README.md", _readme(source, model_name, lines))
    return lines


def _few(names: list[str]) -> str:
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _model_name(source: ExportSource) -> str:
    """``agent__provider/model``: what ran, the way SWE-bench submissions name their system."""
    envelope = source.envelope
    agent = str(envelope.agent.get("name") or "agent")
    model = f"{envelope.provider}/{envelope.model}" if envelope.provider else (envelope.model or "")
    return f"{agent}__{model}" if model else agent


def _write_logs(directory: Path, record: AttemptRecord, artifacts: AttemptArtifacts | None, diff: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / "patch.diff", diff)
    report = {
        record.task_id: {
            "patch_is_None": artifacts is None or artifacts.patch is None,
            "patch_exists": bool(diff),
            "resolved": record.outcome == "pass",
            "worktrial": {
                "outcome": record.outcome,
                "claimed": record.claimed,
                "verified": record.verified,
                "reason": record.reason,
                "note": "resolved is worktrial's verdict from the suite's verify commands, not the SWE-bench harness's",
            },
        }
    }
    atomic_write_text(directory / "report.json", json.dumps(report, indent=2) + "\n")
    tests: list[str] = []
    log = [
        f"worktrial attempt {record.attempt} of {record.task_id}: {record.outcome}"
        + (f" ({record.reason})" if record.reason else ""),
        f"claimed {record.claimed}, verified {record.verified}, agent {record.agent_secs:.1f}s, "
        f"verify {record.verify_secs:.1f}s, cost {record.cost_usd}",
    ]
    if artifacts is not None:
        for command in artifacts.commands:
            status = "timed out" if command.timed_out else f"exit {command.exit_code}"
            section = f"=== {command.phase} {command.index}: {command.command} ({status}) ===\n{command.output_tail}"
            (tests if command.phase == "verify" else log).append(section)
        for title, stream in (("agent stdout", artifacts.agent_stdout), ("agent stderr", artifacts.agent_stderr)):
            if stream is not None and stream.text:
                log.append(f"=== {title} (last {len(stream.text)} of {stream.total_bytes} bytes) ===\n{stream.text}")
    atomic_write_text(directory / "test_output.txt", "\n".join(tests) + ("\n" if tests else ""))
    atomic_write_text(directory / "run_instance.log", "\n".join(log) + "\n")


def _yaml_str(value: str) -> str:
    """A YAML double-quoted scalar: JSON's string syntax is one (no YAML parser needed to write it)."""
    return json.dumps(value, ensure_ascii=True)


def _metadata(source: ExportSource, model_name: str) -> str:
    envelope = source.envelope
    name = envelope.run.label or model_name
    models = [envelope.model] if envelope.model else []
    model_lines = "".join(f"\n    - {_yaml_str(m)}" for m in models) or " []"
    return (
        f"# Written by worktrial {__version__} (export --format swe-bench) from run {envelope.run.id}.\n"
        "# Fill in info (authors, report, site, logo) before you submit; see the leaderboard's checklist.\n"
        "info:\n"
        f"  name: {_yaml_str(name)}\n"
        '  authors: ""\n'
        '  report: ""\n'
        '  site: ""\n'
        '  logo: ""\n'
        "tags:\n"
        "  checked: false\n"
        f"  model:{model_lines}\n"
        "  org: []\n"
        "  os_model: false\n"
        "  os_system: false\n"
        "  system:\n"
        f"    attempts: {_yaml_str(str(EXPORTED_ATTEMPT))}\n"
    )


def _readme(source: ExportSource, model_name: str, lines: list[str]) -> str:
    envelope = source.envelope
    report = envelope.report
    overall = report.overall
    said = "\n".join(f"- {line}" for line in lines)
    return f"""# {report.suite_name}: {model_name}

Exported by worktrial {__version__} from run `{envelope.run.id}` (suite `{report.suite_id}`, suite file sha256
`{envelope.suite_sha256}`, base commit `{envelope.run.workspace.base_commit}`).

- `all_preds.jsonl`: attempt {EXPORTED_ATTEMPT} of each task, its patch as `model_patch`.
- `logs/<instance_id>/`: that attempt's patch, worktrial's verdict (`report.json`), the verify commands' output
  (`test_output.txt`) and the attempt's own log (`run_instance.log`).
- `trajs/<instance_id>.json`: that attempt's trajectory in Harbor's ATIF, redacted (runs made with
  `--trajectories`).
- `envelope.json`: worktrial's envelope of the whole run ({report.k} attempts per task counted, pass@{report.k}
  {overall.pass_at_k}, pass^{report.k} {overall.pass_power_k}); `worktrial audit envelope.json --suite SUITE`
  recomputes it.

Worktrial's verdicts come from the suite's verify commands; the leaderboard's come from the SWE-bench harness
(`python -m swebench.harness.run_evaluation --predictions_path all_preds.jsonl ...`).

{said}
"""
