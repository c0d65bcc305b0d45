"""Qwen Code: ``qwen --yolo --output-format stream-json -p PROMPT``.

Its stream is Claude Code's event shape (``system/init``, ``assistant``, ``result``), with two differences the
parser handles: usage follows OpenAI's convention (``input_tokens`` already counts the cached part), and a provider
failure arrives as ``subtype: success`` with result text ``[API Error: 401 ...]``. ``QWEN_RUNTIME_DIR`` in the
attempt's scratch directory keeps per-worktree state out of ``~/.qwen/projects``; ``~/.qwen/settings.json`` is the
user's own, read where it is. Qwen Code reports no cost: it is priced from the price table when the model is known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import OPENAI, Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.claude_code import USAGE_FIELDS, ClaudeStreamParser
from worktrial.agents.presets.parsing import ExitInfo, Verdict, as_dict, as_str, tokens_from
from worktrial.agents.presets.provider_errors import classify
from worktrial.model.records import ErrorCategory, Tokens

API_ERROR = re.compile(r"^\s*\[API Error:\s*(\d{3})?", re.I)
KEY_HINT = "check OPENAI_API_KEY (or the provider settings in ~/.qwen/settings.json)"


class QwenStreamParser(ClaudeStreamParser):
    label = "qwen-code"
    key_hint = KEY_HINT

    def _tokens(self, result: dict[str, Any]) -> Tokens:
        return tokens_from(as_dict(result.get("usage")), USAGE_FIELDS)

    def _note_usage(self, message: dict[str, Any]) -> None:
        message_id = as_str(message.get("id"))
        if message_id is not None and len(self.message_usage) <= 100_000:
            self.message_usage[message_id] = tokens_from(as_dict(message.get("usage")), USAGE_FIELDS)

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        result = self.result
        text = as_str(result.get("result")) if result is not None else None
        match = API_ERROR.match(text or "")
        if result is not None and match is not None:
            verdict = super().verdict(exit_info)
            status = int(match.group(1)) if match.group(1) else None
            category = classify(status, text) or ErrorCategory.PROVIDER_ERROR
            return self._provider_verdict(verdict.usage, category, status, text)
        return super().verdict(exit_info)


def _argv(inv: Invocation) -> list[str]:
    args = ["--yolo", "--output-format", "stream-json"]
    if inv.base_url:
        # An OpenAI-compatible endpoint; without an auth type (settings or flag) headless Qwen Code refuses to run.
        args += ["--auth-type", "openai"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "-p", inv.prompt]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    return {"OPENAI_BASE_URL": inv.base_url} if inv.base_url else {}


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin", flag="-p"),  # prompts over 64 KiB (agents.prompt)
    name="qwen-code",
    binary="qwen",
    summary="Qwen Code (qwen --yolo --output-format stream-json)",
    install="npm install -g @qwen-code/qwen-code",
    argv=_argv,
    parser=QwenStreamParser,
    env=lambda scratch: {"QWEN_RUNTIME_DIR": scratch_dir(scratch, "qwen")},
    reports=("tokens", "turns", "tool calls", "cost (from the price table)"),
    price_provider="qwen",
    splits_route=True,
    run_env=_run_env,
    base_url="OPENAI_BASE_URL",
    upstream=lambda inv: OPENAI,
)
