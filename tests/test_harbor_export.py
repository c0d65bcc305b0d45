"""``worktrial export RUN --format harbor``: Harbor's job directory layout and the leaderboard's metadata.yaml.

The pure tests check the layout against the field names of Harbor's own models (JobConfig, JobResult, TrialConfig,
TrialResult, VerifierResult in Harbor 0.26), written down here; the slow one has Harbor itself load the directory,
where a Python with Harbor installed is given (``WORKTRIAL_HARBOR_PYTHON``, or the trixie chroot that
benchmarks/harbor_side_by_side.py builds, ``WORKTRIAL_HARBOR_CHROOT``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task

# What Harbor's loader needs of each file (its models' required fields), and fields it knows (a typo fails).
JOB_CONFIG_KEYS = {"schema_version", "job_name", "jobs_dir", "n_attempts", "timeout_multiplier", "agents", "tasks"}
JOB_CONFIG_KNOWN = JOB_CONFIG_KEYS | {
    "agent_timeout_multiplier",
    "verifier_timeout_multiplier",
    "environment_build_timeout_multiplier",
    "n_concurrent_trials",
    "environment",
    "verifier",
    "datasets",
}
JOB_RESULT_REQUIRED = {"id", "started_at", "n_total_trials", "stats"}
JOB_STATS_KNOWN = {"n_completed_trials", "n_errored_trials", "evals"}
EVAL_KNOWN = {"n_trials", "n_errors", "metrics", "pass_at_k", "reward_stats", "exception_stats"}
TRIAL_CONFIG_REQUIRED = {"task"}
TRIAL_RESULT_REQUIRED = {"task_name", "trial_name", "trial_uri", "task_id", "task_checksum", "config", "agent_info"}
TRIAL_RESULT_KNOWN = TRIAL_RESULT_REQUIRED | {
    "schema_version",
    "verifier_environment_mode",
    "id",
    "source",
    "agent_result",
    "verifier_result",
    "exception_info",
}
AGENT_RESULT_KNOWN = {"n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd"}
METADATA_KEYS = ["agent_url", "agent_display_name", "agent_org_display_name", "models"]


def _run(cli, write_suite, repo: Path, attempts: int) -> str:
    tasks = [task("solved"), task("unsolved", solution=[{"sh": "true"}])]
    suite = write_suite(tasks, attempts=attempts)
    result = cli(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "--quiet"], cwd=repo
    )
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["run"]["id"])


def _export(cli, repo: Path, run_id: str, out: Path, *more: str):
    args = ["export", run_id, "--format", "harbor", "--output", str(out), *more]
    return cli(args, cwd=repo)


def _json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture
def exported(cli, write_suite, repo: Path, tmp_path: Path) -> Path:
    run_id = _run(cli, write_suite, repo, attempts=5)
    out = tmp_path / "submission"
    result = _export(cli, repo, run_id, out, "--agent-url", "https://example.org/a", "--agent-org", "Example")
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_the_layout_has_harbor_s_files_and_field_names(exported: Path) -> None:
    (job,) = [p for p in exported.iterdir() if p.is_dir()]
    config, result = _json(job / "config.json"), _json(job / "result.json")
    assert JOB_CONFIG_KEYS <= set(config) <= JOB_CONFIG_KNOWN
    assert config["timeout_multiplier"] == 1.0 and config["n_attempts"] == 5
    assert set(result) >= JOB_RESULT_REQUIRED
    assert set(result["stats"]) <= JOB_STATS_KNOWN
    (evals,) = result["stats"]["evals"].values()
    assert set(evals) <= EVAL_KNOWN and evals["n_trials"] == 10
    assert evals["metrics"] == [{"mean": 0.5}]
    trials = sorted(p for p in job.iterdir() if p.is_dir())
    assert len(trials) == result["n_total_trials"] == 10
    outcomes: dict[str, set[float]] = {}
    for trial in trials:
        trial_config, trial_result = _json(trial / "config.json"), _json(trial / "result.json")
        assert set(trial_config) >= TRIAL_CONFIG_REQUIRED
        assert TRIAL_RESULT_REQUIRED <= set(trial_result) <= TRIAL_RESULT_KNOWN
        assert set(trial_result["agent_result"]) <= AGENT_RESULT_KNOWN
        assert trial_result["trial_name"] == trial.name and trial.name.startswith(trial_result["task_name"] + "__")
        reward = trial_result["verifier_result"]["rewards"]["reward"]
        assert (trial / "verifier" / "reward.txt").read_text().strip() == f"{reward:g}"
        assert (trial / "agent").is_dir()
        outcomes.setdefault(trial_result["task_name"], set()).add(reward)
    assert outcomes == {"solved": {1.0}, "unsolved": {0.0}}


def test_metadata_yaml_has_the_leaderboard_s_fields(exported: Path) -> None:
    lines = (exported / "metadata.yaml").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == METADATA_KEYS
    assert lines[0] == 'agent_url: "https://example.org/a"' and lines[3] == "models: []"


def test_the_leaderboard_s_rules_are_checked_before_export(cli, write_suite, repo: Path, tmp_path: Path) -> None:
    run_id = _run(cli, write_suite, repo, attempts=2)
    meta = ["--agent-url", "https://example.org/a", "--agent-org", "Example"]
    refused = _export(cli, repo, run_id, tmp_path / "out", *meta)
    assert refused.exit_code == 2
    assert "fewer than 5 trials (first: solved); run with --attempts 5" in refused.output
    assert not (tmp_path / "out").exists()
    written = _export(cli, repo, run_id, tmp_path / "out", "--unchecked")
    assert written.exit_code == 0 and "not a leaderboard submission" in written.output
    assert not (tmp_path / "out" / "metadata.yaml").exists()


def _harbor_python() -> list[str] | None:
    if python := os.environ.get("WORKTRIAL_HARBOR_PYTHON"):
        return [python]
    chroot = os.environ.get("WORKTRIAL_HARBOR_CHROOT")
    if chroot and (Path(chroot) / "opt/harbor/bin/python").exists() and os.geteuid() == 0:
        return ["chroot", chroot, "/opt/harbor/bin/python"]
    return None


LOADER = """
import json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.viewer.scanner import JobScanner
root = Path(sys.argv[1])
scanner = JobScanner(root)
(job,) = scanner.list_jobs()
JobConfig.model_validate(json.loads((root / job / "config.json").read_text()))
JobResult.model_validate_json((root / job / "result.json").read_text())
rewards = []
for trial in scanner.list_trials(job):
    TrialConfig.model_validate_json((root / job / trial / "config.json").read_text())
    result = TrialResult.model_validate_json((root / job / trial / "result.json").read_text())
    rewards.append(result.verifier_result.rewards["reward"])
print(json.dumps(sorted(rewards)))
"""


@pytest.mark.slow
def test_harbor_s_own_loader_reads_the_export(exported: Path) -> None:
    python = _harbor_python()
    if python is None:
        pytest.skip("needs Harbor: WORKTRIAL_HARBOR_PYTHON, or WORKTRIAL_HARBOR_CHROOT as root")
    target = exported
    if python[0] == "chroot":  # the chroot sees the export through a copy inside it
        inside = Path(python[1]) / "tmp" / exported.name
        subprocess.run(["cp", "-a", str(exported), str(inside)], check=True)
        target = Path("/tmp") / exported.name
    try:
        loaded = subprocess.run([*python, "-c", LOADER, str(target)], capture_output=True, text=True, check=False)
    finally:
        if python[0] == "chroot":
            subprocess.run(["rm", "-rf", str(inside)], check=True)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert json.loads(loaded.stdout) == [0.0] * 5 + [1.0] * 5
