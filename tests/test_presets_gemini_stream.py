"""Gemini CLI 0.61's stream-json as it prints it (recorded against a loopback server), and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from worktrial.agents.presets.gemini_cli import GeminiParser
from worktrial.agents.presets.parsing import ExitInfo, Verdict

INIT = {"type": "init", "session_id": "s", "model": "gemini-2.5-pro"}
TOOL = {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "t1", "parameters": {}}
STATS = {"total_tokens": 1672, "input_tokens": 1600, "output_tokens": 53, "cached": 800, "input": 800}
API_401 = '[API Error: {"error":{"code":401,"message":"API key not valid","status":"UNAUTHENTICATED"}}]'


def run(tmp_path: Path, events: list[dict[str, Any]], code: int) -> Verdict:
    parser = GeminiParser()
    parser.feed(b"".join(json.dumps(e).encode() + b"\n" for e in events))
    return parser.finish(ExitInfo(returncode=code, timed_out=False, scratch=tmp_path))


def session(tmp_path: Path) -> None:
    chats = tmp_path / "gemini" / ".gemini" / "tmp" / "w" / "chats"
    chats.mkdir(parents=True)
    first = {
        "id": "a",
        "type": "gemini",
        "model": "gemini-2.5-pro",
        "tokens": {"input": 700, "output": 45, "cached": 200, "thoughts": 15},
    }
    second = {
        "id": "b",
        "type": "gemini",
        "model": "gemini-2.5-pro",
        "tokens": {"input": 900, "output": 8, "cached": 600, "thoughts": 4},
    }
    lines = [{"sessionId": "s"}, {"type": "user", "id": "u"}, first, {"$set": {"lastUpdated": "x"}}, first, second]
    (chats / "session-1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_success_takes_turns_and_thinking_tokens_from_the_session_file(tmp_path: Path) -> None:
    session(tmp_path)
    result = {"type": "result", "status": "success", "stats": STATS}
    verdict = run(tmp_path, [INIT, TOOL, result], 0)
    assert verdict.claimed is True and verdict.model == "gemini-2.5-pro"
    tokens = verdict.usage.tokens
    assert (tokens.input, tokens.cached_input, tokens.output, tokens.reasoning) == (1600, 800, 72, 19)
    assert verdict.usage.turns == 2 and verdict.usage.tool_counts == {"run_shell_command": 1}
    assert not [n for n in verdict.usage.notes if "differs" in n]


def test_without_a_session_file_the_result_stats_count(tmp_path: Path) -> None:
    verdict = run(tmp_path, [INIT, {"type": "result", "status": "success", "stats": STATS}], 0)
    tokens = verdict.usage.tokens
    assert (tokens.input, tokens.cached_input, tokens.output, tokens.reasoning) == (1600, 800, 53, None)
    assert verdict.usage.turns is None


def test_result_error_with_an_api_status_is_a_fatal_provider_failure(tmp_path: Path) -> None:
    result = {"type": "result", "status": "error", "error": {"type": "unknown", "message": API_401}, "stats": STATS}
    verdict = run(tmp_path, [INIT, result], 145)
    assert verdict.error_category == "provider_auth" and verdict.fatal is True
    assert "HTTP 401" in (verdict.reason or "")


@pytest.mark.parametrize(
    ("code", "claimed", "category", "words"),
    [
        (41, None, "provider_auth", "refused the credentials"),
        (42, False, None, "input error"),
        (52, None, "agent_failed", "configuration error"),
        (53, False, None, "turn limit exceeded"),
        (55, None, "agent_failed", "the folder is not trusted"),
    ],
)
def test_documented_exit_codes_without_a_result(
    tmp_path: Path, code: int, claimed: bool | None, category: str | None, words: str
) -> None:
    verdict = run(tmp_path, [], code)
    assert verdict.claimed is claimed and verdict.error_category == category
    assert words in (verdict.reason or "")


def test_json_document_output_still_parses_for_custom_agents(tmp_path: Path) -> None:
    document = {
        "response": "done",
        "stats": {"models": {"m": {"tokens": {"prompt": 10, "candidates": 2}, "api": {"totalRequests": 1}}}},
    }
    parser = GeminiParser()
    parser.feed(json.dumps(document, indent=2).encode())
    verdict = parser.finish(ExitInfo(returncode=0, timed_out=False, scratch=tmp_path))
    assert verdict.claimed is True and verdict.usage.tokens.input == 10 and verdict.usage.turns == 1
