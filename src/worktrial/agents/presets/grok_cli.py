"""Grok CLI (``@vibe-kit/grok-cli``): ``grok --prompt PROMPT``, the conversation as JSON lines.

Headless, it prints each message of the conversation as an OpenAI-style object on a line of its own (``user``,
``assistant`` with ``tool_calls``, ``tool``) and exits 0, also when the model call failed: then the last assistant
message reads ``Sorry, I encountered an error: 401 ...`` (the OpenAI SDK's error text, status first), or, when the
CLI itself failed, ``Error: ...`` with exit 1. It reports no usage and never says whether it solved the task, so,
as for aider, finishing normally after a model reply claims success and the verify commands decide; the usage is
the model gateway's count (the CLI is routed whenever it has a key: ``GROK_API_KEY``, or ``apiKey`` in
``~/.grok/user-settings.json``). Its endpoint is ``GROK_BASE_URL`` (or the settings' ``baseURL``), an
OpenAI-compatible Chat Completions API, xAI's by default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, UserSetup, dig, text_of
from worktrial.agents.presets.parsing import ExitInfo, JsonLinesParser, Verdict, as_dict, as_list, as_str, bump
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import Configured, Upstream
from worktrial.model.records import Usage

XAI = Upstream("openai", ("GROK_API_KEY",), "https://api.x.ai/v1", ("GROK_BASE_URL",), "xai")
"""xAI's API as Grok CLI calls it: Chat Completions, ``GROK_API_KEY``, ``GROK_BASE_URL``; priced as ``xai/``."""
FAILED = re.compile(r"^(?:Sorry, I encountered an error|Error):\s*(?:(\d{3})\b)?\s*(.*)", re.S)
KEY_HINT = "check GROK_API_KEY (or apiKey in ~/.grok/user-settings.json)"


class GrokMessagesParser(JsonLinesParser):
    """The conversation Grok CLI prints: tool calls are the assistant messages' ``tool_calls``, turns the assistant
    messages; a last assistant message that reports an error is the run's failure."""

    label = "grok-cli"
    key_hint = KEY_HINT

    def __init__(self) -> None:
        super().__init__()
        self.replies = 0
        self.tool_counts: dict[str, int] = {}
        self.last: str | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("role") != "assistant":
            return
        self.replies += 1
        self.last = (as_str(event.get("content")) or "")[:2000]
        for call in as_list(event.get("tool_calls")):
            bump(self.tool_counts, as_str(as_dict(as_dict(call).get("function")).get("name")) or "unknown")

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), notes=["grok-cli reports no usage of its own"])
        failed = FAILED.match(self.last or "")
        if failed is not None and not exit_info.timed_out:
            status = int(failed.group(1)) if failed.group(1) else None
            category = classify(status, failed.group(2))
            if category is not None:
                found = failure(self.label, category, status, failed.group(2), self.key_hint)
                bump(usage.error_counts, category)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
            return Verdict(
                claimed=False, usage=usage, reason=f"{self.label} reported an error: {failed.group(2)[:200]}"
            )
        if self.replies == 0:
            return self.fallback(exit_info, usage, "a model reply")
        usage.turns = self.replies
        if exit_info.returncode not in (0, None):
            return self.fallback(exit_info, usage, "a model reply")
        return Verdict(claimed=None if exit_info.timed_out else True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["--max-tool-rounds", str(inv.settings["max_turns"])] if "max_turns" in inv.settings else []
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--prompt", inv.prompt]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    return {"GROK_BASE_URL": inv.base_url} if inv.base_url else {}


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """``~/.grok/user-settings.json``: ``apiKey``, ``baseURL`` and ``defaultModel`` (what ``grok --api-key`` saves)."""
    del env, provider
    settings = setup.file(".grok/user-settings.json")
    data = settings.data() if settings is not None else None
    base, key = text_of(dig(data, "baseURL")), text_of(dig(data, "apiKey"))
    shown = settings.shown if settings is not None else None
    return Configured(
        base_url=base,
        base_from=shown if base else None,
        key=key,
        key_from=shown if key else None,
        model=model or text_of(dig(data, "defaultModel")),
    )


SPEC = PresetSpec(
    name="grok-cli",
    binary="grok",
    summary="Grok CLI (grok --prompt, the conversation as JSON lines; finishing claims success)",
    install="npm install -g @vibe-kit/grok-cli",
    argv=_argv,
    parser=GrokMessagesParser,
    # Grok CLI keeps its settings in ~/.grok (and writes there when given --api-key or --base-url): the attempt's
    # own home holds the copy.
    env=lambda scratch: {"HOME": scratch_dir(scratch, "grok", "home")},
    reports=("tool calls", "turns (model replies)"),
    carries=(ConfigCarry("HOME", "grok/home", "", (".grok/user-settings.json",)),),
    run_env=_run_env,
    base_url="GROK_BASE_URL",
    budgets=("max_turns",),
    upstream=lambda inv: XAI,
    setup=_setup,
    price_provider="xai",
)
