"""The private git dir is rebuilt only when something wrote to it since the harness did (``isolation/gitdir.py``):
an agent or a verifier that leaves it alone costs no rebuild, one that writes there (a commit, a config) gets the
full one, and every room still sees exactly the repository it should."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from worktrial.engine.run import RunOptions, run_suite
from worktrial.isolation import overlay, pool, verifier

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (make sandbox)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="overlay rooms are root's (an unprivileged harness copies)"),
]

AGENT = r"""
prompt=$(cat "$WORKTRIAL_PROMPT_FILE")
echo edited >> README.md
case "$prompt" in
  *commit*) git add README.md && git commit -qm "the agent's commit" ;;
esac
"""
# ``git status`` and ``git diff`` save the index they refreshed (a write): these only read the repository.
EDITED_ON_BASE = (
    'test "$(git log --format=%s)" = initial && grep -q edited README.md && test "$(git config user.name)" != verifier'
)
COMMITTED = 'test "$(git log -1 --format=%s)" = "the agent\'s commit" && git cat-file -e HEAD:README.md'


def test_only_a_git_dir_something_wrote_to_is_rebuilt(repo: Path, write_suite, monkeypatch: pytest.MonkeyPatch) -> None:
    if overlay.unavailable() is not None:
        pytest.skip(f"overlays cannot be mounted here: {overlay.unavailable()}")
    rebuilt: dict[str, int] = {"reset": 0, "verifier": 0}

    def counting(name: str, real: Any) -> Any:
        def count(*args: Any, **kwargs: Any) -> Any:
            rebuilt[name] += 1
            return real(*args, **kwargs)

        return count

    monkeypatch.setattr(pool.Slot, "_restore_git_dir", counting("reset", pool.Slot._restore_git_dir))
    monkeypatch.setattr(verifier, "_restore_git_dir", counting("verifier", verifier._restore_git_dir))
    (repo / "agent.sh").write_text(AGENT)
    git(repo, "add", "agent.sh")
    git(repo, "commit", "-qm", "initial", "--amend")
    # One worker, one slot: the tasks run one after the other on it, in this order.
    tasks = [
        task("a-edit", prompt="edit", verify_commands=[{"sh": EDITED_ON_BASE}]),
        task("b-commit", prompt="commit", verify_commands=[{"sh": COMMITTED}]),
        task("c-edit", prompt="edit", verify_commands=[{"sh": EDITED_ON_BASE}]),
        task("d-edit", prompt="edit", verify_commands=[{"sh": f"{EDITED_ON_BASE} && git config user.name verifier"}]),
        task("e-edit", prompt="edit", verify_commands=[{"sh": EDITED_ON_BASE}]),
    ]
    options = RunOptions(agent_cmd="sh agent.sh", workspace=repo, jobs=1)
    result = run_suite(write_suite(tasks), options)
    outcomes = {t.task_id: [(a.outcome, a.reason) for a in t.attempts] for t in result.envelope.report.tasks}
    assert all(o == [("pass", None)] for o in outcomes.values()), outcomes
    # The verifier's room of a-edit is the first the slot's harness wrote (full), b-commit's agent committed (full);
    # c, d and e's agents only edited files. Resets: after b-commit's room (a new commit's index) and after d-edit's
    # verifier wrote its config; the others put back only what the verifier's room changed.
    assert rebuilt == {"reset": 2, "verifier": 2}
