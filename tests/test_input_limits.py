"""Bad JSON input is one line and exit 2, never a traceback: suites, envelopes, the run store's own files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import task
from tests.hostile_support import run_worktrial
from worktrial.errors import SuiteError
from worktrial.jsonlimits import MAX_JSON_DEPTH, JsonLimitError, loads_limited
from worktrial.model.suite import MAX_TIMEOUT_SECS, load_suite

VALID_TASK = '{"id": "t", "prompt": "p", "verify_commands": ["true"]'


def suite_text(task_fields: str = "", suite_fields: str = "") -> str:
    extra = f", {task_fields}" if task_fields else ""
    more = f", {suite_fields}" if suite_fields else ""
    return f'{{"id": "s", "tasks": [{VALID_TASK}{extra}}}]{more}}}'


# Each suite text, and the words its one-line error must contain (JSON path first).
BAD_SUITES = {
    "nested-100000": (suite_text('"x": ' + "[" * 100_000 + "]" * 100_000), "nested deeper than 64 levels"),
    "nested-just-beyond": (
        suite_text('"x": ' + "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2)),
        "$.tasks[0].x" + "[0]" * (MAX_JSON_DEPTH - 3) + ": nested deeper than 64",
    ),
    "timeout-10**400": (suite_text('"timeout_secs": 1' + "0" * 400), "$.tasks[0].timeout_secs: number out of range"),
    "int-5000-digits": (suite_text('"x": 9' + "9" * 5000), "$.tasks[0].x: number out of range"),
    "int-beyond-float": (suite_text(f'"verify_timeout_secs": {2**1100}'), "$.tasks[0].verify_timeout_secs: number"),
    "float-1e400": (suite_text('"timeout_secs": 1e400'), "$.tasks[0].timeout_secs: number out of range"),
    "nan": (suite_text('"timeout_secs": NaN'), "NaN is not a valid JSON number"),
    "infinity": (suite_text('"x": -Infinity'), "-Infinity is not a valid JSON number"),
    "nul-in-prompt": (suite_text().replace('"p"', '"fix\\u0000it"'), "$.tasks[0].prompt: contains a NUL"),
    "nul-in-id": (suite_text().replace('"t"', '"t\\u0000"'), "$.tasks[0].id: contains a NUL"),
    "nul-in-argv": (
        suite_text().replace('["true"]', '[{"argv": ["test", "-f", "a\\u0000b"]}]'),
        "$.tasks[0].verify_commands[0].argv[2]: contains a NUL",
    ),
    "nul-in-env": (suite_text('"env": {"A": "x\\u0000"}'), "$.tasks[0].env.A: contains a NUL"),
    "nul-in-a-key": (suite_text('"env": {"A\\u0000B": "x"}'), "$.tasks[0].env: a key contains a NUL"),
    "nul-in-suite-id": ('{"id": "\\u0000", "tasks": []}', "$.id: contains a NUL"),
    "timeout-a-year": (
        suite_text('"timeout_secs": 31536000'),
        "$.tasks[0].timeout_secs: must be at most 604800 seconds (7 days); got 31536000",
    ),
    "verify-timeout-too-long": (suite_text('"verify_timeout_secs": 604801'), "must be at most 604800 seconds"),
    "attempts-too-many": (suite_text(suite_fields='"attempts": 50000'), "$.attempts: must be at most 10000 per task"),
    "environment-timeout-too-long": (
        suite_text(suite_fields='"environment": {"setup": ["true"], "timeout_secs": 9999999}'),
        "$.environment.timeout_secs: must be at most 604800 seconds (7 days)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SUITES))
def test_bad_suite_is_one_located_error(tmp_path: Path, case: str) -> None:
    text, expected = BAD_SUITES[case]
    path = tmp_path / "suite.json"
    path.write_text(text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_limits_leave_real_suites_alone(tmp_path: Path) -> None:
    """A week-long timeout, deep-ish metadata and big (float-sized) numbers are all still accepted."""
    nested = "[" * (MAX_JSON_DEPTH - 3) + "]" * (MAX_JSON_DEPTH - 3)  # 64 levels with suite, tasks and task
    text = suite_text(f'"timeout_secs": {MAX_TIMEOUT_SECS}, "meta": {nested}, "big": {10**300}, "f": 1.5e308')
    path = tmp_path / "suite.json"
    path.write_text(text)
    loaded = load_suite(path)
    assert loaded.suite.tasks[0].timeout_secs == MAX_TIMEOUT_SECS


def test_loads_limited_reports_the_path() -> None:
    with pytest.raises(JsonLimitError, match=r"^\$\.a\[1\]\.b: number out of range"):
        loads_limited('{"a": [0, {"b": 1e999}]}')
    assert loads_limited('{"a": "x\\u0000"}') == {"a": "x\0"}  # envelopes may quote agent text with NULs
    with pytest.raises(JsonLimitError, match=r"^\$\.a: contains a NUL"):
        loads_limited('{"a": "x\\u0000"}', allow_nul=False)


@pytest.mark.slow
def test_bad_suites_through_the_cli_are_one_line_and_exit_2(repo: Path, tmp_path: Path) -> None:
    """The real CLI, in its own process: no traceback for any of them, in ``validate`` and in ``eval``."""
    for case in ("nested-100000", "timeout-10**400", "nul-in-argv", "timeout-a-year"):
        path = tmp_path / f"{case}.json"
        path.write_text(BAD_SUITES[case][0])
        for args in (["validate", str(path)], ["eval", "--suite", str(path), "--agent", "nop", "--trust"]):
            result = run_worktrial(args, cwd=repo, timeout=120)
            assert result.returncode == 2, (case, args, result.stderr)
            assert result.stderr.count("\n") == 1 and result.stderr.startswith("worktrial: error: "), result.stderr
            assert "Traceback" not in result.stderr


def _stored_run(repo: Path, write_suite: Callable[..., Path]) -> tuple[Path, dict[str, Any]]:
    suite = write_suite([task("t")], attempts=1)
    result = run_worktrial(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "-q"], cwd=repo
    )
    assert result.returncode == 0, result.stderr
    return suite, json.loads(result.stdout)


ENVELOPE_ATTACKS: dict[str, Callable[[dict[str, Any]], str]] = {
    "nested": lambda e: "[" * 100_000 + "]" * 100_000,
    "nested-field": lambda e: json.dumps({**e, "extra": json.loads("[" * 70 + "]" * 70)}),
    "huge-int": lambda e: json.dumps(e).replace('"passed_runs": 1', '"passed_runs": 1' + "0" * 400, 1),
    "int-beyond-float": lambda e: json.dumps(e).replace('"total_runs": 1', f'"total_runs": {2**1100}', 1),
    "float-overflow": lambda e: json.dumps(e).replace('"pass_at_k": 1.0', '"pass_at_k": 1e400', 1),
}


@pytest.mark.slow
def test_envelopes_given_to_audit_and_compare_are_checked(repo: Path, write_suite, tmp_path: Path) -> None:
    suite, envelope = _stored_run(repo, write_suite)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(envelope))
    for name, attack in ENVELOPE_ATTACKS.items():
        bad = tmp_path / f"{name}.json"
        bad.write_text(attack(envelope))
        assert bad.read_text() != json.dumps(envelope), name
        for args in (["audit", str(bad), "--suite", str(suite)], ["compare", str(good), str(bad)]):
            result = run_worktrial(args, cwd=repo, timeout=120)
            assert result.returncode == 2, (name, args, result.stdout, result.stderr)
            assert result.stderr.count("\n") == 1 and str(bad) in result.stderr, result.stderr


@pytest.mark.slow
def test_a_stored_envelope_beyond_the_limits_is_not_used(repo: Path, write_suite) -> None:
    """``report`` of a run whose envelope.json was replaced renders from the signed records, no traceback."""
    _suite, envelope = _stored_run(repo, write_suite)
    run_id = envelope["run"]["id"]
    (repo / ".worktrial" / "runs" / run_id / "envelope.json").write_text("[" * 100_000 + "]" * 100_000)
    result = run_worktrial(["report", run_id, "--format", "json"], cwd=repo, timeout=120)
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["report"]["overall"]["passed_runs"] == 1


@pytest.mark.slow
def test_a_run_json_beyond_the_limits_is_one_line(repo: Path, write_suite) -> None:
    _suite, envelope = _stored_run(repo, write_suite)
    run_id = envelope["run"]["id"]
    run_json = repo / ".worktrial" / "runs" / run_id / "run.json"
    meta = json.loads(run_json.read_text())
    for text in ("[" * 100_000 + "]" * 100_000, json.dumps(meta).replace('"attempts": 1', '"attempts": 1' + "0" * 500)):
        run_json.write_text(text)
        result = run_worktrial(["resume", run_id], cwd=repo, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "run.json" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[agents.mine]\ncommand = "my-agent \\u0000 --yes"\n', "$.agents.mine.command: contains a NUL character"),
        ('[agents.codex]\nargs = ["--x", "a\\u0000"]\n', "$.agents.codex.args[1]: contains a NUL character"),
        ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "invalid TOML: nested too deeply"),
    ],
)
def test_config_files_within_the_limits(isolated_state: Path, toml: str, expected: str) -> None:
    from worktrial.errors import BadInputError
    from worktrial.state.config import load_config

    path = isolated_state / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toml)
    with pytest.raises(BadInputError) as info:
        load_config()
    assert str(info.value) == f"{path}: {expected}" or str(info.value).startswith(f"{path}: {expected}")
    assert "\n" not in str(info.value)


def test_ray_resources_json_within_the_limits() -> None:
    from worktrial.cli.executors import parse_resources
    from worktrial.errors import BadInputError

    with pytest.raises(BadInputError, match=r"\$\.gpu: number out of range"):
        parse_resources(('{"gpu": 1e400}',))
    with pytest.raises(BadInputError, match="nested deeper than 64"):
        parse_resources(('{"a": ' + "[" * 5000 + "]" * 5000 + "}",))
    assert parse_resources(('{"gpu": 2}',)) == {"gpu": 2.0}
