"""``worktrial export RUN --format swe-bench``: the SWE-bench experiments layout, read back as the leaderboard's
tools read it; runs without trajectories export without them and say so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.atif_check import assert_atif
from tests.builtin_support import run_eval
from tests.conftest import task

STEP = json.dumps({"source": "agent", "message": "fixed README.md"})
AGENT = f'echo fixed >> README.md; [ -z "$WORKTRIAL_TRAJECTORY_FILE" ] || echo \'{STEP}\' >"$WORKTRIAL_TRAJECTORY_FILE"'
IDS = ["astropy__astropy-12907", "weird/id with spaces"]


def exported(cli: Any, repo: Path, write_suite: Any, tmp_path: Path, *flags: str) -> tuple[Path, Any, dict[str, Any]]:
    suite = write_suite([task(i, prompt="fix it", verify_commands=["grep -q fixed README.md"]) for i in IDS])
    result = run_eval(cli, repo, suite, "--agent-cmd", AGENT, *flags)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    output = tmp_path / "submission"
    done = cli(["export", envelope["run"]["id"], "--format", "swe-bench", "--output", str(output)], cwd=repo)
    assert done.exit_code == 0, done.output
    return output, done, envelope


def test_a_run_exports_as_a_swe_bench_submission(cli: Any, repo: Path, write_suite: Any, tmp_path: Path) -> None:
    output, done, envelope = exported(cli, repo, write_suite, tmp_path, "--trajectories")
    predictions = [json.loads(line) for line in (output / "all_preds.jsonl").read_text().splitlines()]
    assert [p["instance_id"] for p in predictions] == IDS
    assert {p["model_name_or_path"] for p in predictions} == {"command"}
    assert all("+fixed" in p["model_patch"] and "a/README.md" in p["model_patch"] for p in predictions)
    safe = "weird_id_with_spaces-" in " ".join(os.listdir(output / "logs"))
    assert safe and (output / "logs" / IDS[0] / "patch.diff").read_text() == predictions[0]["model_patch"]
    report = json.loads((output / "logs" / IDS[0] / "report.json").read_text())
    assert report[IDS[0]]["resolved"] is True and report[IDS[0]]["patch_exists"] is True
    assert "grep -q fixed README.md" in (output / "logs" / IDS[0] / "test_output.txt").read_text()
    trajectory = json.loads((output / "trajs" / f"{IDS[0]}.json").read_text())
    assert_atif(trajectory)
    assert trajectory["steps"][0]["message"] == "fixed README.md"
    assert len(os.listdir(output / "trajs")) == 2 and "2 trajectory file(s) in trajs/" in done.output
    assert json.loads((output / "envelope.json").read_text()) == envelope
    yaml = pytest.importorskip("yaml")
    metadata = yaml.safe_load((output / "metadata.yaml").read_text())
    assert metadata["tags"]["system"]["attempts"] == "1" and metadata["info"]["name"] == "command"
    assert metadata["tags"]["checked"] is False and metadata["info"]["report"] == ""
    assert "all_preds.jsonl" in (output / "README.md").read_text()


def test_without_trajectories_the_export_says_so(cli: Any, repo: Path, write_suite: Any, tmp_path: Path) -> None:
    output, done, _ = exported(cli, repo, write_suite, tmp_path)
    assert not (output / "trajs").exists()
    assert "no trajectories" in done.output and "--trajectories" in done.output
    again = cli(["export", "latest-or-not", "--format", "swe-bench", "--output", str(output)], cwd=repo)
    assert again.exit_code == 2
    run_id = json.loads((output / "envelope.json").read_text())["run"]["id"]
    refused = cli(["export", run_id, "--format", "swe-bench", "--output", str(output)], cwd=repo)
    assert refused.exit_code == 2 and "not an empty directory" in refused.output


CHECK = """
import json, sys, yaml
from swebench.harness.utils import get_predictions_from_file
from swebench.utils import get_modified_files
predictions = get_predictions_from_file(sys.argv[1] + "/all_preds.jsonl", "SWE-bench/SWE-bench_Verified", "test")
print(json.dumps({
    "ids": [p["instance_id"] for p in predictions],
    "files": [get_modified_files(p["model_patch"]) for p in predictions],
    "metadata": yaml.safe_load(open(sys.argv[1] + "/metadata.yaml")),
}))
"""


def _swebench_python() -> str | None:
    """An interpreter with the swebench package: this one, or $SWEBENCH_PYTHON (it brings ~80 packages, so it is
    not a dev dependency: python -m venv /tmp/swe && /tmp/swe/bin/pip install swebench)."""
    probe = subprocess.run([sys.executable, "-c", "import swebench"], capture_output=True, check=False)
    if probe.returncode == 0:
        return sys.executable
    given = os.environ.get("SWEBENCH_PYTHON")
    return given if given and shutil.which(given) else None


@pytest.mark.slow
def test_the_swebench_package_reads_the_export_back(cli: Any, repo: Path, write_suite: Any, tmp_path: Path) -> None:
    python = _swebench_python()
    if python is None:
        pytest.skip("swebench is not installed here (set SWEBENCH_PYTHON to an interpreter that has it)")
    output, _, _ = exported(cli, repo, write_suite, tmp_path, "--trajectories")
    read = subprocess.run([python, "-c", CHECK, str(output)], capture_output=True, text=True, check=False)
    assert read.returncode == 0, read.stderr
    found = json.loads(read.stdout.strip().splitlines()[-1])
    assert found["ids"] == IDS and found["files"] == [["README.md"], ["README.md"]]
    assert found["metadata"]["tags"]["system"]["attempts"] == "1"
