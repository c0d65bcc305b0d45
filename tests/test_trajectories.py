"""``--trajectories`` end to end: what each attempt stores (valid ATIF, redacted, bounded), where, and what stays
as it was without the flag (traces, envelopes). The built-in agent and command agents here; the model gateway's
recording of every wire format in test_gateway_trajectory.py, the real CLIs in test_real_trajectories.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.atif_check import assert_atif
from tests.builtin_support import run_eval
from tests.conftest import task
from tests.scripted_provider import Reply, Request, ScriptedProvider, openai_reply, openai_usage, turn_index

SECRET = "sk-test-TRAJECTORY-SECRET-0123456789abcdef"
PASSED = "planted-pass-env-value-4242"


def stored(repo: Path, envelope: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The only attempt's record and its trajectory file, parsed (checked against the record's digest)."""
    (record,) = [a for t in envelope["report"]["tasks"] for a in t["attempts"]]
    ref = record["trajectory"]
    data = (repo / ref["path"]).read_bytes()
    import hashlib

    assert hashlib.sha256(data).hexdigest() == ref["sha256"] and len(data) == ref["bytes"]
    return record, json.loads(data)


def editor(request: Request) -> Reply:
    """Reads the file, tries an edit whose old_string matches twice (a tool error), then gives up."""
    turn = turn_index(request)
    usage = openai_usage(900, 40, 100)
    if turn == 0:
        return openai_reply(("read_file", {"path": "twice.txt"}), usage=usage)
    if turn == 1:
        return openai_reply(("edit_file", {"path": "twice.txt", "old_string": "x", "new_string": "y"}), usage=usage)
    return openai_reply(
        ("finish", {"status": "failure", "summary": "old_string matched twice; giving up"}), usage=usage
    )


def test_the_builtin_agents_trajectory_shows_the_failing_tool_call_and_its_error(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "twice.txt").write_text("x\nx\n")
    import subprocess

    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "twice"], cwd=repo, check=True)
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", SECRET)
    suite = write_suite([task("edit", prompt=f"Replace x by y in twice.txt. The key is {SECRET}.")])
    with ScriptedProvider(editor) as server:
        result = run_eval(
            cli, repo, suite, "--model", "openai-compatible/m", "--base-url", server.openai_url, "--trajectories"
        )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    record, document = stored(repo, envelope)
    assert_atif(document)
    assert record["outcome"] == "fail"
    steps = document["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent", "agent"]
    edit = steps[3]
    assert edit["tool_calls"][0]["function_name"] == "edit_file"
    (result_of_edit,) = edit["observation"]["results"]
    assert result_of_edit["extra"] == {"is_error": True, "error_category": "tool_error"}
    assert "2 times" in result_of_edit["content"] or "matches" in result_of_edit["content"], result_of_edit
    assert steps[4]["tool_calls"][0]["arguments"]["summary"] == "old_string matched twice; giving up"
    assert steps[2]["metrics"]["prompt_tokens"] == 900
    text = json.dumps(document)
    assert SECRET not in text and "[REDACTED]" in steps[1]["message"]
    # The trace and the envelope hold no transcript: only the record's reference to the file.
    assert "twice.txt" not in result.stdout
