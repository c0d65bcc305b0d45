"""Regrade and reuse (issue 42): stored attempts judged again without their agent, and a suite's unchanged tasks
carried over. The agent is a real command agent that leaves a line in a marker file outside the sandbox
(``--sandbox off``) every time it runs, so "no agent ran" is counted, not assumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from worktrial.model.envelope import Envelope
from worktrial.state.store import runs_dir

pytestmark = pytest.mark.slow  # each runs eval two or three times (10-30 s on a loaded 2-core machine)

AGENT = """\
import os, pathlib, sys
prompt = os.environ["WORKTRIAL_PROMPT"]
with open(sys.argv[1], "a") as marker:
    marker.write(prompt.split()[0] + "\\n")
if prompt.startswith("fix"):
    pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a + b\\n")
    pathlib.Path("data.bin").write_bytes(bytes(range(256)) * 3)
    os.symlink("calc.py", "link.py")
    os.remove("gone.txt")
    os.chmod("run.sh", 0o755)
else:
    pathlib.Path(prompt.split()[0] + ".txt").write_text("made\\n")
"""

# What the fixed verifier checks is the agent's tree exactly: content, a binary file, a symlink, a deletion, a mode.
FIXED = (
    'python3 -c "import calc, os; assert calc.add(2, 2) == 4; '
    "assert open('data.bin', 'rb').read() == bytes(range(256)) * 3; assert os.readlink('link.py') == 'calc.py'; "
    "assert not os.path.exists('gone.txt'); assert os.access('run.sh', os.X_OK)\""
)
BROKEN = 'python3 -c "import calc; assert calc.add(2, 2) == 5"'  # the verifier's own bug


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "gone.txt").write_text("to be deleted\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho run\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    (tmp_path / "agent.py").write_text(AGENT)
    return repo


def _suite(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"id": "calc", "attempts": 2, "tasks": tasks}, indent=1))
    return path


def _marker_lines(tmp_path: Path) -> list[str]:
    marker = tmp_path / "marker"
    return marker.read_text().split() if marker.exists() else []


def _eval(cli, project: Path, suite: Path, *extra: str) -> Envelope:
    agent = f"python3 {project.parent / 'agent.py'} {project.parent / 'marker'}"
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--sandbox", "off", "--trust", "--format", "json"]
    result = cli([*args, *extra], cwd=project)
    assert result.exit_code == 0, result.output
    return Envelope.model_validate_json(result.stdout)


def _outcomes(envelope: Envelope) -> dict[tuple[str, int], str]:
    return {(a.task_id, a.attempt): a.outcome for t in envelope.report.tasks for a in t.attempts}


def _audit(cli, project: Path, envelope: Envelope, suite: Path) -> Any:
    path = runs_dir(project) / envelope.run.id / "envelope.json"
    return cli(["audit", str(path), "--suite", str(suite)], cwd=project)


def test_regrade_changes_verdicts_exactly_where_the_verifier_was_fixed_and_runs_no_agent(
    cli, project: Path, tmp_path: Path
) -> None:
    suite = _suite(
        tmp_path / "suite.json",
        [
            task("fix", prompt="fix add", verify_commands=[{"sh": BROKEN}]),
            task("keep", prompt="keep it", verify_commands=["test -f keep.txt"]),
        ],
    )
    first = _eval(cli, project, suite)
    assert _outcomes(first) == {("fix", 1): "fail", ("fix", 2): "fail", ("keep", 1): "pass", ("keep", 2): "pass"}
    assert len(_marker_lines(tmp_path)) == 4

    _suite(
        suite,
        [
            task("fix", prompt="fix add", verify_commands=[{"sh": FIXED}]),
            task("keep", prompt="keep it", verify_commands=["test -f keep.txt"]),
        ],
    )
    result = cli(["regrade", first.run.id, "--trust", "--format", "json"], cwd=project)
    assert result.exit_code == 0, result.output
    regraded = Envelope.model_validate_json(result.stdout)

    assert len(_marker_lines(tmp_path)) == 4  # no agent ran
    assert _outcomes(regraded) == {("fix", 1): "pass", ("fix", 2): "pass", ("keep", 1): "pass", ("keep", 2): "pass"}
    assert regraded.run.reuse is not None and regraded.run.reuse.mode == "regrade"
    assert (regraded.run.reuse.regraded, regraded.run.reuse.not_regraded) == (4, [])
    for attempt in (a for t in regraded.report.tasks for a in t.attempts):
        origin = attempt.provenance
        assert origin is not None and origin.kind == "regraded" and origin.reverified
        assert (origin.run, origin.attempt, origin.suite_digest) == (first.run.id, attempt.attempt, first.bundle_digest)
        assert attempt.change is not None and origin.change_sha256 == attempt.change.sha256
    assert regraded.bundle_digest != first.bundle_digest
    audited = _audit(cli, project, regraded, suite)
    assert audited.exit_code == 0, audited.output
    compared = cli(["compare", first.run.id, regraded.run.id], cwd=project)
    assert compared.exit_code == 0, compared.output
    assert "regraded: the same agent runs judged by another verifier" in compared.output


def test_reuse_with_one_task_edited_runs_only_that_tasks_attempts(cli, project: Path, tmp_path: Path) -> None:
    tasks = [task(name, prompt=f"{name} task", verify_commands=[f"test -f {name}.txt"]) for name in ("a", "b", "c")]
    suite = _suite(tmp_path / "suite.json", tasks)
    first = _eval(cli, project, suite)
    assert sorted(_marker_lines(tmp_path)) == ["a", "a", "b", "b", "c", "c"]

    tasks[1]["prompt"] = "b task, reworded"  # the agent's half changed: it runs again
    tasks[2]["verify_commands"] = ["test -s c.txt"]  # only the verifier changed: regraded
    _suite(suite, tasks)
    second = _eval(cli, project, suite, "--reuse", first.run.id)

    assert sorted(_marker_lines(tmp_path)) == ["a", "a", "b", "b", "b", "b", "c", "c"]  # only b's two attempts ran
    kinds = {
        (a.task_id, a.attempt): a.provenance.kind if a.provenance else "ran"
        for t in second.report.tasks
        for a in t.attempts
    }
    assert kinds == {
        ("a", 1): "reused", ("a", 2): "reused", ("b", 1): "ran", ("b", 2): "ran",
        ("c", 1): "regraded", ("c", 2): "regraded",
    }  # fmt: skip
    reuse = second.run.reuse
    assert reuse is not None and (reuse.reused, reuse.regraded, reuse.ran) == (2, 2, 2)
    assert set(_outcomes(second).values()) == {"pass"}
    assert _audit(cli, project, second, suite).exit_code == 0
    shown = cli(["report", second.run.id, "--format", "markdown"], cwd=project).output
    assert f"reused run {first.run.id}" in shown and "2 reused, 2 regraded, 2 ran" in shown

    # resume keeps its exact-config rule: a stored run is continued as it was measured, never reused into.
    refused = cli(["resume", first.run.id, "--trust"], cwd=project)
    assert refused.exit_code == 2 and "differs from the stored run" in refused.output


def test_audit_rejects_a_forged_provenance(cli, project: Path, tmp_path: Path) -> None:
    tasks = [task(name, prompt=f"{name} task", verify_commands=[f"test -f {name}.txt"]) for name in ("a", "b")]
    suite = _suite(tmp_path / "suite.json", tasks)
    first = _eval(cli, project, suite)
    tasks[1]["prompt"] = "b task, reworded"
    _suite(suite, tasks)
    second = _eval(cli, project, suite, "--reuse", first.run.id)
    published = runs_dir(project) / second.run.id / "envelope.json"
    assert cli(["audit", str(published), "--suite", str(suite)], cwd=project).exit_code == 0

    def forged(change: Any) -> Any:
        data = json.loads(published.read_text())
        change({(a["task_id"], a["attempt"]): a for t in data["report"]["tasks"] for a in t["attempts"]})
        copy = tmp_path / "forged.json"  # a published copy: its provenance is checked against the source run
        copy.write_text(json.dumps(data))
        return cli(["audit", str(copy), "--suite", str(suite), "--workspace", str(project)], cwd=project)

    def ran_claims_reused(attempts: dict[Any, Any]) -> None:  # an attempt b ran here, passed off as a's record
        attempts[("b", 1)]["provenance"] = dict(attempts[("a", 1)]["provenance"])
        attempts[("a", 1)]["provenance"]["attempt"] = 2

    result = forged(ran_claims_reused)
    assert result.exit_code == 1
    assert "run.reuse.reused: 2, but 3 record(s) say so" in result.output
    assert "agent_secs" in result.output and f"in run {first.run.id}" in result.output

    def other_source(attempts: dict[Any, Any]) -> None:
        attempts[("a", 2)]["provenance"]["run"] = second.run.id

    result = forged(other_source)
    assert result.exit_code == 1 and "run.reuse another" in result.output


def test_what_cannot_be_regraded_is_left_out_with_why(cli, project: Path, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite.json", [task("fix", prompt="fix add", verify_commands=[{"sh": BROKEN}])])
    kept = _eval(cli, project, suite, "--attempts", "1")
    unkept = _eval(cli, project, suite, "--attempts", "1", "--no-artifacts")
    change = next((runs_dir(project) / kept.run.id / "attempts").rglob("change.diff"))
    change.write_bytes(change.read_bytes().replace(b"a + b", b"a * b"))  # 2 * 2 == 4 too: an edit that would pass

    for run, why in ((unkept, "kept no change for it (--no-artifacts"), (kept, "altered after the run")):
        result = cli(["regrade", run.run.id, "--trust", "--format", "json"], cwd=project)
        assert result.exit_code == 0, result.output
        envelope = Envelope.model_validate_json(result.stdout)
        assert envelope.run.reuse is not None and [n.task_id for n in envelope.run.reuse.not_regraded] == ["fix"]
        assert why in envelope.run.reuse.not_regraded[0].reason and why in result.stderr
        assert not envelope.run.complete and envelope.report.overall.total_runs == 0
    assert len(_marker_lines(tmp_path)) == 2


def test_a_task_whose_prompt_changed_is_not_regraded(cli, project: Path, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite.json", [task("fix", prompt="fix add", verify_commands=[{"sh": FIXED}])])
    first = _eval(cli, project, suite, "--attempts", "1")
    _suite(suite, [task("fix", prompt="fix add, and more", verify_commands=[{"sh": FIXED}])])
    result = cli(["regrade", first.run.id, "--trust", "--format", "json"], cwd=project)
    envelope = Envelope.model_validate_json(result.stdout)
    assert envelope.run.reuse is not None
    assert "the task changed where its agent's run depended on it (prompt)" in envelope.run.reuse.not_regraded[0].reason
    resumed = cli(["resume", envelope.run.id, "--trust", "--format", "json"], cwd=project)  # the agent runs it now
    assert resumed.exit_code == 0, resumed.output
    assert _outcomes(Envelope.model_validate_json(resumed.stdout)) == {("fix", 1): "pass"}
    assert len(_marker_lines(tmp_path)) == 2
