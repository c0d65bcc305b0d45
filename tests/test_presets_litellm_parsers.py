"""aider's and mini-swe-agent's outputs as their real versions print them: provider failures, usage, models.

Both tools call models through litellm and name litellm's exception classes when a provider fails; aider
prints them and still exits 0. Recorded from aider 0.86.2 and mini-swe-agent 2.4.6 against a loopback server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from worktrial.agents.presets.aider import ANALYTICS_LOG, AiderParser
from worktrial.agents.presets.base import Invocation, litellm_base_url
from worktrial.agents.presets.mini_swe_agent import TRAJECTORY, MiniTrajectoryParser, version_argv
from worktrial.agents.presets.parsing import ExitInfo

AIDER_BANNER = b"Aider v0.86.2\nModel: openai/coder-1 with whole edit format\nGit repo: .git with 0 files\n"


def done(tmp_path: Path, code: int = 0) -> ExitInfo:
    return ExitInfo(returncode=code, timed_out=False, scratch=tmp_path)


def analytics(tmp_path: Path, *events: dict[str, Any]) -> None:
    lines = [json.dumps({"event": "launched", "properties": {}})]
    lines += [json.dumps(e) for e in events]
    (tmp_path / ANALYTICS_LOG).write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("printed", "category", "fatal"),
    [
        (
            b"litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect \nAPI key provided\n",
            "provider_auth",
            True,
        ),
        (
            b"litellm.NotFoundError: NotFoundError: OpenAIException - The model `x` does not exist\n",
            "model_not_found",
            True,
        ),
        (
            b"litellm.BadRequestError: LLM Provider NOT provided. Pass in the LLM provider you are trying to call\n",
            "provider_bad_request",
            True,
        ),
        (b"litellm.RateLimitError: RateLimitError: OpenAIException - slow down\n", "provider_rate_limit", False),
    ],
)
def test_aider_provider_failure_printed_with_exit_0_is_not_a_claim(
    tmp_path: Path, printed: bytes, category: str, fatal: bool
) -> None:
    analytics(tmp_path, {"event": "message_send_starting", "properties": {}})
    parser = AiderParser()
    parser.feed(AIDER_BANNER + printed + b"The API provider is not able to authenticate you.\n")
    verdict = parser.finish(done(tmp_path))
    assert verdict.claimed is None and verdict.error_category == category and verdict.fatal is fatal
    assert verdict.model == "openai/coder-1"
    if category == "provider_auth":
        assert "Incorrect API key provided" in (verdict.reason or "")  # the wrapped line is joined


def test_aider_error_after_a_successful_call_still_claims(tmp_path: Path) -> None:
    """A failure after replies (e.g. a retried rate limit the run survived) leaves the judgement to verify."""
    send = {"event": "message_send", "properties": {"prompt_tokens": 1000, "completion_tokens": 50, "cost": 0}}
    analytics(tmp_path, send)
    parser = AiderParser()
    parser.feed(AIDER_BANNER + b"litellm.RateLimitError: RateLimitError: slow down\n")
    verdict = parser.finish(done(tmp_path))
    assert verdict.claimed is True and verdict.error_category is None
    assert (verdict.usage.tokens.input, verdict.usage.tokens.output, verdict.usage.turns) == (1000, 50, 1)


def test_aider_without_any_reply_claims_nothing(tmp_path: Path) -> None:
    analytics(tmp_path, {"event": "message_send_starting", "properties": {}})
    verdict = AiderParser().finish(done(tmp_path))
    assert verdict.claimed is None and verdict.reason == "aider exited 0 without a model reply"


def trajectory(tmp_path: Path, status: str, messages: list[dict[str, Any]], cost: float = 0.0) -> None:
    info = {
        "model_stats": {"instance_cost": cost, "api_calls": sum(m["role"] == "assistant" for m in messages)},
        "config": {"model": {"model_name": "openai/coder-1"}},
        "exit_status": status,
    }
    (tmp_path / TRAJECTORY).write_text(json.dumps({"info": info, "messages": messages}))


def reply(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    return {"role": "assistant", "content": "x", "extra": {"response": {"usage": usage}, "cost": 0.0}}


def test_mini_tokens_are_summed_from_each_response(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "s"}, reply(1000, 50, 300), {"role": "tool"}, reply(1300, 9, 1000)]
    trajectory(tmp_path, "Submitted", [*messages, {"role": "exit", "extra": {"exit_status": "Submitted"}}])
    verdict = MiniTrajectoryParser().finish(done(tmp_path))
    assert verdict.claimed is True and verdict.model == "openai/coder-1"
    tokens = verdict.usage.tokens
    assert (tokens.input, tokens.output, tokens.cached_input, tokens.reasoning) == (2300, 59, 1300, 2)
    assert verdict.usage.turns == 2 and verdict.usage.cost_usd == 0.0  # 0 becomes unknown in PresetAgent


@pytest.mark.parametrize(
    ("status", "text", "category", "fatal"),
    [
        ("AuthenticationError", "litellm.AuthenticationError: Incorrect API key", "provider_auth", True),
        ("NotFoundError", "litellm.NotFoundError: model not found", "model_not_found", True),
        ("BadRequestError", "litellm.BadRequestError: The model `x` does not exist", "model_not_found", True),
        ("BadRequestError", "litellm.BadRequestError: context too long", "provider_bad_request", True),
        ("RateLimitError", "litellm.RateLimitError: slow down", "provider_rate_limit", False),
    ],
)
def test_mini_exception_exit_status_is_a_provider_failure(
    tmp_path: Path, status: str, text: str, category: str, fatal: bool
) -> None:
    exit_message = {"role": "exit", "content": text, "extra": {"exit_status": status, "exception_str": text}}
    trajectory(tmp_path, status, [{"role": "system", "content": "s"}, exit_message])
    verdict = MiniTrajectoryParser().finish(done(tmp_path, 1))
    assert verdict.claimed is None and verdict.error_category == category and verdict.fatal is fatal


def test_mini_limits_exceeded_is_still_a_claimed_failure(tmp_path: Path) -> None:
    trajectory(tmp_path, "LimitsExceeded", [reply(10, 1, 0), {"role": "exit", "extra": {"exit_status": "x"}}])
    verdict = MiniTrajectoryParser().finish(done(tmp_path))
    assert verdict.claimed is False and verdict.error_category is None


def test_mini_version_comes_from_its_own_python(tmp_path: Path) -> None:
    script = tmp_path / "mini"
    script.write_text("#!/opt/venv/bin/python3.12\nimport sys\n")
    argv = version_argv(str(script))
    assert argv is not None and argv[0] == "/opt/venv/bin/python3.12" and argv[1] == "-c"
    script.write_text("#!/bin/sh\nexec true\n")
    assert version_argv(str(script)) is None


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("openai/coder-1", {"OPENAI_API_BASE", "OPENAI_BASE_URL"}),
        ("coder-1", {"OPENAI_API_BASE", "OPENAI_BASE_URL"}),
        ("openrouter/openai/gpt-5.1", {"OPENROUTER_API_BASE", "OPENROUTER_BASE_URL"}),
    ],
)
def test_litellm_base_url_goes_to_the_routes_provider(tmp_path: Path, model: str, expected: set[str]) -> None:
    inv = Invocation(prompt="p", model=model, scratch=tmp_path, worktree=tmp_path, base_url="http://127.0.0.1:9/v1")
    assert set(litellm_base_url(inv, {})) == expected
