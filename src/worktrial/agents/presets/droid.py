"""Factory Droid: ``droid exec --skip-permissions-unsafe -o stream-json -- PROMPT``, one JSON event per line.

Events: ``system``/``init`` (with ``model``), ``message`` (user and assistant text), ``tool_call`` (``toolName``),
``tool_result`` (``isError``), ``error`` (``source: agent_loop`` with the provider's failure, e.g. ``"401 ..."``,
then ``source: cli``, ``"Exec failed"``, and exit 1) and a final ``completion`` with ``numTurns`` and
``usage{input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens}``. Its ``input_tokens``
exclude cache reads and writes (Anthropic's convention, also for a Chat Completions model: checked against a
scripted server), which are added back; ``output_tokens`` include reasoning, which is not reported apart. An unknown
``--model`` is ``Invalid model: NAME`` on stderr before any event. With ``--base-url`` the CLI goes through the model
gateway, whose counts and cost of every call are recorded instead (this report is then the cross-check).

Droid keeps its settings, sessions and logs in ``$FACTORY_HOME_OVERRIDE/.factory`` (``~/.factory`` by default),
pointed into the attempt's scratch directory. ``--base-url`` is Droid's "bring your own key" custom model, which
needs no Factory login: a runtime settings file in scratch (``--settings``, merged for this process only) declares
one ``customModels`` entry at the URL (provider ``generic-chat-completion-api``, or ``anthropic`` for an
``anthropic/NAME`` route) with ``apiKey: "${OPENAI_API_KEY}"`` (the route provider's variable, which Droid resolves
from the environment: no key is written to disk), and Droid runs it as ``-m custom:NAME``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, byok_upstream, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_int,
    as_str,
    bump,
    exit_reason,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.model.envelope import split_route
from worktrial.model.records import ErrorCategory, Tokens, Usage

SETTINGS_FILE = "droid-settings.json"
STATUS = re.compile(r"^\s*(\d{3})\b")
INVALID_MODEL = re.compile(r"^Invalid model: (.+)$", re.M)
KEY_HINT = (
    "check the provider's key variable (OPENAI_API_KEY with --base-url) or the apiKey in ~/.factory/settings.json"
)


class DroidParser(JsonLinesParser):
    label = "droid"

    def __init__(self) -> None:
        super().__init__()
        self.completion: dict[str, Any] | None = None
        self.provider_error: str | None = None
        self.errors: list[str] = []
        self.model: str | None = None
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self.model = as_str(event.get("model"))
        elif kind == "tool_call":
            bump(self.tool_counts, as_str(event.get("toolName")) or as_str(event.get("toolId")) or "unknown")
        elif kind == "tool_result" and event.get("isError") is True:
            bump(self.error_counts, "tool_error")
        elif kind == "error":
            message = as_str(event.get("message")) or ""
            bump(self.error_counts, f"{as_str(event.get('source')) or 'unknown'}_error")
            if event.get("source") == "agent_loop" and self.provider_error is None:
                self.provider_error = message
            if len(self.errors) < 16:
                self.errors.append(message)
        elif kind == "completion":
            self.completion = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        verdict = self._judge(exit_info)
        verdict.model = self.model
        return verdict

    def _judge(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), error_counts=dict(self.error_counts))
        if self.completion is not None:
            raw = as_dict(self.completion.get("usage"))
            fresh, read = as_int(raw.get("input_tokens")), as_int(raw.get("cache_read_input_tokens"))
            write = as_int(raw.get("cache_creation_input_tokens"))
            usage.tokens = Tokens(
                input=None if fresh is None else fresh + (read or 0) + (write or 0),
                output=as_int(raw.get("output_tokens")),
                cached_input=read,
                cache_creation=write,
            )
            usage.turns = as_int(self.completion.get("numTurns"))
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        unknown = INVALID_MODEL.search(exit_info.stderr_tail.decode("utf-8", "replace"))
        if self.state.events == 0 and unknown is not None:
            found = failure(self.label, ErrorCategory.MODEL_NOT_FOUND, None, unknown.group(0), KEY_HINT)
            return Verdict(claimed=None, usage=usage, reason=found.message, error_category=found.category, fatal=True)
        if self.provider_error is not None:
            match = STATUS.match(self.provider_error)
            status = int(match.group(1)) if match else None
            category = classify(status, self.provider_error)
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, self.provider_error, KEY_HINT)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
        if self.errors:
            return Verdict(claimed=False, usage=usage, reason="droid reported an error")
        if self.completion is None:
            usage.notes.append("droid: no completion event; usage unknown")
            return self.fallback(exit_info, usage, "a completion event")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))
        return Verdict(claimed=True, usage=usage)


def _name(inv: Invocation) -> str | None:
    return split_route(inv.model)[1] or inv.model if inv.model else None


def _argv(inv: Invocation) -> list[str]:
    args = ["exec", "--skip-permissions-unsafe", "-o", "stream-json"]
    if inv.base_url:
        args += ["--settings", str(inv.scratch / SETTINGS_FILE)]
    if inv.model:
        args += ["-m", f"custom:{_name(inv)}" if inv.base_url else inv.model]
    return [*args, *inv.extra_args, "--", inv.prompt]


def _prepare(inv: Invocation) -> None:
    if not inv.base_url or not inv.model:
        return
    provider = split_route(inv.model)[0]
    key_var = f"{(provider or 'openai').upper().replace('-', '_')}_API_KEY"
    model = {
        "model": _name(inv),
        "displayName": "worktrial",
        "baseUrl": inv.base_url,
        "apiKey": "${" + key_var + "}",
        "provider": "anthropic" if provider == "anthropic" else "generic-chat-completion-api",
    }
    path = inv.scratch / SETTINGS_FILE
    path.write_text(json.dumps({"customModels": [model]}, indent=2) + "\n")
    path.chmod(0o600)


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="file", flag="-f"),  # prompts over 64 KiB (agents.prompt)
    name="droid",
    binary="droid",
    summary="Factory Droid (droid exec --skip-permissions-unsafe -o stream-json)",
    install="npm install -g @factory/cli",
    argv=_argv,
    parser=DroidParser,
    env=lambda scratch: {"FACTORY_HOME_OVERRIDE": scratch_dir(scratch, "droid")},
    reports=("tokens", "turns", "tool calls"),
    carries=(ConfigCarry("FACTORY_HOME_OVERRIDE", "droid", "", (".factory/settings.json", ".factory/config.json")),),
    base_url="a BYOK custom model at the URL (--settings in the attempt's scratch directory)",
    base_url_needs_model=True,
    prepare=_prepare,
    upstream=byok_upstream,
)
