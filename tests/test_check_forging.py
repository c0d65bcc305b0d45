"""``worktrial check`` forges each verifier as an agent would, on the oracle's result: a pass that survives the code
under test being replaced by an exit, or a module planted next to it, is a pass an agent gets without solving the
task. The form check used to advise, ``python3 -I "$WORKTRIAL_SUITE_DIR/hidden/test.py"``, is one: the hidden test
imports the module under test, whose ``os._exit(0)`` ends it with status 0 (its command line names nothing of the
worktree, so only running it shows this). A judge that runs the code in a child and compares its output is not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile_support import run_worktrial

pytestmark = pytest.mark.slow

HIDDEN_TEST = """import os, sys
sys.path.insert(0, os.getcwd())
import mod
assert mod.slugify("Hello World") == "hello-world"
"""
# Imports json after putting the worktree first on sys.path: a json.py there is imported instead.
SHADOWED_JUDGE = """import os, subprocess, sys
sys.path.insert(0, os.getcwd())
import json

import pytest
code = "import sys; sys.path.append('.'); import mod; print(mod.slugify('Hello World'))"
out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True).stdout
sys.exit(0 if json.dumps(out.strip()) == json.dumps("hello-world") else 1)
"""
# The form check advises now: the judge's own imports first, the code under test in a child, its output compared.
JUDGE = """import subprocess, sys
code = "import sys; sys.path.append('.'); import mod; print(mod.slugify('Hello World'))"
out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True).stdout
sys.exit(0 if out.strip() == "hello-world" else 1)
"""
SOLUTION = "def slugify(text):\n    return '-'.join(text.lower().split())\n"


def test_check_forges_verifiers_like_an_agent_would(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "mod.py").write_text("def slugify(text):\n    raise NotImplementedError\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    suite_dir = tmp_path / "suite"
    (suite_dir / "hidden").mkdir(parents=True)
    (suite_dir / "solutions").mkdir()
    (suite_dir / "hidden" / "test_mod.py").write_text(HIDDEN_TEST)
    (suite_dir / "hidden" / "shadowed_judge.py").write_text(SHADOWED_JUDGE)
    (suite_dir / "hidden" / "judge.py").write_text(JUDGE)
    (suite_dir / "solutions" / "mod.py").write_text(SOLUTION)
    solution = [{"sh": 'cp "$WORKTRIAL_SUITE_DIR/solutions/mod.py" mod.py'}]
    tasks = [
        {"id": name, "prompt": f"Make slugify work ({name}).", "timeout_secs": 600, "solution": solution,
         "verify_commands": [{"sh": f'python3 -I "$WORKTRIAL_SUITE_DIR/hidden/{script}"'}]}
        for name, script in (("hidden-test", "test_mod.py"), ("shadowed", "shadowed_judge.py"), ("judge", "judge.py"))
    ]  # fmt: skip
    suite = suite_dir / "suite.json"
    suite.write_text(json.dumps({"id": "forge", "files": ["hidden/**", "solutions/**"], "tasks": tasks}))
    result = run_worktrial(["check", str(suite), "--trust", "--repeats", "1", "--format", "json"], cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == 0, report
    lints = {lint["task_id"]: lint for lint in report["lints"]}
    assert sorted(lints) == ["hidden-test", "shadowed"], report["lints"]
    assert "exit 0 as it loads (worktrial check put an exit in mod.py)" in lints["hidden-test"]["message"]
    assert "json.py" in lints["shadowed"]["message"] and "planted" in lints["shadowed"]["message"]
    for lint in lints.values():
        assert lint["severity"] == "warning" and lint["where"].endswith(".verify_commands")
        assert "The rule:" in lint["note"] and "never on an exit status alone" in lint["note"]
    # The probe put the oracle's result back after each try: the judge's task still passed its re-run.
    assert {t["task_id"]: t["verify_passes"] for t in report["tasks"]}["judge"] == 2
