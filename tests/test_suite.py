from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from worktrial.errors import SuiteError
from worktrial.model.commands import ArgvCommand, ShCommand, to_argv
from worktrial.model.suite import load_suite, suite_json_schema

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "suite.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def good_task(**over: object) -> dict[str, object]:
    t: dict[str, object] = {"id": "a", "prompt": "do it", "verify_commands": ["true"]}
    t.update(over)
    return t


def error_of(tmp_path: Path, data: object) -> str:
    with pytest.raises(SuiteError) as info:
        load_suite(write(tmp_path, data))
    return str(info.value)


def test_bundled_suite_loads_and_is_hashed() -> None:
    path = ROOT / "suites/smoke-workspace-basics.json"
    loaded = load_suite(path)
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.suite.attempts == 3
    assert all(t.solution for t in loaded.suite.tasks)
    assert loaded.warnings == []


def test_defaults(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, {"id": "s", "tasks": [good_task()]})).suite
    task = suite.tasks[0]
    assert suite.attempts == 1
    assert task.category == "capability"
    assert task.timeout_secs == 600
    assert task.verify_timeout_secs == 300
    assert task.solution is None and task.setup_commands == []


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"id": "s", "attempts": 0, "tasks": [good_task()]}, "$.attempts: must be a positive integer (got 0)"),
        ({"id": "s", "tasks": []}, "$.tasks: must not be empty"),
        ({"id": "s", "tasks": [good_task(id="")]}, "$.tasks[0].id: must not be empty"),
        ({"id": "s", "tasks": [good_task(id="   ")]}, "$.tasks[0].id: must not be empty"),
        ({"id": "s", "tasks": [good_task(prompt="")]}, "$.tasks[0].prompt: must not be empty"),
        ({"id": "s", "tasks": [good_task(verify_commands=[])]}, "$.tasks[0].verify_commands: must not be empty"),
        (
            {"id": "s", "tasks": [{"id": "a", "prompt": "p"}]},
            "$.tasks[0].verify_commands: required field is missing",
        ),
        ({"id": "s", "tasks": [good_task(timeout_secs=0)]}, "$.tasks[0].timeout_secs: must be a positive integer"),
        ({"id": "s", "tasks": [good_task(timeout_secs=-5)]}, "$.tasks[0].timeout_secs: must be a positive integer"),
        ({"id": "s", "tasks": [good_task(timeout_secs=1.5)]}, "$.tasks[0].timeout_secs: must be an integer"),
        ({"id": "s", "tasks": [good_task(timeout_secs="300")]}, "$.tasks[0].timeout_secs: must be an integer"),
        ({"id": "s", "tasks": [good_task(category="speed")]}, "$.tasks[0].category: Input should be 'capability'"),
        ({"id": "s", "tasks": [good_task(verify_commands=[""])]}, "$.tasks[0].verify_commands[0]: command is empty"),
        (
            {"id": "s", "tasks": [good_task(verify_commands=[{"run": "x"}])]},
            '$.tasks[0].verify_commands[0]: a command is a string, {"argv"',
        ),
        (
            {"id": "s", "tasks": [good_task(solution=[{"argv": []}])]},
            '$.tasks[0].solution[0]: "argv" must be a non-empty list of strings',
        ),
        ({"tasks": [good_task()]}, "$.id: required field is missing"),
        ([1, 2], "$: the top level must be a JSON object"),
    ],
)
def test_validation_errors_name_file_and_path(tmp_path: Path, data: object, expected: str) -> None:
    message = error_of(tmp_path, data)
    assert message.startswith(str(tmp_path / "suite.json") + ": ")
    assert expected in message


def test_duplicate_ids(tmp_path: Path) -> None:
    message = error_of(tmp_path, {"id": "s", "tasks": [good_task(), good_task(id="b"), good_task()]})
    assert "$.tasks[2].id: duplicate task id 'a' (first used at $.tasks[0])" in message


def test_json_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    message = error_of(tmp_path, '{"id": "s",\n  "tasks": [,]\n}')
    assert message.startswith(f"{tmp_path / 'suite.json'}:2:13: invalid JSON")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "nope.json")


def test_unknown_fields_are_accepted_with_warnings(tmp_path: Path) -> None:
    loaded = load_suite(write(tmp_path, {"id": "s", "version": 2, "tasks": [good_task(difficulty="hard")]}))
    assert loaded.warnings == ["$.version: unknown field, ignored", "$.tasks[0].difficulty: unknown field, ignored"]


def test_command_forms(tmp_path: Path) -> None:
    cmds = ["grep -q x f", {"argv": ["grep", "-q", "a b", "f"]}, {"sh": "a && b"}]
    task = load_suite(write(tmp_path, {"id": "s", "tasks": [good_task(verify_commands=cmds)]})).suite.tasks[0]
    assert task.verify_commands[0] == "grep -q x f"
    assert task.verify_commands[1] == ArgvCommand(argv=["grep", "-q", "a b", "f"])
    assert task.verify_commands[2] == ShCommand(sh="a && b")
    assert [to_argv(c) for c in task.verify_commands] == [
        ["grep", "-q", "x", "f"],
        ["grep", "-q", "a b", "f"],
        ["/bin/sh", "-c", "a && b"],
    ]


def test_schema_describes_the_format() -> None:
    schema = suite_json_schema()
    assert schema["title"] == "worktrial eval suite"
    task = schema["$defs"]["Task"]
    assert set(task["required"]) == {"id", "prompt", "verify_commands"}
    assert task["properties"]["category"]["enum"] == ["capability", "regression"]


def test_schema_accepts_the_bundled_suite_and_rejects_bad_ones(tmp_path: Path) -> None:
    import jsonschema

    schema = suite_json_schema()
    jsonschema.validate(json.loads((ROOT / "suites/smoke-workspace-basics.json").read_text()), schema)
    for bad in (
        {"id": "s", "tasks": []},
        {"id": "s", "tasks": [good_task(timeout_secs=0)]},
        {"id": "s", "tasks": [good_task(verify_commands=[{"shell": "x"}])]},
        {"id": "s", "tasks": [good_task(category="other")]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
