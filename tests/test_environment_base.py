"""The base an attempt starts from after environment setup: one commit with nothing to reveal, and patches against it.

A bug planted through ``environment.setup`` must not be one ``git show HEAD`` away (the setup commit's diff would be
the fix), and a venv of hundreds of files is part of the base, never of the agent's patch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task
from tests.fakes import share_with_sandbox

FIXED = "return a + b  # the-original-line"
PLANTED = "return a - b"
VENV = 'mkdir -p .venv/lib && for i in $(seq 300); do echo "x = $i" > .venv/lib/mod$i.py; done'
PLANT = f"sed -i 's/{FIXED}/{PLANTED}/' calc.py"
# Everything git can tell the agent about history: every ref, every reflog, HEAD's own diff.
SNOOP = "git log -p --all; git show HEAD; git reflog --all; git log -g --all -p; git for-each-ref; git stash list"


def _repo_with_calc(repo: Path) -> None:
    (repo / "calc.py").write_text(f"def add(a, b):\n    {FIXED}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "calc")


def _eval(cli: Any, repo: Path, suite: Path, agent: str, *extra: str) -> tuple[dict[str, Any], Path]:
    args = ["eval", "--suite", str(suite), "--agent-cmd", agent, "--trust", "-q", "--format", "json", *extra]
    result = cli(args, cwd=repo)
    assert result.exit_code in (0, 1), result.output
    envelope = json.loads(result.stdout)
    return envelope, repo / ".worktrial" / "runs" / envelope["run"]["id"]


def _patch(run_dir: Path, task_id: str, attempt: int) -> dict[str, Any]:
    stored = json.loads((run_dir / "attempts" / task_id / str(attempt) / "artifacts.json").read_text())
    patch: dict[str, Any] = stored["patch"]
    return patch


@pytest.mark.slow
def test_history_inside_an_attempt_does_not_reveal_a_planted_bug(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    _repo_with_calc(repo)
    shared = tmp_path / "shared"
    shared.mkdir()
    share_with_sandbox(shared)
    environment = {"setup": [{"sh": PLANT}, {"sh": VENV}]}
    verify = [{"sh": f"grep -q '{PLANTED}' calc.py"}]
    suite = write_suite([task("t1", verify_commands=verify)], attempts=2, environment=environment)
    agent = f'({SNOOP}) > "$(mktemp {shared}/seen-XXXXXX)" 2>&1; echo "# looked" >> calc.py'
    for extra in (("--jobs", "1"), ("--keep-worktrees",)):  # a pooled slot, and a fresh workspace per attempt
        envelope, _ = _eval(cli, repo, suite, agent, *extra)
        assert envelope["report"]["overall"]["passed_runs"] == 2, envelope["report"]["tasks"]
    seen = sorted(shared.glob("seen-*"))
    assert len(seen) == 4
    for path in seen:
        text = path.read_text()
        assert PLANTED in text, text[-2000:]  # the agent's git works and shows its base
        assert "the-original-line" not in text, text
        assert "environment setup" not in text


def test_the_base_is_one_commit_the_agent_can_build_on(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    _repo_with_calc(repo)
    environment = {"setup": [{"sh": PLANT}]}
    # The agent commits its work; verification sees that commit on top of exactly one base commit.
    verify = [{"sh": 'test "$(git rev-list --count HEAD)" = 2 && test "$(git log -1 --format=%s)" = mine'}]
    suite = write_suite([task("t1", verify_commands=verify)], attempts=2, environment=environment)
    agent = "echo x > new.txt && git add new.txt && git commit -qm mine"
    envelope, _ = _eval(cli, repo, suite, agent, "--jobs", "1")
    assert envelope["report"]["overall"]["passed_runs"] == 2, envelope["report"]["tasks"]


@pytest.mark.slow
def test_a_venv_in_the_environment_never_appears_in_the_patch(cli, repo: Path, write_suite) -> None:
    _repo_with_calc(repo)
    environment = {"setup": [{"sh": PLANT}, {"sh": VENV}, {"sh": "echo built > build.log"}]}
    suite = write_suite([task("t1", verify_commands=["true"])], attempts=2, environment=environment)
    agent = f"sed -i 's/{PLANTED}/return b + a/' calc.py"
    for extra in (("--jobs", "1"), ("--keep-worktrees",)):
        _, run_dir = _eval(cli, repo, suite, agent, *extra)
        for attempt in (1, 2):
            patch = _patch(run_dir, "t1", attempt)
            assert patch["files"] == ["calc.py"], patch["files"][:5]
            assert f"-    {PLANTED}" in patch["diff"] and "+    return b + a" in patch["diff"]
            assert not patch["truncated"]


SETUP_SLEEP = 4


@pytest.mark.slow
def test_setup_time_is_its_own_figure_never_the_agents(cli, repo: Path, write_suite) -> None:
    """Environment setup that takes longer than the agent's whole timeout: the agent still has its full timeout,
    and the setup's seconds are ``setup_secs`` in the record, the trace and the report, not in ``duration_secs``
    (the agent here returns at once, so its duration is far below the setup's sleep)."""
    from worktrial.model.envelope import Envelope
    from worktrial.render.markdown import render_markdown

    environment = {"setup": [{"sh": f"sleep {SETUP_SLEEP}"}]}
    suite = write_suite([task("t1", timeout_secs=2, verify_commands=["true"])], attempts=2, environment=environment)
    envelope, _ = _eval(cli, repo, suite, "true", "--jobs", "1")
    attempts = envelope["report"]["tasks"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["pass", "pass"]
    first = attempts[0]  # the slot was built (and its environment set up) for the first attempt
    assert first["setup_secs"] >= SETUP_SLEEP
    assert first["duration_secs"] < first["setup_secs"]
    assert attempts[1]["setup_secs"] is not None
    trace = json.loads((repo / first["trace"]).read_text())
    assert trace["setup_secs"] == first["setup_secs"] and trace["duration_secs"] == first["duration_secs"]
    report = envelope["report"]
    assert report["setup_secs"] == sum(a["setup_secs"] for a in attempts)
    assert report["mean_setup_secs_per_attempt"] == report["setup_secs"] / 2
    assert "**Setup:** " in render_markdown(Envelope.model_validate(envelope))
