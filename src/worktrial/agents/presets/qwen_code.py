"""Qwen Code: ``qwen --yolo --output-format stream-json -p PROMPT``.

Its stream is Claude Code's event shape (``system/init``, ``assistant``, ``result``), with two differences the
parser handles: usage follows OpenAI's convention (``input_tokens`` already counts the cached part), and a provider
failure arrives as ``subtype: success`` with result text ``[API Error: 401 ...]``. ``QWEN_HOME`` and
``QWEN_RUNTIME_DIR`` in the attempt's scratch directory keep settings, sessions and per-worktree state per attempt:
the user's ``~/.qwen/settings.json`` and ``~/.qwen/.env`` (its README's setup: ``modelProviders``, ``env``,
``security.auth.selectedType``, ``model.name``) are carried in, never changed where they are (Qwen Code rewrites its
settings file when it migrates it). Qwen Code reports no cost: it is priced from the price table when the model is
known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, UserSetup, dig, text_of
from worktrial.agents.presets.claude_code import USAGE_FIELDS, ClaudeStreamParser
from worktrial.agents.presets.parsing import ExitInfo, Verdict, as_dict, as_str, tokens_from
from worktrial.agents.presets.provider_errors import classify
from worktrial.agents.presets.routing import BY_ROUTE, OPENAI, Configured
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
        # The endpoint's protocol; without an auth type (settings or flag) headless Qwen Code refuses to run.
        args += ["--auth-type", inv.upstream.route if inv.upstream is not None else "openai"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "-p", inv.prompt]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    if not inv.base_url:
        return {}
    return {(inv.upstream or OPENAI).base_vars[0]: inv.base_url}


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """What ``~/.qwen/settings.json`` configures: the protocol (``security.auth.selectedType``), the model
    (``--model``, ``OPENAI_MODEL``, ``model.name``) and the ``modelProviders`` entry that serves it (its
    ``baseUrl`` and the ``envKey`` variable that holds its key, often in the file's ``env``)."""
    settings = setup.file("settings.json")
    data = settings.data() if settings is not None else None
    selected = text_of(dig(data, "security", "auth", "selectedType")) or provider
    upstream = BY_ROUTE.get(selected or "")
    name = model or env.get("OPENAI_MODEL") or text_of(dig(data, "model", "name"))
    entries = dig(data, "modelProviders", selected or "openai")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    entry = next((e for e in entries if e.get("id") == name), entries[0] if entries and name is None else None)
    shown = settings.shown if settings is not None else None
    if entry is not None:
        base = text_of(entry.get("baseUrl"))
        return Configured(
            base_url=base,
            base_from=shown if base else None,
            key_var=text_of(entry.get("envKey")),
            model=text_of(entry.get("id")),
            upstream=upstream,
        )
    base = text_of(dig(data, "security", "auth", "baseUrl"))
    key = text_of(dig(data, "security", "auth", "apiKey"))
    return Configured(
        base_url=base,
        base_from=shown if base else None,
        key=key,
        key_from=shown if key else None,
        model=name,
        upstream=upstream,
    )


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin", flag="-p"),  # prompts over 64 KiB (agents.prompt)
    name="qwen-code",
    binary="qwen",
    summary="Qwen Code (qwen --yolo --output-format stream-json)",
    install="npm install -g @qwen-code/qwen-code",
    argv=_argv,
    parser=QwenStreamParser,
    env=lambda scratch: {
        "QWEN_HOME": scratch_dir(scratch, "qwen", "home"),
        "QWEN_RUNTIME_DIR": scratch_dir(scratch, "qwen", "runtime"),
    },
    carries=(
        ConfigCarry(
            "QWEN_HOME",
            "qwen/home",
            ".qwen",
            ("settings.json", ".env"),
            logins=("oauth_creds.json",),
            env_files=(".env", "settings.json"),
        ),
    ),
    reports=("tokens", "turns", "tool calls", "cost (from the price table)"),
    price_provider="qwen",
    splits_route=True,
    run_env=_run_env,
    base_url="OPENAI_BASE_URL",
    upstream=lambda inv: OPENAI,
    setup=_setup,
)
