"""Envelopes for publishing: ``report --redact-paths`` leaves no local absolute path, and ``audit`` still checks it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.conftest import SuiteWriter, task
from worktrial.render.publish import REDACTED, PathRedactor

Cli = Callable[..., Result]


def test_a_redacted_envelope_names_no_local_path_and_audits(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    agent = tmp_path / "tools" / "my-agent"
    agent.parent.mkdir()
    agent.write_text("#!/bin/sh\necho done > done.txt\n")
    agent.chmod(0o755)
    suite = write_suite([task("t1"), task("t2", verify_commands=["false"])], attempts=2)
    made = cli(
        ["eval", "--suite", str(suite), "--agent-cmd", f"{agent} --yes", "--trust", "-q", "--format", "json",
         "--keep-worktrees", "--sandbox", "off"],
        cwd=repo,
    )  # fmt: skip
    original = json.loads(made.stdout)
    run_id = original["run"]["id"]
    assert original["run"]["workspace"]["path"] == str(repo) and original["run"]["trace_root"] == str(repo)
    kept = [a["worktree"] for t in original["report"]["tasks"] for a in t["attempts"]]
    assert all(k and k.startswith("/") for k in kept)

    published = tmp_path / "published.json"
    done = cli(["report", run_id, "--format", "json", "--redact-paths", "--output", str(published)], cwd=repo)
    assert done.exit_code == 0, done.output
    text = published.read_text()
    for local in (str(repo), str(tmp_path), str(agent), *kept):
        assert local not in text
    envelope = json.loads(text)
    run = envelope["run"]
    assert run["paths_redacted"] is True
    assert run["workspace"]["path"] == "." and run["trace_root"] == "."
    assert envelope["agent"]["command"].startswith(REDACTED) and envelope["agent"]["command"].endswith(" --yes")
    attempts = [a for t in envelope["report"]["tasks"] for a in t["attempts"]]
    assert all(a["worktree"].startswith(REDACTED) for a in attempts)
    assert len({a["worktree"] for a in attempts}) == len(attempts)  # distinct worktrees, distinct hashes
    assert all(a["trace"].startswith(".worktrial/eval/traces/") for a in attempts)
    assert envelope["report"] == {**original["report"], "tasks": envelope["report"]["tasks"]}
    assert [t["task_id"] for t in envelope["report"]["tasks"]] == ["t1", "t2"]

    audited = cli(["audit", str(published), "--suite", str(suite)], cwd=repo)  # traces found from the workspace
    assert audited.exit_code == 0, audited.output
    assert "4 trace files checked" in audited.output and "paths were redacted for publishing" in audited.output
    elsewhere = cli(["audit", str(published), "--suite", str(suite), "--workspace", str(repo)], cwd=tmp_path)
    assert elsewhere.exit_code == 0, elsewhere.output

    forged = json.loads(text)
    forged["report"]["tasks"][1]["attempts"][0].update(outcome="pass", verified=True)
    published.write_text(json.dumps(forged))
    caught = cli(["audit", str(published), "--suite", str(suite)], cwd=repo)
    assert caught.exit_code == 1 and "mismatch" in caught.output


def test_free_text_keeps_system_paths_and_hashes_the_rest() -> None:
    redactor = PathRedactor("/home/alice/repo", salt=b"salt")
    other = PathRedactor("/home/alice/repo", salt=b"pepper")
    secret = "/home/alice/secret-project/x"
    hashed = redactor.path(secret)
    assert hashed is not None and hashed.startswith(REDACTED) and hashed == redactor.path(secret)
    assert other.path(secret) != hashed  # the salt changes every hash
    assert redactor.path("/home/alice/repo") == "." and redactor.path("/home/alice/repo/src/a.py") == "src/a.py"
    assert redactor.path(".worktrial/eval/traces/x.json") == ".worktrial/eval/traces/x.json"
    text = (
        "verify failed: /usr/bin/python3 /home/alice/repo/tests/t.py exited 1 (see /home/alice/.cache/x.log); "
        "/tmp, /var/tmp, /run (private); /tmp/worktrial-run-1/w; http://localhost:8080/v1; 3/4 passed; a/b"
    )
    shown = redactor.text(text)
    assert "alice" not in shown and "worktrial-run-1" not in shown
    assert "/usr/bin/python3 tests/t.py exited 1 (see redacted:" in shown
    assert "/tmp, /var/tmp, /run (private)" in shown  # directories named alone say nothing of the machine's owner
    assert shown.startswith("verify failed: /usr/bin/python3") and "http://localhost:8080/v1" in shown
    assert "3/4 passed; a/b" in shown
