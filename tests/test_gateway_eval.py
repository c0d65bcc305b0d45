"""Whole runs whose agents reach their model through the run's gateway: provider failures are never the agent's,
fatal ones stop the run, the cost cap is kept at the gateway, keys stay outside the sandbox, and with --network off
the gateway is the attempt's only way out."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.builtin_support import write_user_config
from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    anthropic_error,
    anthropic_stream,
    chat_plain,
    chat_stream,
    chat_usage,
)
from tests.conftest import task
from worktrial.gateway.session import TOKEN_PREFIX
from worktrial.model.envelope import Envelope
from worktrial.render.html import ViewRun, render_html
from worktrial.render.markdown import render_markdown
from worktrial.render.terminal import run_summary

AGENT = r"""
import json, os, socket, sys, urllib.error, urllib.request

prompt = open(os.environ["WORKTRIAL_PROMPT_FILE"]).read()
base = os.environ["WORKTRIAL_BASE_URL"]
if "[direct]" in prompt:  # the model server itself, past the gateway: reachable only on the host's network
    port = int(prompt.split("[direct]")[1].split()[0])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        open("direct.txt", "w").write("reached")
    except OSError as exc:
        open("direct.txt", "w").write("refused")
while True:
    body = json.dumps({"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        base + "/chat/completions",
        data=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-agent-own"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            json.load(answer)
    except urllib.error.HTTPError as exc:
        print("model call failed: HTTP", exc.code)
        sys.exit(1)
    if "[loop]" not in prompt:
        break
if "[usage]" in prompt:  # a report of its own that disagrees with what the provider served
    json.dump({"input_tokens": 5, "output_tokens": 5}, open(os.environ["WORKTRIAL_USAGE_FILE"], "w"))
open("done.txt", "w").write("ok\n")
"""

USAGE = chat_usage(1000, 100, cached=200, reasoning=30)


def _repo_with_agent(repo: Path) -> str:
    """The agent script, committed in the repository so every attempt's worktree (and sandbox) has it."""
    (repo / "agent.py").write_text(AGENT)
    subprocess.run(["git", "add", "agent.py"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "agent"], cwd=repo, check=True)
    return f"{sys.executable} agent.py"


def _eval(cli: Callable[..., Any], repo: Path, suite: Path, url: str, *extra: str) -> Any:
    command = _repo_with_agent(repo)
    argv = ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", "--agent-cmd", command]
    return cli([*argv, "--base-url", f"{url}/v1", *extra], cwd=repo)


def _solve(prompt: str = "Solve it.") -> dict[str, Any]:
    return task("t", prompt=prompt, verify_commands=["test -f done.txt"])


@pytest.mark.slow
def test_a_server_error_is_retried_and_never_lowers_the_score(cli, repo: Path, write_suite) -> None:
    answers = iter([Plain(500, {"error": {"message": "scripted outage"}})])

    def respond(_request: Request) -> Plain:
        return next(answers, None) or chat_plain("m-1-2026", USAGE, text="ok")

    with CliServer(respond) as server:
        result = _eval(cli, repo, write_suite([_solve()]), server.url, "--retry-errors", "1")
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    [attempt] = envelope["report"]["tasks"][0]["attempts"]
    # The first try's agent got a 500 and gave up (exit 1: a failure of its own, without the gateway); the
    # gateway saw the provider fail, so the try was an infrastructure error and ran again.
    assert attempt["outcome"] == "pass" and attempt["retries"] == 1
    assert "model gateway" in attempt["retry_reasons"][0] and "HTTP 500" in attempt["retry_reasons"][0]
    assert envelope["report"]["overall"]["pass_at_k"] == 1.0
    assert envelope["report"]["retried_attempts"] == 1
    assert envelope["report"]["infrastructure_errors"] == 1
    # Usage: exactly what the server served on the try that counts, read from its answer by the gateway.
    assert attempt["tokens"] == {
        "input": 1000,
        "output": 100,
        "cached_input": 200,
        "cache_creation": None,
        "reasoning": 30,
    }
    assert attempt["model"] == "m-1-2026"
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer sk-agent-own"] * 2
    trace = json.loads((repo / attempt["trace"]).read_text())
    gateway = trace["gateway"]
    assert gateway["agent_startup_secs"] >= 0  # from the agent's start to its first model call
    assert {k: v for k, v in gateway.items() if k != "agent_startup_secs"} == {
        "requests": 1,
        "statuses": {"200": 1},
        "failure": None,
        "other_requests": 0,
        "upstream": f"{server.url}/v1",
    }


def test_the_agents_own_report_is_a_cross_check(cli, repo: Path, write_suite) -> None:
    with CliServer(lambda _request: chat_plain("m-1", USAGE, text="ok")) as server:
        result = _eval(cli, repo, write_suite([_solve("Solve it. [usage]")]), server.url)
    [attempt] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass" and attempt["tokens"]["input"] == 1000  # the gateway's count is kept
    notes = json.loads((repo / attempt["trace"]).read_text())["notes"]
    assert any("command reported 5 input / 5 output tokens, the gateway counted 1000 / 100" in n for n in notes)


def test_without_retries_a_server_error_is_an_error_not_a_failure(cli, repo: Path, write_suite) -> None:
    with CliServer(lambda _request: Plain(503, {})) as server:
        result = _eval(cli, repo, write_suite([_solve()]), server.url)
    envelope = json.loads(result.stdout)
    [attempt] = envelope["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "error" and attempt["error_category"] == "provider_server"
    assert envelope["report"]["infrastructure_errors"] == 1
    # The closing line names the cause, not the setup.
    assert result.exit_code == 1
    assert "because the provider failed on every attempt" in result.stderr and "HTTP 503" in result.stderr
    assert "fix the setup" not in result.stderr


def test_a_cut_stream_is_the_providers_not_an_unreachable_one(cli, repo: Path, write_suite) -> None:
    """The provider answers 200 and closes the stream before its end: the agent fails on it (exit 1), and the
    attempt is a ``provider_stream_cut``, retried, never the agent's failure."""
    cut = chat_stream("m-1", USAGE, text="partial")
    cut.cut_after = 2
    answers = iter([cut])

    def respond(_request: Request) -> Sse | Plain:
        return next(answers, None) or chat_plain("m-1", USAGE, text="ok")

    with CliServer(respond) as server:
        result = _eval(cli, repo, write_suite([_solve()]), server.url, "--retry-errors", "1")
    [attempt] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass" and attempt["retries"] == 1, attempt
    assert "answered 200 and its stream ended early" in attempt["retry_reasons"][0]


@pytest.mark.slow
def test_a_provider_that_never_answers_is_slow_not_the_agents_timeout(
    cli, repo: Path, write_suite, capfd: pytest.CaptureFixture[str]
) -> None:
    """The agent's call waits at the gateway until the task's timeout ends the agent: ``provider_slow``, not a
    timeout of the agent's, and the run ends without a traceback from the gateway's server."""
    release = threading.Event()

    def respond(_request: Request) -> Plain:
        release.wait(120)  # answers only once the test is over
        return chat_plain("m-1", USAGE, text="late")

    with CliServer(respond) as server:
        try:
            result = _eval(cli, repo, write_suite([dict(_solve(), timeout_secs=8)]), server.url, "--grace-secs", "1")
            printed = capfd.readouterr().err  # before the scripted server, released, writes to a closed connection
        finally:
            release.set()
    [attempt] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "error" and attempt["error_category"] == "provider_slow", attempt
    assert "waited" in attempt["reason"] and "without an answer" in attempt["reason"]
    assert "did not answer in time on any attempt" in result.stderr
    assert "Traceback" not in printed


def test_a_run_stopped_by_a_refused_key_still_writes_its_partial_report(
    cli, repo: Path, write_suite, tmp_path: Path
) -> None:
    answers = iter([chat_plain("m-1", USAGE, text="ok")])

    def respond(_request: Request) -> Plain:
        return next(answers, None) or Plain(401, {"error": {"message": "key revoked"}})

    out = tmp_path / "report.json"
    with CliServer(respond) as server:
        suite = write_suite([_solve(), dict(_solve(), id="second"), dict(_solve(), id="third")])
        result = _eval(cli, repo, suite, server.url, "--jobs", "1", "--output", str(out))
    assert result.exit_code == 2, result.output
    assert f"the partial report is in {out}" in result.output
    envelope = json.loads(out.read_text())
    attempts = [a for t in envelope["report"]["tasks"] for a in t["attempts"]]
    assert [a["outcome"] for a in attempts] == ["pass", "error"]
    assert envelope["run"]["complete"] is False


def _reports(envelope: Envelope) -> dict[str, str]:
    """The envelope as markdown, as the terminal summary and as the HTML page show it."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(run_summary(envelope, has_artifacts=False))
    return {
        "markdown": render_markdown(envelope),
        "terminal": console.export_text(),
        "html": render_html([ViewRun("run", envelope)]),
    }


@pytest.mark.slow
def test_the_reports_name_the_infrastructure_errors(cli, repo: Path, write_suite) -> None:
    answers = iter([Plain(503, {}), Plain(503, {})])

    def respond(_request: Request) -> Plain:
        return next(answers, None) or chat_plain("m-1", USAGE, text="ok")

    suite = write_suite([_solve(), dict(_solve(), id="second")])
    with CliServer(respond) as server:
        result = _eval(cli, repo, suite, server.url, "--retry-errors", "1", "--jobs", "1")
    envelope = Envelope.model_validate_json(result.stdout)
    assert envelope.report.infrastructure_errors == 2  # two tries met a 503
    line = "2 tries ended in an error of the infrastructure"
    for name, text in _reports(envelope).items():
        assert line in text, name
    assert "**Infrastructure errors:** 2 tries" in _reports(envelope)["markdown"]
    # A run without any says nothing about them.
    clean = envelope.model_copy(update={"report": envelope.report.model_copy(update={"infrastructure_errors": 0})})
    for name, text in _reports(clean).items():
        assert "infrastructure" not in text.lower(), name


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (Plain(401, {"error": {"message": "bad key"}}), "refused the credentials (HTTP 401)"),
        (Plain(404, {"error": {"message": "no such model"}}), "does not know this model 'm-1' (HTTP 404)"),
    ],
)
def test_a_refused_key_or_unknown_model_stops_the_run_in_one_line(
    cli, repo: Path, write_suite, answer: Plain, words: str
) -> None:
    with CliServer(lambda _request: answer) as server:
        suite = write_suite([_solve(), dict(_solve(), id="second")], attempts=3)
        result = _eval(cli, repo, suite, server.url, "--jobs", "1")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "stopping the run" in line]
    assert len(lines) == 1 and words in lines[0], result.output
    assert len(server.requests) == 1  # no attempt started after the first


def test_the_cost_cap_is_kept_at_the_gateway(cli, repo: Path, write_suite) -> None:
    write_user_config('[pricing."openai/m-1"]\ninput = 10.0\noutput = 10.0\n')  # $0.011 a call
    with CliServer(lambda _request: chat_plain("m-1", USAGE, text="ok")) as server:
        suite = write_suite([_solve("Call the model forever. [loop]")])
        result = _eval(cli, repo, suite, server.url, "--max-cost-per-attempt", "0.02")
    envelope = json.loads(result.stdout)
    [attempt] = envelope["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "fail" and "cost cap" in attempt["reason"], attempt
    assert len(server.requests) == 2  # the second call passed $0.02; the gateway refused every later one
    assert attempt["cost_usd"] == pytest.approx(0.022)


@pytest.mark.slow
def test_the_runs_budget_is_kept_at_the_gateway(cli, repo: Path, write_suite) -> None:
    """Two attempts call the model without end: the run's --max-cost, counted live over both at the gateway, ends
    them as the total passes it, and the run stops (exit 3) without recording them (resume reruns them)."""
    write_user_config('[pricing."openai/m-1"]\ninput = 10.0\noutput = 10.0\n')  # $0.011 a call
    forever = "Call the model forever. [loop]"
    suite = write_suite([dict(_solve(forever), timeout_secs=120), dict(_solve(forever), id="u", timeout_secs=120)])
    with CliServer(lambda _request: chat_plain("m-1", USAGE, text="ok")) as server:
        result = _eval(cli, repo, suite, server.url, "--max-cost", "0.05", "--jobs", "2")
        served = len(server.requests)
        resumed = cli(["resume", json.loads(result.stdout)["run"]["id"], "--max-cost", "0.1", "-q"], cwd=repo)
        served_on_resume = len(server.requests) - served
    assert result.exit_code == 3, result.output
    assert "stopped: the budget --max-cost $0.05 is spent" in result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["report"]["tasks"] == [] or all(not t["attempts"] for t in envelope["report"]["tasks"])
    assert envelope["run"]["complete"] is False
    budget = envelope["run"]["budget"]
    assert budget["stopped"] is True and "model gateway" in budget["reason"]
    # The fifth call passed $0.05; at most the other attempt's call already on its way was served after it.
    assert 5 <= served <= 6, served
    assert budget["spent"] == 0 and budget["spent_unrecorded"] == pytest.approx(0.011 * served)
    # Resumed with more, the ended attempts run again, and what they spent before counts against the new budget.
    assert resumed.exit_code == 3, resumed.output
    assert 1 <= served_on_resume <= (0.1 - 0.011 * served) // 0.011 + 2, served_on_resume
    again = json.loads((repo / ".worktrial" / "runs" / envelope["run"]["id"] / "envelope.json").read_text())
    assert again["run"]["budget"]["spent_unrecorded"] == pytest.approx(0.011 * (served + served_on_resume))


@pytest.mark.sandbox
def test_with_network_off_the_gateway_is_the_only_way_out(cli, repo: Path, write_suite) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    with CliServer(lambda _request: chat_plain("m-1", USAGE, text="ok")) as server:
        port = server.url.rsplit(":", 1)[1]
        suite = write_suite([_solve(f"Solve it. [direct]{port} ")])
        result = _eval(cli, repo, suite, server.url, "--sandbox", "on", "--network", "off", "--keep-worktrees")
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert envelope["run"]["sandbox"]["network"] == "off"
    [attempt] = envelope["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass" and attempt["tokens"]["input"] == 1000
    assert (Path(attempt["worktree"]) / "direct.txt").read_text() == "refused"
    assert len(server.requests) == 1


PLANTED = "sk-ant-planted-gateway-0123456789abcdef"

FAKE_CLAUDE = r"""#!{python}
import json, os, sys, urllib.request

planted = bytes.fromhex({planted!r})[::-1]  # never written out whole, or the scan would find this file
body = json.dumps({{"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 10, "messages": []}}).encode()
request = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
    data=body,
    headers={{"x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""), "content-type": "application/json"}},
)
with urllib.request.urlopen(request, timeout=60) as answer:
    answer.read()
found = []
environ = "\n".join(f"{{k}}={{v}}" for k, v in os.environ.items()).encode()
if planted in environ:
    found.append("environment")
# The system's directories and this interpreter's own installation (a virtualenv of thousands of files, shown
# read-only to run this script: nothing of the harness's is ever written there) are not scanned. Reading them made
# the scan's cost grow with the machine's load until the task's deadline cut it short on a busy machine.
skip = ("/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", sys.prefix,
        sys.base_prefix)
programs = {{"site-packages", "node_modules", ".git"}}  # Python's and the CLIs' own files, shown read-only
for root, dirs, files in os.walk("/"):
    if root.startswith(skip) and root != "/" or programs & set(root.split("/")):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(root, name)
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= 4 << 20:
                with open(path, "rb") as fh:
                    if planted in fh.read():
                        found.append(path)
        except OSError:
            pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as fh:
                if planted in fh.read():
                    found.append(f"/proc/{{pid}}/environ")
        except OSError:
            pass
with open("scan.json", "w") as fh:
    json.dump({{"found": found, "key": os.environ.get("ANTHROPIC_API_KEY")}}, fh)
with open("done.txt", "w") as fh:
    fh.write("ok")
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False, "result": "done", "num_turns": 1}}))
"""


@pytest.mark.sandbox
def test_a_planted_key_never_enters_the_sandbox(
    cli, repo: Path, write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(FAKE_CLAUDE.format(python=sys.executable, planted=PLANTED.encode()[::-1].hex()))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED)
    monkeypatch.setenv("IS_SANDBOX", "1")  # Claude Code's preflight as root
    usage = {"input_tokens": 40, "output_tokens": 6, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2}

    def respond(request: Request) -> Any:
        if request.headers.get("x-api-key") != PLANTED:
            return anthropic_error(401, "authentication_error", "not the real key")
        return anthropic_stream("claude-sonnet-4-5-20250929", [{"type": "text", "text": "ok"}], usage, "end_turn")

    with CliServer(respond) as server:
        # A deadline far from what the scan takes: the test is about what it finds, never how fast.
        suite = write_suite([task("t", verify_commands=["test -f done.txt"], timeout_secs=600)])
        argv = ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", "--agent", "claude-code"]
        result = cli([*argv, "--base-url", server.url, "--sandbox", "on", "--keep-worktrees"], cwd=repo)
    assert result.exit_code == 0, result.output
    [attempt] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    scan = json.loads((Path(attempt["worktree"]) / "scan.json").read_text())
    assert scan["found"] == [] and scan["key"].startswith(TOKEN_PREFIX)
    assert server.requests[0].headers["x-api-key"] == PLANTED  # the gateway sent the real key upstream
    assert attempt["tokens"] == {"input": 52, "output": 6, "cached_input": 10, "cache_creation": 2, "reasoning": None}
    assert attempt["model"] == "claude-sonnet-4-5-20250929"
    assert attempt["cost_usd"] is not None  # priced from the table by the model asked for
