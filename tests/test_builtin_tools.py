"""The builtin agent's tools, argument validation and context compaction, on a real directory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from worktrial.agents.builtin.conversation import (
    ELIDED_ARGUMENT,
    AssistantMessage,
    ContextBudget,
    Conversation,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
    elide_old_outputs,
    parse_arguments,
)
from worktrial.agents.builtin.specs import SPECS, validate_arguments
from worktrial.agents.builtin.tools import Toolbox, ToolFailure, truncate_middle


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("alpha = 1\nbeta = 2\nalpha_two = 3\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("alpha\n")
    return root


def toolbox(worktree: Path, limit: int = 2000, remaining: float = 60.0) -> Toolbox:
    deadline = time.monotonic() + remaining
    return Toolbox(
        worktree,
        dict(os.environ),
        output_limit=limit,
        bash_timeout_secs=30,
        remaining=lambda: max(0.0, deadline - time.monotonic()),
    )


def test_paths_are_confined_to_the_worktree(worktree: Path, tmp_path: Path) -> None:
    tools = toolbox(worktree)
    assert tools.resolve("pkg/../notes.txt") == worktree.resolve() / "notes.txt"
    assert tools.resolve(str(worktree / "notes.txt")) == worktree.resolve() / "notes.txt"
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", worktree / "out")
    os.symlink(worktree / "pkg", worktree / "inside")
    assert tools.resolve("inside/mod.py") == worktree.resolve() / "pkg" / "mod.py"
    for bad in ("../x", "/etc/passwd", "out/new.txt", "out", "pkg/../../x", ""):
        with pytest.raises(ToolFailure):
            tools.resolve(bad)
    result = tools.execute("write_file", {"path": "out/planted.txt", "content": "x"})
    assert result.is_error and "outside the worktree" in result.content
    assert not (tmp_path / "elsewhere" / "planted.txt").exists()


def test_read_file_with_line_ranges(worktree: Path) -> None:
    tools = toolbox(worktree)
    whole = tools.execute("read_file", {"path": "notes.txt"})
    assert whole.content.splitlines() == ["notes.txt: lines 1-3 of 3", "     1\tone", "     2\ttwo", "     3\tthree"]
    part = tools.execute("read_file", {"path": "notes.txt", "start_line": 2, "end_line": 9})
    assert part.content.splitlines()[1:] == ["     2\ttwo", "     3\tthree"]
    assert tools.execute("read_file", {"path": "notes.txt", "start_line": 7}).is_error
    assert "is a directory" in tools.execute("read_file", {"path": "pkg"}).content
    assert "does not exist" in tools.execute("read_file", {"path": "nope.txt"}).content
    (worktree / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert "binary file (3 bytes)" in tools.execute("read_file", {"path": "blob.bin"}).content


def test_write_and_edit_file(worktree: Path) -> None:
    tools = toolbox(worktree)
    assert not tools.execute("write_file", {"path": "new/deep/file.txt", "content": "a b a\n"}).is_error
    assert (worktree / "new/deep/file.txt").read_text() == "a b a\n"
    several = tools.execute("edit_file", {"path": "new/deep/file.txt", "old_string": "a", "new_string": "z"})
    assert several.is_error and "occurs 2 times" in several.content
    none = tools.execute("edit_file", {"path": "new/deep/file.txt", "old_string": "q", "new_string": "z"})
    assert none.is_error and "was not found" in none.content
    once = tools.execute("edit_file", {"path": "new/deep/file.txt", "old_string": "a b", "new_string": "c"})
    assert not once.is_error and (worktree / "new/deep/file.txt").read_text() == "c a\n"
    empty = tools.execute("edit_file", {"path": "notes.txt", "old_string": "", "new_string": "x"})
    assert empty.is_error and "must not be empty" in empty.content


def test_list_files_and_search(worktree: Path) -> None:
    tools = toolbox(worktree)
    listing = tools.execute("list_files", {}).content.splitlines()
    assert listing == ["notes.txt", "pkg/", "pkg/mod.py"]
    assert tools.execute("list_files", {"path": ".", "depth": 1}).content.splitlines() == ["notes.txt", "pkg/"]
    found = tools.execute("search", {"pattern": r"^alpha"}).content.splitlines()
    assert found == ["pkg/mod.py:1: alpha = 1", "pkg/mod.py:3: alpha_two = 3"]  # .git is skipped
    assert tools.execute("search", {"pattern": "two", "glob": "*.txt"}).content == "notes.txt:2: two"
    assert tools.execute("search", {"pattern": "zzz"}).content == "no matches"
    bad = tools.execute("search", {"pattern": "(unclosed"})
    assert bad.is_error and "invalid regular expression" in bad.content


def test_bash_output_keeps_head_and_tail(worktree: Path) -> None:
    tools = toolbox(worktree, limit=1000)
    result = tools.execute("bash", {"command": "echo FIRST; seq 1 20000; echo LAST >&2; exit 4"})
    assert result.content.startswith("exit code 4\nFIRST\n")
    assert result.content.rstrip().endswith("LAST")
    assert "bytes omitted" in result.content and len(result.content) < 1200
    assert result.output_bytes > 100_000 and not result.is_error
    here = tools.execute("bash", {"command": "pwd; git rev-parse --is-inside-work-tree 2>/dev/null || true"})
    assert str(worktree.resolve()) in here.content


def test_bash_timeout_is_bounded_by_the_deadline(worktree: Path) -> None:
    tools = toolbox(worktree, remaining=1.0)
    result = tools.execute("bash", {"command": "sleep 30", "timeout_secs": 100})
    # The limit used is the attempt's remaining second, not the 100 s asked for (said in the result, not timed).
    assert result.is_error and result.content.startswith("timed out after 1s")
    assert toolbox(worktree, remaining=0.0).execute("bash", {"command": "true"}).is_error


def test_truncate_middle() -> None:
    assert truncate_middle("short", 100) == "short"
    text = "a" * 50 + "b" * 50
    cut = truncate_middle(text, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters omitted" in cut


def test_argument_validation() -> None:
    assert validate_arguments(SPECS["read_file"], {"path": "a", "start_line": None}) is None
    assert "must be an integer" in (validate_arguments(SPECS["read_file"], {"path": "a", "start_line": True}) or "")
    assert "must be an integer" in (validate_arguments(SPECS["read_file"], {"path": "a", "start_line": "3"}) or "")
    missing = validate_arguments(SPECS["edit_file"], {"path": "a"})
    assert missing == "edit_file: missing required argument(s): old_string, new_string"
    assert validate_arguments(SPECS["finish"], {"status": "done", "summary": ""}) == (
        "finish: argument status must be one of success, failure"
    )
    extra = validate_arguments(SPECS["write_file"], {"path": "a", "content": "", "mode": 1})
    assert "unknown argument(s): mode" in (extra or "")
    assert "at least 1" in (validate_arguments(SPECS["list_files"], {"depth": 0}) or "")
    assert parse_arguments("") == {} and parse_arguments("[1]") is None and parse_arguments("{bad") is None


def _round(n: int, size: int) -> list[AssistantMessage | ToolResults]:
    call = ToolCall(f"c{n}", "write_file", "", {"path": f"f{n}", "content": "x" * size})
    call.raw_arguments = json.dumps(call.arguments)
    return [AssistantMessage("", [call]), ToolResults([ToolResult(f"c{n}", "write_file", "y" * size)])]


def test_old_outputs_are_elided_and_recent_ones_kept() -> None:
    conversation = Conversation("system", [UserMessage("task " * 100)])
    for n in range(4):
        conversation.messages.extend(_round(n, 1000))
    before = conversation.chars()
    freed = elide_old_outputs(conversation, chars_to_free=10**9, keep_recent=2)
    assert freed > 0 and conversation.chars() == before - freed
    old_results, recent_results = conversation.messages[2], conversation.messages[8]
    assert isinstance(old_results, ToolResults) and "elided" in old_results.results[0].content
    assert isinstance(recent_results, ToolResults) and recent_results.results[0].content == "y" * 1000
    old_call = conversation.messages[1]
    assert isinstance(old_call, AssistantMessage) and old_call.tool_calls[0].arguments == {
        "path": "f0",
        "content": ELIDED_ARGUMENT,
    }
    kept_call = conversation.messages[7]
    assert isinstance(kept_call, AssistantMessage) and kept_call.tool_calls[0].arguments is not None
    assert kept_call.tool_calls[0].arguments["content"] == "x" * 1000
    assert conversation.messages[0] == UserMessage("task " * 100)  # the task is never elided


def test_context_budget_compacts_only_near_the_window() -> None:
    conversation = Conversation("s", [UserMessage("t")])
    for n in range(6):
        conversation.messages.extend(_round(n, 2000))
    budget = ContextBudget(window_tokens=100_000, output_reserve=1000)
    assert not budget.fit(conversation, 0)
    small = ContextBudget(window_tokens=5000, output_reserve=1000)
    assert small.fit(conversation, 0)
    assert small.estimate(conversation, 0) <= small.high * small.usable
    signature = ToolCall("a", "bash", '{"b": 1, "a": 2}', {"b": 1, "a": 2}).signature()
    assert signature == ToolCall("z", "bash", '{"a":2,"b":1}', {"a": 2, "b": 1}).signature()


ARGUMENT_SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("bash", {"command": "ls"}),
    ("bash", {"command": "ls", "timeout_secs": 0}),
    ("bash", {"command": "ls", "timeout_secs": 2.5}),
    ("bash", {"cmd": "ls"}),
    ("read_file", {"path": "a", "start_line": 2, "end_line": 3}),
    ("read_file", {"path": 3}),
    ("write_file", {"path": "a", "content": ""}),
    ("write_file", {"path": "a"}),
    ("edit_file", {"path": "a", "old_string": "x", "new_string": "y", "extra": 1}),
    ("list_files", {}),
    ("list_files", {"depth": 1}),
    ("search", {"pattern": "x", "glob": "*.py"}),
    ("search", {"pattern": ["x"]}),
    ("finish", {"status": "success", "summary": "done"}),
    ("finish", {"status": "maybe", "summary": "done"}),
]


@pytest.mark.parametrize(("tool", "arguments"), ARGUMENT_SAMPLES)
def test_schema_sent_to_the_model_agrees_with_validation(tool: str, arguments: dict[str, Any]) -> None:
    """The JSON Schema is generated from the argument models: a call it accepts is exactly a call we accept."""
    schema = SPECS[tool].parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    accepted_by_schema = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    assert accepted_by_schema == (validate_arguments(SPECS[tool], arguments) is None)
    assert "anyOf" not in json.dumps(schema) and "title" not in schema and schema["additionalProperties"] is False


def test_toolbox_validates_raw_arguments_itself(worktree: Path) -> None:
    result = toolbox(worktree).execute("write_file", {"path": "a", "content": 5})
    assert result.is_error and result.content == "write_file: argument content must be a string"
    assert not (worktree / "a").exists()
