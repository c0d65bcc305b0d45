"""Parsers on their own: split streams, cut-off streams, odd shapes and huge lines never crash or grow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.events import CLAUDE_FAILED, CLAUDE_NORMAL, CODEX_NORMAL
from tests.fakes.streams import GEMINI_NORMAL_DOC, SCENARIOS
from worktrial.agents.presets import PRESETS
from worktrial.agents.presets.claude_code import ClaudeStreamParser
from worktrial.agents.presets.codex import ThreadEventsParser
from worktrial.agents.presets.gemini_cli import GeminiJsonParser
from worktrial.agents.presets.parsing import (
    MAX_LINE_BYTES,
    ExitInfo,
    LineSplitter,
    Verdict,
    as_cost,
    as_int,
)


def exit_ok(tmp_path: Path, code: int | None = 0, timed_out: bool = False) -> ExitInfo:
    return ExitInfo(returncode=code, timed_out=timed_out, scratch=tmp_path)


def stream(events: list[object]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_events_split_across_arbitrary_chunks_parse_the_same(tmp_path: Path) -> None:
    data = stream(CLAUDE_NORMAL)
    parser = ClaudeStreamParser()
    for i in range(0, len(data), 7):  # 7-byte chunks split lines, keys and numbers
        parser.feed(data[i : i + 7])
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is True
    assert verdict.usage.tokens.input == 1200 + 13368 + 7924 and verdict.usage.cost_usd == pytest.approx(0.1046)
    assert verdict.usage.tool_counts == {"Write": 1, "Bash": 2}
    assert verdict.usage.notes == []


def test_is_error_with_exit_zero_is_a_claimed_failure(tmp_path: Path) -> None:
    parser = ClaudeStreamParser()
    parser.feed(stream(CLAUDE_FAILED))
    verdict = parser.finish(exit_ok(tmp_path, 0))
    assert verdict.claimed is False
    assert verdict.reason == "result success with is_error"
    assert "401" not in (verdict.reason or "")  # reasons carry no agent output


@pytest.mark.parametrize("subtype", ["error_max_turns", "error_during_execution"])
def test_error_subtypes_are_failures_and_counted(tmp_path: Path, subtype: str) -> None:
    parser = ClaudeStreamParser()
    parser.feed(stream([{"type": "result", "subtype": subtype, "is_error": False, "num_turns": 9}]))
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is False and verdict.usage.error_counts == {subtype: 1}
    assert verdict.usage.turns == 9


def test_stream_cut_by_timeout_keeps_what_was_seen_and_notes_the_cut(tmp_path: Path) -> None:
    data = stream(CODEX_NORMAL[:-1]) + b'{"type": "turn.completed", "usage": {"input_'
    parser = ThreadEventsParser()
    parser.feed(data)
    verdict = parser.finish(exit_ok(tmp_path, None, timed_out=True))
    assert verdict.claimed is None
    assert verdict.usage.tool_counts == {"command_execution": 1, "file_change": 1, "mcp:search": 1}
    assert verdict.usage.tokens.input is None
    assert any("cut off mid-event" in note for note in verdict.usage.notes)
    assert any("non-JSON" in note for note in verdict.usage.notes)  # the half line


def test_wrongly_typed_fields_mean_unknown_not_crash(tmp_path: Path) -> None:
    events = [
        {"type": "assistant", "message": {"content": "not a list"}},
        {"type": "assistant", "message": ["not", "a", "dict"]},
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": -3,
            "total_cost_usd": "NaN",
            "usage": {"input_tokens": True, "output_tokens": 1.5, "cache_read_input_tokens": "12"},
        },
    ]
    parser = ClaudeStreamParser()
    parser.feed(stream(events))
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is True
    assert verdict.usage.turns is None and verdict.usage.cost_usd is None
    assert verdict.usage.tokens.input is None and verdict.usage.tokens.output is None


def test_handler_exception_costs_one_event_and_is_noted(tmp_path: Path) -> None:
    class Exploding(ThreadEventsParser):
        def on_item(self, item: dict[str, object]) -> None:
            raise RuntimeError("surprise")

    parser = Exploding()
    parser.feed(stream(CODEX_NORMAL))
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is True and verdict.usage.tokens.output == 122
    assert any("unexpected shape" in note for note in verdict.usage.notes)


def test_verdict_exception_means_usage_unknown_with_a_note(tmp_path: Path) -> None:
    class Broken(ThreadEventsParser):
        def verdict(self, exit_info: ExitInfo) -> Verdict:
            raise KeyError("x")

    parser = Broken()
    parser.feed(stream(CODEX_NORMAL))
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is None
    assert any("parser failed: KeyError" in note for note in verdict.usage.notes)


def test_oversized_line_is_skipped_without_buffering_it(tmp_path: Path) -> None:
    lines: list[bytes] = []
    splitter = LineSplitter(lines.append, limit=100)
    splitter.feed(b"short\n" + b"x" * 150)
    splitter.feed(b"y" * 10_000)  # still the same oversized line: nothing kept
    assert len(splitter._buffer) == 0
    splitter.feed(b"\nafter\n")
    assert lines == [b"short", b"after"] and splitter.oversized == 1
    assert splitter.close() is False


def test_huge_output_costs_bounded_memory(tmp_path: Path) -> None:
    parser = ClaudeStreamParser()
    chunk = b"z" * (1024 * 1024)
    for _ in range(MAX_LINE_BYTES // len(chunk) + 2):
        parser.feed(chunk)
    assert len(parser._splitter._buffer) <= MAX_LINE_BYTES
    parser.feed(b"\n" + stream(CLAUDE_NORMAL))
    verdict = parser.finish(exit_ok(tmp_path))
    assert verdict.claimed is True
    assert any("skipped" in note for note in verdict.usage.notes)


def test_gemini_document_with_error_is_a_claimed_failure(tmp_path: Path) -> None:
    parser = GeminiJsonParser()
    parser.feed(json.dumps({**GEMINI_NORMAL_DOC, "error": {"type": "ApiError", "message": "quota"}}).encode())
    verdict = parser.finish(exit_ok(tmp_path, 1))
    assert verdict.claimed is False and verdict.reason == "gemini-cli reported ApiError"
    assert verdict.usage.tokens.output == 30 + 154  # stats still count (candidates + thoughts)


@pytest.mark.parametrize(("code", "meaning"), [(42, "input error"), (53, "turn limit exceeded")])
def test_gemini_documented_exit_codes(tmp_path: Path, code: int, meaning: str) -> None:
    parser = GeminiJsonParser()
    verdict = parser.finish(exit_ok(tmp_path, code))
    assert verdict.claimed is False and meaning in (verdict.reason or "")


def test_every_preset_parser_survives_random_bytes(tmp_path: Path) -> None:
    noise = bytes(range(256)) * 50 + b'\n{"type": 5}\n[]\n\xff\xfe\n'
    for name, spec in PRESETS.items():
        parser = spec.parser()
        parser.feed(noise)
        verdict = parser.finish(exit_ok(tmp_path, 0))
        assert verdict.claimed in (None, True), name  # aider claims on completion; nobody crashes
        assert verdict.usage.cost_usd is None, name


def test_fake_streams_cover_every_preset() -> None:
    assert set(SCENARIOS) == set(PRESETS)


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), (3.0, 3), (-1, None), (True, None), ("4", None), (2.5, None), (None, None)]
)
def test_as_int(value: object, expected: int | None) -> None:
    assert as_int(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(0.5, 0.5), ("0.25", 0.25), (-1, None), ("nan", None), (False, None)])
def test_as_cost(value: object, expected: float | None) -> None:
    assert as_cost(value) == expected


def _grok(tmp_path: Path, messages: list[object], code: int = 0) -> Verdict:
    from worktrial.agents.presets.grok_cli import GrokMessagesParser

    parser = GrokMessagesParser()
    parser.feed(stream(messages))
    return parser.finish(exit_ok(tmp_path, code))


def test_grok_cli_conversation(tmp_path: Path) -> None:
    """Finishing after a model reply claims success (the verify commands decide); tool calls are counted; an error
    reply with a status is a provider failure, one without is a claimed failure; no reply is no claim."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    done = [
        {"role": "user", "content": "do it"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "Done."},
    ]
    verdict = _grok(tmp_path, done)
    assert verdict.claimed is True and verdict.usage.turns == 2 and verdict.usage.tool_counts == {"bash": 1}
    refused = _grok(
        tmp_path, [{"role": "assistant", "content": "Sorry, I encountered an error: 401 Incorrect API key"}]
    )
    assert refused.error_category == "provider_auth" and refused.fatal
    broken = _grok(tmp_path, [{"role": "assistant", "content": "Sorry, I encountered an error: tool loop"}])
    assert broken.claimed is False and broken.error_category is None
    assert _grok(tmp_path, [], code=1).error_category == "agent_failed"  # nothing printed: the CLI broke
