"""``--trajectories`` end to end: what each attempt stores (valid ATIF, redacted, bounded), where, and what stays
as it was without the flag (traces, envelopes). The built-in agent and command agents here; the model gateway's
recording of every wire format in test_gateway_trajectory.py, the real CLIs in test_real_trajectories.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.atif_check import assert_atif
from tests.builtin_support import run_eval, write_user_config
from tests.conftest import task
from tests.scripted_provider import Reply, Request, ScriptedProvider, openai_reply, openai_usage, turn_index
from tests.test_hostile_text import PAYLOAD, terminal_problems

SECRET = "sk-test-TRAJECTORY-SECRET-0123456789abcdef"
PASSED = "planted-pass-env-value-4242"


def commit(repo: Path, name: str, text: str) -> None:
    (repo / name).write_text(text)
    subprocess.run(["git", "add", name], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", name], cwd=repo, check=True)


def stored(repo: Path, envelope: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The only attempt's record and its trajectory file, parsed (checked against the record's digest)."""
    (record,) = [a for t in envelope["report"]["tasks"] for a in t["attempts"]]
    ref = record["trajectory"]
    data = (repo / ref["path"]).read_bytes()
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
    commit(repo, "twice.txt", "x\nx\n")
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


AGENT = r"""
import json, os, sys
mode, _, payload = sys.stdin.read().strip().partition("\n")
path = os.environ.get("WORKTRIAL_TRAJECTORY_FILE")
print("told a trajectory file:", "Y" if path else "N")  # the same size either way: the trace counts bytes
if path is None:
    sys.exit(0)
secret = os.environ.get("MY_SECRET_TOKEN", "")
steps = [
    {"step_id": 7, "source": "user", "message": [
        {"type": "text", "text": "task"}, {"type": "image", "source": {"media_type": "image/png", "path": "/x.png"}}]},
    {"step_id": 9, "source": "agent", "message": "running env", "model_name": "m1", "reasoning_content": "why",
     "tool_calls": [{"tool_call_id": "t1", "function_name": "bash", "arguments": {"cmd": "env"}}, {"bogus": 1}],
     "observation": {"results": [{"source_call_id": "t1", "content": "MY_SECRET_TOKEN=" + secret},
                                 {"source_call_id": "nope", "content": "orphan"}]},
     "metrics": {"prompt_tokens": 10, "completion_tokens": -5, "cost_usd": "free"}, "unknown_field": {"x": 1}},
    {"step_id": 1, "source": "robot", "message": "dropped"},
]
if mode == "atif":
    doc = {"schema_version": "ATIF-v1.6", "agent": {"name": "mine", "version": 3}, "steps": steps, "session_id": "s"}
    open(path, "w").write(json.dumps(doc))
elif mode == "jsonl":
    open(path, "w").write("\n".join(json.dumps(s) for s in steps) + "\n")
elif mode == "symlink":
    os.symlink("/etc/passwd", path)
elif mode == "garbage":
    open(path, "wb").write(b"\xff\xfe not json")
elif mode == "hostile":
    call = {"tool_call_id": payload, "function_name": payload, "arguments": {payload: payload}}
    result = {"source_call_id": payload, "content": payload, "extra": {"is_error": True}}
    step = {"source": "agent", "message": payload, "reasoning_content": payload, "model_name": payload,
            "tool_calls": [call], "observation": {"results": [result]}}
    open(path, "w").write(json.dumps({"source": "user", "message": payload}) + "\n" + json.dumps(step) + "\n")
elif mode == "huge":
    open(path, "wb").write(b"{" + b" " * (33 * 1024 * 1024) + b"}")
"""


@pytest.mark.slow
def test_a_command_agents_own_file_is_read_as_hostile_input(
    cli: Any, repo: Path, write_suite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(repo, "agent.py", AGENT)
    monkeypatch.setenv("MY_SECRET_TOKEN", PASSED)
    modes = ["atif", "jsonl", "symlink", "garbage", "huge", "none"]
    suite = write_suite([task(mode, prompt=mode) for mode in modes])
    result = run_eval(
        cli, repo, suite, "--agent-cmd", "python3 agent.py", "--pass-env", "MY_SECRET_TOKEN", "--trajectories"
    )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    records = {t["task_id"]: t["attempts"][0] for t in envelope["report"]["tasks"]}
    assert "trajectory" not in records["none"]  # the agent wrote nothing: nothing is stored
    documents = {}
    for mode in modes[:-1]:
        ref = records[mode]["trajectory"]
        documents[mode] = json.loads((repo / ref["path"]).read_text())
        assert_atif(documents[mode])
        assert PASSED not in json.dumps(documents[mode])
    for mode in ("atif", "jsonl"):
        steps = documents[mode]["steps"]
        assert [s["source"] for s in steps] == ["user", "agent"]  # the unknown source is left out
        assert steps[0]["message"] == "task\n[image]"
        agent = steps[1]
        assert [c["tool_call_id"] for c in agent["tool_calls"]] == ["t1"]
        first, orphan = agent["observation"]["results"]
        assert first["content"] == "MY_SECRET_TOKEN=[REDACTED]"
        assert "source_call_id" not in orphan and orphan["extra"] == {"tool_call_id": "nope"}
        assert agent["metrics"] == {"prompt_tokens": 10}
    assert documents["atif"]["agent"]["name"] == "mine" and documents["atif"]["agent"]["version"] == "unknown"
    for mode, said in [("symlink", "could not be read"), ("garbage", "not UTF-8"), ("huge", "larger than")]:
        (only,) = documents[mode]["steps"]
        assert only["source"] == "system" and said in only["message"], (mode, only)


def _without_volatile(value: Any) -> Any:
    volatile = {"duration_secs", "agent_secs", "verify_secs", "setup_secs", "id", "started_at", "finished_at",
                "trace", "work_root", "host", "latency_ms", "mean", "p50", "p95", "max",
                "mean_setup_secs_per_attempt"}  # fmt: skip
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def test_without_the_flag_traces_and_envelopes_stay_as_they_were(cli: Any, repo: Path, write_suite: Any) -> None:
    """The flag adds one thing: the record's reference to the file. Without it the run, its traces, records and
    envelope hold no trajectory key at all, and the agent is not told a trajectory file."""
    commit(repo, "agent.py", AGENT)
    suite = write_suite([task("t", prompt="jsonl")])
    runs = {}
    for flag in ("--no-trajectories", "--trajectories"):
        result = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py", flag)
        assert result.exit_code == 0, result.output
        envelope = json.loads(result.stdout)
        (record,) = envelope["report"]["tasks"][0]["attempts"]
        trace = json.loads((repo / record["trace"]).read_text())
        run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
        runs[flag] = (envelope, trace, run_dir)
    (off, off_trace, off_dir), (on, on_trace, on_dir) = runs["--no-trajectories"], runs["--trajectories"]
    assert _without_volatile(off_trace) == _without_volatile(on_trace)
    on_record = on["report"]["tasks"][0]["attempts"][0]
    assert on_record.pop("trajectory")["steps"] == 2
    assert _without_volatile(off) == _without_volatile(on)
    for stored in (off_dir / "envelope.json", off_dir / "attempts.jsonl", off_dir / "run.json"):
        assert "trajector" not in stored.read_text(), stored
    told = {d: (d / "attempts" / "t" / "1" / "artifacts.json").read_text() for d in (off_dir, on_dir)}
    assert "told a trajectory file: N" in told[off_dir] and "told a trajectory file: Y" in told[on_dir]
    assert not list(off_dir.rglob("trajectory.json"))
    assert '"trajectories": true' in (on_dir / "run.json").read_text()


def test_config_turns_trajectories_on_and_the_flag_off_again(cli: Any, repo: Path, write_suite: Any) -> None:
    commit(repo, "agent.py", AGENT)
    write_user_config("[run]\ntrajectories = true\n")
    suite = write_suite([task("t", prompt="jsonl")])
    for flags, stored in [((), True), (("--no-trajectories",), False)]:
        result = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py", *flags)
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
        assert ("trajectory" in record) is stored


def test_audit_checks_each_trajectorys_digest(cli: Any, repo: Path, write_suite: Any) -> None:
    commit(repo, "agent.py", AGENT)
    suite = write_suite([task("t", prompt="jsonl")])
    result = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py", "--trajectories")
    envelope = json.loads(result.stdout)
    run_dir = repo / ".worktrial" / "runs" / envelope["run"]["id"]
    audited = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(suite)], cwd=repo)
    assert audited.exit_code == 0 and "1 trajectory files checked" in audited.output, audited.output
    path = repo / envelope["report"]["tasks"][0]["attempts"][0]["trajectory"]["path"]
    path.write_text(path.read_text().replace("running env", "running something else"))
    audited = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(suite)], cwd=repo)
    assert audited.exit_code == 1 and "trajectory file" in audited.output and "the record says" in audited.output
    path.unlink()  # not shared with the envelope: a note, not a finding
    audited = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(suite)], cwd=repo)
    assert audited.exit_code == 0 and "1 trajectory file(s) are not here" in audited.output, audited.output


def test_show_prints_a_trajectory_with_hostile_text_escaped(cli: Any, repo: Path, write_suite: Any) -> None:
    commit(repo, "agent.py", AGENT)
    suite = write_suite([task("t", prompt="hostile\n" + PAYLOAD)])
    result = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py", "--trajectories")
    run_id = json.loads(result.stdout)["run"]["id"]
    shown = cli(["show", run_id, "t", "1", "--trajectory"], cwd=repo)
    assert shown.exit_code == 0, shown.output
    assert not terminal_problems(shown.output), terminal_problems(shown.output)
    assert "[bold]B[/bold]" in shown.output and "\\x1b" in shown.output
    assert "✗ start" in shown.output  # the failed tool call's result is marked
    hint = cli(["show", run_id, "t", "1"], cwd=repo)
    assert "trajectory: 2 steps (add --trajectory to see them)" in hint.output
    plain = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py")
    refused = cli(["show", json.loads(plain.stdout)["run"]["id"], "t", "1", "--trajectory"], cwd=repo)
    assert refused.exit_code == 2 and "was not made with --trajectories" in refused.output


@pytest.mark.browser
@pytest.mark.slow
def test_view_shows_each_attempts_trajectory_collapsed_and_searchable(
    cli: Any, repo: Path, write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_view import _browser_page

    commit(repo, "twice.txt", "x\nx\n")
    commit(repo, "agent.py", AGENT)
    with ScriptedProvider(editor) as server:
        builtin = run_eval(
            cli, repo, write_suite([task("edit", prompt="Replace x by y in twice.txt.")]),
            "--model", "openai-compatible/m", "--base-url", server.openai_url, "--trajectories",
        )  # fmt: skip
    hostile = run_eval(
        cli, repo, write_suite([task("t", prompt="hostile\n" + PAYLOAD)]), "--agent-cmd", "python3 agent.py",
        "--trajectories",
    )  # fmt: skip
    runs = [json.loads(r.stdout)["run"]["id"] for r in (builtin, hostile)]
    page_path = Path(cli(["view", *runs, "--output", str(tmp_path / "view.html")], cwd=repo).stdout.strip())
    errors: list[str] = []
    with _browser_page(errors) as page:
        page.goto(page_path.as_uri() + "#edit/1")
        attempt = page.locator('details.attempt[data-task="edit"]')
        box = attempt.locator("details.trajectory")
        assert "Trajectory: 5 steps · builtin" in box.locator("summary").inner_text()
        steps = box.locator(".step")
        assert steps.count() == 5 and not steps.first.is_visible()  # collapsed until asked for
        box.locator("summary").click()
        assert steps.first.is_visible()
        failed = box.locator(".call.failed")
        assert failed.count() == 1 and "old_string occurs 2 times" in failed.inner_text()
        assert "edit_file(" in failed.inner_text()
        box.locator(".trajectory-filter").fill("matched twice")
        assert box.locator(".step-count").inner_text() == "1 of 5 steps match"
        assert box.locator(".step:visible").count() == 1
        assert "finish(" in box.locator(".step:visible").inner_text()
        # Hostile text is text: no element of the agent's made it into the page.
        other = page.locator('#run-1 details.attempt[data-task="t"]')
        other.locator(":scope > summary").click()
        other.locator("details.trajectory > summary").click()
        assert "<script>alert(1)</script>" in other.locator(".step .text").first.inner_text()
        assert page.locator("img[src=x]").count() == 0
    assert errors == []


def test_a_resumed_run_keeps_its_choice(cli: Any, repo: Path, write_suite: Any) -> None:
    commit(repo, "agent.py", AGENT)
    suite = write_suite([task("t", prompt="jsonl")])
    first = run_eval(cli, repo, suite, "--agent-cmd", "python3 agent.py")
    run_id = json.loads(first.stdout)["run"]["id"]
    refused = run_eval(cli, repo, suite, "--resume", run_id, "--trajectories")
    assert refused.exit_code == 2 and "--trajectories: stored no, given yes" in refused.output, refused.output
    again = run_eval(cli, repo, suite, "--resume", run_id)
    assert again.exit_code == 0, again.output
