"""OpenAI Codex CLI: ``codex exec --json``, one JSON event per line.

``turn.completed`` carries ``usage{input_tokens, cached_input_tokens, cache_write_input_tokens,
output_tokens, reasoning_output_tokens}`` (input includes the cached part, as OpenAI reports it);
``item.completed`` items are the tool calls; ``turn.failed`` means the run failed (``error`` events are
reconnect notices it may recover from). Codex reports no cost: with ``--model`` the attempt is priced from the price
table (``openai/<model>``, or the route as given), otherwise its cost stays unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, UserSetup, dig, text_of
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_str,
    bump,
    exit_reason,
    iter_json_lines,
    tokens_from,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import OPENAI, Configured, Upstream
from worktrial.model.records import Tokens, Usage

USAGE_FIELDS = {
    "input": "input_tokens",
    "cached_input": "cached_input_tokens",
    "cache_creation": "cache_write_input_tokens",
    "output": "output_tokens",
    "reasoning": "reasoning_output_tokens",
}
TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
STATUS = re.compile(r"(?:unexpected status|status:?|HTTP)\s*(\d{3})\b", re.I)
KEY_HINT = "check OPENAI_API_KEY / CODEX_API_KEY or the provider's env_key in ~/.codex/config.toml"


class ThreadEventsParser(JsonLinesParser):
    """The ``thread.*`` / ``turn.*`` / ``item.*`` event family (Codex; VT Code speaks a superset).

    Only ``turn.failed`` is a claim of failure. ``error`` events are notices: Codex prints one per reconnect
    ("Reconnecting... 2/5", including its fallback from WebSockets to HTTPS) and still completes the turn;
    ``item.completed`` items of type ``error`` are warnings ("Model metadata ... not found"). Both are
    counted in ``error_counts``; the last error text explains a ``turn.failed`` that carries none.
    """

    label = "codex"
    key_hint = KEY_HINT

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Tokens()
        self.turns = 0
        self.failed: str | None = None
        self.failure_text: str | None = None
        self.last_error: str | None = None
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "turn.completed":
            self.turns += 1
            self.tokens = self.tokens.add(tokens_from(as_dict(event.get("usage")), USAGE_FIELDS))
        elif kind == "turn.failed":
            self.turns += 1
            self.failed = self.failed or "turn.failed"
            self.failure_text = as_str(as_dict(event.get("error")).get("message")) or self.last_error
            bump(self.error_counts, "turn_failed")
            if event.get("usage") is not None:
                self.tokens = self.tokens.add(tokens_from(as_dict(event.get("usage")), USAGE_FIELDS))
        elif kind == "error":
            message = as_str(event.get("message")) or ""
            bump(self.error_counts, "reconnect" if message.startswith("Reconnecting") else "stream_error")
            self.last_error = message[:2000]
        elif kind == "item.completed":
            self.on_item(as_dict(event.get("item")))

    def tokens_so_far(self) -> Tokens | None:
        """The completed turns' usage, as the stream goes (the cost cap watches it)."""
        return self.tokens if self.tokens.input is not None else None

    def on_item(self, item: dict[str, Any]) -> None:
        item_type = as_str(item.get("type"))
        if item_type == "mcp_tool_call":
            bump(self.tool_counts, f"mcp:{as_str(item.get('tool')) or 'unknown'}")
        elif item_type in TOOL_ITEMS:
            bump(self.tool_counts, item_type)
        elif item_type == "error":
            bump(self.error_counts, "warning")

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(
            tokens=self.tokens,
            turns=self.turns if self.turns else None,
            tool_counts=dict(self.tool_counts),
            error_counts=dict(self.error_counts),
        )
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        crashed = exit_info.returncode not in (0, None)
        text = self.failure_text if self.failed else (self.last_error if crashed else None)
        if text:
            match = STATUS.search(text)
            status = int(match.group(1)) if match else None
            category = classify(status, text)
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, text, self.key_hint)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
        if self.failed:
            return Verdict(claimed=False, usage=usage, reason=f"{self.label} reported {self.failed}")
        if self.turns == 0:
            usage.notes.append(f"{self.label}: no completed turn; usage unknown")
            return self.fallback(exit_info, usage, "completing a turn")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason(self.label, exit_info))
        return Verdict(claimed=True, usage=usage)


class CodexParser(ThreadEventsParser):
    """Codex's events, normalised (docs/agents.md, "Usage figures") with its session rollout file.

    ``turn.completed`` counts one turn per ``codex exec`` and reports input *including* cached tokens. The
    rollout Codex writes under ``$CODEX_HOME/sessions`` has one ``token_count`` event per model call and
    ``turn_context`` with the model it used: turns are those calls, and after a timeout the last running total
    there is what the run used until the cut. Input already counts every prompt token, cached ones included.
    """

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        verdict = super().verdict(exit_info)
        calls, model, last_total = self._rollout(exit_info.scratch)
        usage = verdict.usage
        if usage.tokens.input is None and last_total is not None:
            usage.tokens = last_total
            usage.notes.append("codex: no completed turn; tokens are the last total in its session file")
        usage.turns = calls
        if calls is None:
            usage.notes.append("codex: session file not found; model calls (turns) unknown")
        verdict.model = model
        return verdict

    def _rollout(self, scratch: Path) -> tuple[int | None, str | None, Tokens | None]:
        sessions = scratch / "codex" / "sessions"
        files = sorted(sessions.rglob("rollout-*.jsonl")) if sessions.is_dir() else []
        if not files:
            return None, None, None
        calls, model, last_total = 0, None, None
        notes: list[str] = []
        for path in files[-4:]:
            for event in iter_json_lines(path, self.label, notes):
                payload = as_dict(event.get("payload"))
                if event.get("type") == "turn_context":
                    model = as_str(payload.get("model")) or model
                elif payload.get("type") == "token_count" and payload.get("info") is not None:
                    calls += 1
                    total = as_dict(as_dict(payload.get("info")).get("total_token_usage"))
                    last_total = tokens_from(total, USAGE_FIELDS)
        return calls, model, last_total


def _argv(inv: Invocation) -> list[str]:
    args = ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
    if inv.base_url:
        # Codex ignores OPENAI_BASE_URL; its built-in provider reads openai_base_url from config or -c.
        args += ["-c", f"openai_base_url={json.dumps(inv.base_url)}"]
    if inv.provider and inv.provider != "openai":
        args += ["-c", f"model_provider={json.dumps(inv.provider)}"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--", inv.prompt]


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """What ``~/.codex`` configures: the provider (``model_provider``, or the route's) and its endpoint
    (``openai_base_url`` for the built-in one, ``base_url`` and ``env_key`` of a ``[model_providers.X]``), the
    model, and the API key ``codex login --with-api-key`` keeps in ``auth.json`` (a ChatGPT login there is none)."""
    del env
    config = setup.file("config.toml")
    data = config.data() if config is not None else None
    auth = setup.file("auth.json")
    key = text_of(dig(auth.data(), "OPENAI_API_KEY")) if auth is not None else None
    chosen = provider or text_of(dig(data, "model_provider")) or "openai"
    named = text_of(dig(data, "model")) if model is None else model
    shown = config.shown if config is not None else None
    if chosen == "openai":
        base = text_of(dig(data, "openai_base_url"))
        return Configured(
            base_url=base,
            base_from=shown if base else None,
            key=key,
            key_from=auth.shown if key and auth is not None else None,
            model=named,
        )
    entry = dig(data, "model_providers", chosen)
    base = text_of(dig(entry, "base_url"))
    bearer = text_of(dig(entry, "experimental_bearer_token"))
    return Configured(
        base_url=base,
        base_from=shown if base else None,
        key=bearer,
        key_from=shown if bearer else None,
        key_var=text_of(dig(entry, "env_key")),
        model=named,
    )


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    # Codex 0.171 never sends OPENAI_API_KEY (only CODEX_API_KEY or a provider's env_key): map it.
    if env.get("OPENAI_API_KEY") and not env.get("CODEX_API_KEY"):
        return {"CODEX_API_KEY": env["OPENAI_API_KEY"]}
    return {}


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin", placeholder="-"),  # prompts over 64 KiB (agents.prompt)
    name="codex",
    binary="codex",
    summary="OpenAI Codex CLI (codex exec --json)",
    install="npm install -g @openai/codex",
    argv=_argv,
    parser=CodexParser,
    env=lambda scratch: {"CODEX_HOME": scratch_dir(scratch, "codex")},
    reports=("tokens", "cost (from the price table)", "turns", "tool calls"),
    price_provider="openai",
    carries=(ConfigCarry("CODEX_HOME", "codex", ".codex", ("config.toml",), logins=("auth.json",)),),
    splits_route=True,
    run_env=_run_env,
    base_url="-c openai_base_url=URL",
    upstream=lambda inv: Upstream(
        "openai", ("CODEX_API_KEY", "OPENAI_API_KEY"), OPENAI.default_base, ("OPENAI_BASE_URL",)
    ),
    setup=_setup,
)
