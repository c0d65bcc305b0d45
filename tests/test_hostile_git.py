"""The harness's own git never acts on what the agent or the repository left (issue: the verifier's room).

Each attack plants something that would run a program as the harness's user, outside every sandbox, the moment the
harness ran git on the attempt's state with the state's own config; or hides an edit from the stored patch. The
markers live where no sandboxed process can write (a directory the sandbox does not show), so a marker that appears
was written from outside.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("rooms")]  # every attack, --sandbox on, both room paths


def _eval(cli: Any, repo: Path, suite: Path, *args: str) -> dict[str, Any]:
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *args], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def _patch(repo: Path, envelope: dict[str, Any], task_id: str) -> dict[str, Any]:
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    stored: dict[str, Any] = json.loads((run_dir / "attempts" / task_id / "1" / "artifacts.json").read_text())
    return stored["patch"]  # type: ignore[no-any-return]


def test_an_edit_hidden_from_the_agents_index_still_shows_in_the_patch(cli: Any, repo: Path, write_suite) -> None:
    """``git update-index --assume-unchanged`` hides an edit from ``git add`` on the agent's own index; the patch
    is made from the files, with an index only the harness wrote."""
    (repo / "tests").mkdir()
    (repo / "tests" / "check.sh").write_text("exit 1\n")
    git(repo, "add", "tests/check.sh")
    git(repo, "commit", "-qm", "a failing check")
    agent = (
        "printf 'exit 0\\n' > tests/check.sh && git update-index --assume-unchanged tests/check.sh "
        "&& git diff --quiet HEAD -- tests/ && touch done.txt"
    )
    envelope = _eval(cli, repo, write_suite([task("hide")]), "--agent-cmd", agent, "--sandbox", "on")
    assert envelope["report"]["tasks"][0]["attempts"][0]["outcome"] == "pass"  # the agent's own git saw nothing
    patch = _patch(repo, envelope, "hide")
    assert "tests/check.sh" in patch["files"] and "+exit 0" in patch["diff"], patch


def test_a_nested_repositorys_diff_command_never_runs_in_the_harness(
    cli: Any, repo: Path, write_suite, tmp_path: Path
) -> None:
    """``diff.submodule=diff`` in the slot's config and a nested repository whose own config and attributes name a
    diff driver command: the harness's patch capture would run that command as the user, unsandboxed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "ran-in-the-harness"
    agent = tmp_path / "agent.sh"
    agent.write_text(
        "set -e\n"
        "git config diff.submodule diff\n"
        "mkdir sub && cd sub && git init -q && git config user.email a@b && git config user.name a\n"
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > ext.sh && chmod +x ext.sh\n"
        'git config diff.evil.command "$PWD/ext.sh" && echo "* diff=evil" > .gitattributes\n'
        "echo one > f && git add -A && git commit -qm one && echo two > f && git commit -qam two\n"
        "cd .. && touch done.txt\n"
    )
    envelope = _eval(cli, repo, write_suite([task("nested")]), "--agent-cmd", f"sh {agent}", "--sandbox", "on")
    assert envelope["report"]["tasks"][0]["attempts"][0]["outcome"] == "pass"
    assert not marker.exists(), "the nested repository's diff command ran outside the sandbox"
    assert "sub" in _patch(repo, envelope, "nested")["files"]


@pytest.mark.slow
def test_environment_setup_cannot_plant_a_filter_for_the_harnesss_git(
    cli: Any, repo: Path, write_suite, tmp_path: Path
) -> None:
    """The repository's own setup code (an npm preinstall, a setup.py) writes a clean filter into the slot's config
    and a .gitattributes that applies it: the commit of the setup's result, and every reset after it, would run it
    as the user before any agent starts."""
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "filter-ran-in-the-harness"
    plant = (
        f"git config filter.evil.clean 'touch {marker}; cat' && git config filter.evil.smudge 'touch {marker}; cat' "
        "&& printf '* filter=evil\\n' > .gitattributes && echo built > built.txt"
    )
    suite = write_suite(
        [task("t1", verify_commands=["test -f built.txt", "test -f done.txt"]), task("t2")],
        attempts=2,
        environment={"setup": [{"sh": plant}]},
    )
    envelope = _eval(cli, repo, suite, "--agent-cmd", "touch done.txt", "--sandbox", "on", "--jobs", "1")
    outcomes = [a["outcome"] for t in envelope["report"]["tasks"] for a in t["attempts"]]
    assert outcomes == ["pass"] * 4, envelope["report"]["tasks"]
    assert not marker.exists(), "the repository's filter ran outside the sandbox"


def _failing_check(repo: Path) -> None:
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests" / "check.sh").write_text("exit 1\n")
    git(repo, "add", "tests/check.sh")
    git(repo, "commit", "-qm", "a failing check")


GIT_VERIFY = {"sh": "git diff --quiet refs/worktrial/base -- tests/ && sh tests/check.sh"}
ASSUME_UNCHANGED = (
    "printf 'exit 0\\n' > tests/check.sh && git update-index --assume-unchanged tests/check.sh && touch done.txt"
)
REPLACE = (
    "printf 'exit 0\\n' > tests/check.sh && git commit -qam 'the check passes' "
    "&& git replace $(git rev-parse refs/worktrial/base) HEAD && touch done.txt"
)


def test_git_metadata_the_agent_forged_never_reaches_the_verdict(cli: Any, repo: Path, write_suite) -> None:
    """A verify that asks git whether the tests were changed: the agent hides its edit of the check from its own
    index (assume-unchanged) or rewrites what the base commit means (git replace). Verification runs with the
    harness's git metadata, so both edits are seen and both attempts fail; with ``verify_in: worktree`` (the
    agent's tree as it left it, documented as weaker) the same forgeries pass."""
    _failing_check(repo)
    tasks = [task("hide", verify_commands=[GIT_VERIFY]), task("replace", verify_commands=[GIT_VERIFY])]
    agent = f'case "$WORKTRIAL_TASK_ID" in hide) {ASSUME_UNCHANGED};; replace) {REPLACE};; esac'
    for verify_in, expected in (("fresh", "fail"), ("worktree", "pass")):
        suite = write_suite(tasks, verify_in=verify_in)
        envelope = _eval(cli, repo, suite, "--agent-cmd", agent, "--sandbox", "on")
        outcomes = {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}
        assert outcomes == {"hide": expected, "replace": expected}, (verify_in, envelope["report"]["tasks"])


def test_the_agents_commits_and_new_files_still_reach_the_verifier(cli: Any, repo: Path, write_suite) -> None:
    """What the agent did is kept as data: its commits (git log), its new and changed files; what a fresh checkout
    would not have (an ignored, untracked file, a forged __pycache__) is gone."""
    (repo / ".gitignore").write_text("*.log\n__pycache__/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    agent = (
        "echo new > new.txt && git add new.txt && git commit -qm 'Add new' && echo more >> README.md "
        "&& mkdir __pycache__ && echo forged > __pycache__/mod.pyc && echo noise > build.log && echo untracked > u.txt"
    )
    verify = (
        "test \"$(git log -1 --format=%s)\" = 'Add new' && test -f new.txt && grep -q more README.md "
        "&& test -f u.txt && test ! -e __pycache__ && test ! -e build.log && git diff --quiet HEAD -- new.txt"
    )
    suite = write_suite([task("work", verify_commands=[{"sh": verify}])])
    envelope = _eval(cli, repo, suite, "--agent-cmd", agent, "--sandbox", "on")
    attempt = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass", attempt["reason"]


@pytest.mark.slow
def test_an_npm_preinstall_through_init_cannot_plant_a_filter_for_the_harness(
    cli: Any, tmp_path: Path, write_suite
) -> None:
    """The realistic chain: a user runs ``worktrial init`` on a repository they cloned (init writes
    ``environment.setup = npm install``), then an eval. The package's ``preinstall`` plants a clean filter."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "preinstall-filter-ran"
    plant = f"git config filter.evil.clean 'touch {marker}; cat' && printf '* filter=evil\\\\n' > .gitattributes"
    package = {"name": "cloned", "version": "1.0.0", "private": True, "scripts": {"preinstall": plant}}
    repo = tmp_path / "cloned"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "package.json").write_text(json.dumps(package))
    (repo / "index.js").write_text("module.exports = 1;\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "initial")
    assert cli(["init"], cwd=repo).exit_code == 0
    envelope = _eval(cli, repo, repo / "evals" / "suite.json", "--agent", "oracle", "--sandbox", "on")
    assert {a["outcome"] for t in envelope["report"]["tasks"] for a in t["attempts"]} == {"pass"}
    assert not marker.exists(), "the package's filter ran outside the sandbox"
    assert (repo / ".gitattributes").exists() is False  # and the user's repository never saw any of it
