"""Attempts never see each other, and nothing an agent does reaches the user's repository."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, task

# An agent that fails (claims failure) if it sees anything a previous attempt planted, then plants it all.
HOSTILE_AGENT = r"""
set -e
common="$(git rev-parse --git-common-dir)"
saw() { echo "$1" >> "$HOSTILE_DIR/saw"; exit 1; }
[ -e planted.txt ] && saw file
[ -e build.log ] && saw ignored-file
[ -e sub/nested ] && saw nested-repo
[ -e ro ] && saw read-only-dir
[ "$(cat README.md)" = "# sample repo" ] || saw tracked-edit
git rev-parse -q --verify refs/heads/agent-branch >/dev/null && saw branch
git rev-parse -q --verify refs/tags/agent-tag >/dev/null && saw tag
git rev-parse -q --verify refs/stash >/dev/null && saw stash
git reflog --all | grep -q "agent commit" && saw reflog
[ "$(git config --get agent.planted || true)" = yes ] && saw config
[ -e "$common/hooks/pre-commit" ] && saw hook
grep -qs planted "$common/info/exclude" && saw info-exclude
git ls-files -v | grep -q '^[a-zS]' && saw index-flags
[ "$(git log --format=%s -1)" = initial ] || saw commit
[ -e "$HOSTILE_DIR/prev-commit" ] && git cat-file -e "$(cat "$HOSTILE_DIR/prev-commit")" 2>/dev/null && saw object
[ -n "$(ls -A "$(dirname "$WORKTRIAL_USAGE_FILE")" | grep -vx prompt.txt)" ] && saw scratch  # only the prompt
echo planted > planted.txt
echo log > build.log
echo extra > "$WORKTRIAL_USAGE_FILE.extra"
mkdir -p sub/nested && git -C sub/nested init -q
echo change >> README.md && git stash -q
echo committed > committed.txt && git add committed.txt && git commit -qm "agent commit"
git rev-parse HEAD > "$HOSTILE_DIR/prev-commit"
git branch agent-branch && git tag agent-tag
git config agent.planted yes
mkdir -p "$common/info" && echo planted >> "$common/info/exclude"
hooks="$common/hooks"; mkdir -p "$hooks"
printf '#!/bin/sh\ntouch "%s/hook-ran"\n' "$HOSTILE_DIR" > "$hooks/pre-commit"
printf '#!/bin/sh\ntouch "%s/hook-ran"\n' "$HOSTILE_DIR" > "$hooks/post-checkout"
chmod +x "$hooks/pre-commit" "$hooks/post-checkout"
# Same size, same mtime, flagged unchanged: only a real reset notices.
cp -p README.md /tmp/.wt-readme-$$ && printf '# SAMPLE REPO\n' > README.md && touch -r /tmp/.wt-readme-$$ README.md
rm -f /tmp/.wt-readme-$$
git update-index --assume-unchanged README.md
mkdir ro && echo x > ro/f && chmod 555 ro
echo planted > planted.txt
"""


def snapshot(repo: Path) -> dict[str, str]:
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    hooks = sorted(p.name for p in (common / "hooks").iterdir()) if (common / "hooks").exists() else []
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": git(repo, "rev-parse", "HEAD"),
        "status": git(repo, "status", "--porcelain", "--ignored"),
        "stash": git(repo, "stash", "list"),
        "config": (common / "config").read_text(),
        "hooks": json.dumps(hooks),
        "files": json.dumps(sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if ".git" not in p.parts)),
    }


OFF = ["--sandbox", "off"]


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_attempts_are_isolated_and_user_repo_untouched(
    cli, repo: Path, write_suite, tmp_path: Path, monkeypatch, jobs: str
) -> None:
    """With one job every attempt after the first reuses a reset pooled workspace; with two, slots alternate."""
    flag_dir = tmp_path / "flags"
    flag_dir.mkdir()
    agent = tmp_path / "hostile.sh"
    agent.write_text(HOSTILE_AGENT)
    suite = write_suite([task("hostile", verify_commands=["test -f planted.txt"])], attempts=5)
    before = snapshot(repo)
    monkeypatch.setenv("HOSTILE_DIR", str(flag_dir))
    result = cli(
        # Unsandboxed: the pooled reset alone must undo what the agent did (test_sandbox covers --sandbox on).
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--trust", "--format", "json", "-j", jobs, *OFF],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    attempts = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    saw = (flag_dir / "saw").read_text() if (flag_dir / "saw").exists() else ""
    assert [a["outcome"] for a in attempts] == ["pass"] * 5, f"an attempt saw a previous one's {saw!r}"
    after = snapshot(repo)
    # The run's own state directory (traces) is the only new thing, and git ignores it.
    assert json.loads(after["files"]) == sorted(
        json.loads(before["files"]) + [p for p in json.loads(after["files"]) if p.startswith(".worktrial")]
    )
    for key in ("refs", "head", "stash", "config", "hooks"):
        assert after[key] == before[key], key
    assert sorted(after["status"].splitlines()) == sorted([*before["status"].splitlines(), "!! .worktrial/"])
    assert not (flag_dir / "hook-ran").exists(), "the harness ran a hook an agent planted"
    # The agent's commit object went to the private repository, not into the user's object store.
    assert "agent commit" not in git(repo, "log", "--all", "--format=%s")


def test_dirty_workspace_warns_and_is_not_part_of_base(cli, repo: Path, write_suite) -> None:
    (repo / "README.md").write_text("uncommitted edit\n")
    suite = write_suite(
        [task("t", verify_commands=["test -f done.txt", {"argv": ["grep", "-qx", "# sample repo", "README.md"]}])]
    )
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=repo)
    assert result.exit_code == 0
    assert "has uncommitted changes" in result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["run"]["workspace"]["dirty"] is True
    assert (repo / "README.md").read_text() == "uncommitted edit\n"


@pytest.mark.slow  # three runs
def test_an_uncommitted_suite_alone_leaves_the_workspace_clean_and_says_so(cli, repo: Path) -> None:
    evals = repo / "evals"  # as `worktrial init` writes it: a directory of its own, not committed yet
    (evals / "hidden").mkdir(parents=True)
    (evals / "hidden" / "check.sh").write_text('test -f "$1"\n')
    (evals / "README.md").write_text("how to run it\n")
    verify = {"sh": 'sh "$WORKTRIAL_SUITE_DIR/hidden/check.sh" done.txt'}
    suite: dict[str, Any] = {"id": "s", "files": ["hidden/**"], "tasks": [task("t", verify_commands=[verify])]}
    (evals / "suite.json").write_text(json.dumps(suite))

    def run() -> tuple[dict[str, Any], str]:
        args = ["eval", "--suite", "evals/suite.json", "--agent", "oracle", "--trust", "--format", "json"]
        result = cli(args, cwd=repo)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["run"], result.stderr

    untracked, stderr = run()
    assert not untracked["workspace"]["dirty"] and untracked["dirty_excluded"] == ["evals/"]
    assert "uncommitted changes" not in stderr
    git(repo, "add", "evals")
    git(repo, "commit", "-q", "-m", "the suite")
    suite["tasks"][0]["prompt"] = "Do t, edited"
    (evals / "suite.json").write_text(json.dumps(suite))
    (evals / "hidden" / "check.sh").write_text('test -s "$1"\n')
    edited, _ = run()
    assert not edited["workspace"]["dirty"]
    assert sorted(edited["dirty_excluded"]) == ["evals/hidden/check.sh", "evals/suite.json"]
    (evals / "README.md").write_text("an edit that is not the suite's\n")  # not declared: it counts
    readme, stderr = run()
    assert readme["workspace"]["dirty"] and "uncommitted changes" in stderr


def test_keep_worktrees_prints_paths(cli, repo: Path, write_suite) -> None:
    suite = write_suite([task("t")])
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--keep-worktrees"], cwd=repo)
    assert result.exit_code == 0
    assert "## Kept worktrees" in result.stdout
    kept = [line[3:-1] for line in result.stdout.splitlines() if line.startswith("- `/")]
    assert len(kept) == 1 and (Path(kept[0]) / "done.txt").exists()
    assert "worktrees kept under" in result.stderr


def test_worktrees_removed_by_default(cli, repo: Path, write_suite, tmp_path: Path, monkeypatch) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    suite = write_suite([task("t", solution=[{"sh": "echo done > done.txt && chmod -w . "}])], attempts=2)
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert list(tmp.iterdir()) == []


def test_pinned_workspace_ref(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / "later.txt").write_text("later\n")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-qm", "later")
    suite = write_suite(
        [task("t", verify_commands=[{"sh": "test ! -e later.txt && test -f done.txt"}])],
        workspace={"repo": os.path.relpath(repo, tmp_path), "ref": first},
    )
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["run"]["workspace"]["base_commit"] == first
    assert envelope["report"]["overall"]["passed_runs"] == 1


def test_pinned_workspace_url_is_cloned_into_cache(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    suite = write_suite([task("t")], workspace={"repo": f"file://{repo}", "ref": head})
    other = tmp_path / "elsewhere"
    other.mkdir()
    git(other, "init", "-q")
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=other)
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["run"]["workspace"]["base_commit"] == head
    assert envelope["report"]["overall"]["passed_runs"] == 1


def test_shallow_clone_workspace(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    (repo / "second.txt").write_text("2\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "second")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    suite = write_suite([task("t", verify_commands=[{"sh": "git log --oneline | grep -q second"}])])
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=shallow)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 1
