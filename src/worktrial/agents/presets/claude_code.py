"""Claude Code: ``claude -p --output-format stream-json --verbose``, prompt on stdin.

The final ``result`` event carries ``subtype``, ``is_error``, ``num_turns``, ``total_cost_usd``, ``usage``
(main loop only) and ``modelUsage`` (every call, per model); tool calls are the ``tool_use`` blocks of
assistant messages. ``is_error: true`` with ``api_error_status`` is a provider failure (a 401 after the
CLI's ``system/api_retry`` events, a 404 for an unknown model), not the agent's claim; ``is_error`` without
it (``error_max_turns``, ``error_during_execution``) is a claimed failure even on exit 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, is_root, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_cost,
    as_dict,
    as_int,
    as_list,
    as_str,
    bump,
    tokens_from,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import ANTHROPIC
from worktrial.model.records import ErrorCategory, Tokens, Usage

USAGE_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cached_input": "cache_read_input_tokens",
    "cache_creation": "cache_creation_input_tokens",
}
MODEL_USAGE_FIELDS = {
    "input": "inputTokens",
    "output": "outputTokens",
    "cached_input": "cacheReadInputTokens",
    "cache_creation": "cacheCreationInputTokens",
}
KEY_HINT = "check ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN or the login in ~/.claude (copied into each attempt)"


def all_prompt_tokens(tokens: Tokens) -> Tokens:
    """Anthropic's ``input_tokens`` exclude cache reads and writes; worktrial's ``input`` counts every prompt token."""
    if tokens.input is None:
        return tokens
    extra = (tokens.cached_input or 0) + (tokens.cache_creation or 0)
    return tokens.model_copy(update={"input": tokens.input + extra})


class ClaudeStreamParser(JsonLinesParser):
    """Claude Code's ``stream-json`` events (also spoken by Cursor's CLI and Qwen Code, which reuse the shape).

    Normalised usage (docs/agents.md, "Usage figures"): tokens are the sum over every model call the CLI made,
    side calls included (``modelUsage``, the same calls ``total_cost_usd`` prices), input counts every prompt
    token (Anthropic's excludes the cache reads and writes, which are added back; they stay in their own fields);
    turns are the main loop's model calls (``num_turns``).
    """

    label = "claude-code"
    key_hint = KEY_HINT

    def __init__(self) -> None:
        super().__init__()
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}
        self.seen_tool_ids: set[str] = set()
        self.result: dict[str, Any] | None = None
        self.model: str | None = None
        self.message_usage: dict[str, Tokens] = {}
        self.last_retry: dict[str, Any] | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "assistant":
            message = as_dict(event.get("message"))
            self._note_usage(message)
            for block in as_list(message.get("content")):
                block = as_dict(block)
                if block.get("type") != "tool_use":
                    continue
                tool_id = as_str(block.get("id"))
                if tool_id is not None:
                    # Partial-message streaming can repeat a block; count each tool call once.
                    if tool_id in self.seen_tool_ids or len(self.seen_tool_ids) > 100_000:
                        continue
                    self.seen_tool_ids.add(tool_id)
                bump(self.tool_counts, as_str(block.get("name")) or "unknown")
        elif kind == "system":
            subtype = event.get("subtype")
            if subtype == "init":
                self.model = as_str(event.get("model")) or self.model
            elif subtype == "api_retry":
                # A retry the CLI may still recover from: counted, never a claim by itself.
                bump(self.error_counts, "api_retry")
                self.last_retry = event
        elif kind == "result":
            self.result = event

    def _note_usage(self, message: dict[str, Any]) -> None:
        """Keep each real API message's latest usage, so a run cut by the timeout still shows what it used."""
        message_id = as_str(message.get("id"))
        if message_id is None or message.get("model") == "<synthetic>" or len(self.message_usage) > 100_000:
            return
        self.message_usage[message_id] = all_prompt_tokens(tokens_from(as_dict(message.get("usage")), USAGE_FIELDS))

    def tokens_so_far(self) -> Tokens | None:
        """Every model call's latest usage, as the stream goes (the cost cap watches it, in the reader thread that
        feeds this parser)."""
        return self._usage_so_far() if self.message_usage else None

    def _usage_so_far(self) -> Tokens:
        total = Tokens()
        for tokens in self.message_usage.values():
            total = total.add(tokens)
        return total

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), error_counts=dict(self.error_counts))
        result = self.result
        if result is None:
            if self.message_usage:
                usage.tokens = self._usage_so_far()
                usage.turns = len(self.message_usage)
                usage.notes.append(f"{self.label}: no result event; tokens summed from the messages printed so far")
            else:
                usage.notes.append(f"{self.label}: no result event; tokens, cost and turns unknown")
            retry = self.last_retry
            if retry is not None and not exit_info.timed_out and exit_info.returncode not in (0, None):
                status = as_int(retry.get("error_status"))
                category = classify(status, as_str(retry.get("error")))
                if category is not None:
                    return self._provider_verdict(usage, category, status, as_str(retry.get("error")))
            verdict = self.fallback(exit_info, usage, "a result event")
            verdict.model = self.model
            return verdict
        usage.tokens = self._tokens(result)
        usage.cost_usd = as_cost(result.get("total_cost_usd"))
        usage.turns = as_int(result.get("num_turns"))
        subtype = as_str(result.get("subtype")) or "unknown"
        is_error = result.get("is_error") is True
        status = as_int(result.get("api_error_status"))
        if is_error and status is not None:
            category = classify(status, as_str(result.get("result")))
            if category is not None:
                return self._provider_verdict(usage, category, status, as_str(result.get("result")))
        if subtype != "success":
            bump(usage.error_counts, subtype)
        if is_error or subtype != "success":
            why = f"result {subtype}" + (" with is_error" if is_error else "")
            return Verdict(claimed=False, usage=usage, reason=why, model=self.model)
        return Verdict(claimed=True, usage=usage, model=self.model)

    def _tokens(self, result: dict[str, Any]) -> Tokens:
        per_model = as_dict(result.get("modelUsage"))
        if per_model:
            total = Tokens()
            for figures in per_model.values():
                total = total.add(tokens_from(as_dict(figures), MODEL_USAGE_FIELDS))
            return all_prompt_tokens(total)
        return all_prompt_tokens(tokens_from(as_dict(result.get("usage")), USAGE_FIELDS))

    def _provider_verdict(
        self, usage: Usage, category: ErrorCategory, status: int | None, detail: str | None
    ) -> Verdict:
        bump(usage.error_counts, category)
        found = failure(self.label, category, status, detail, self.key_hint)
        return Verdict(
            claimed=None,
            usage=usage,
            reason=found.message,
            error_category=category,
            fatal=found.fatal,
            model=self.model,
        )


def _argv(inv: Invocation) -> list[str]:
    args = ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"]
    if inv.model:
        args += ["--model", inv.model]
    if "max_turns" in inv.settings:
        args += ["--max-turns", str(inv.settings["max_turns"])]
    return [*args, *inv.extra_args]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": inv.base_url} if inv.base_url else {}


def _check(env: Mapping[str, str]) -> str | None:
    # Claude Code exits at once when bypassPermissions is requested by root outside a declared sandbox.
    if is_root() and env.get("IS_SANDBOX") != "1" and env.get("CLAUDE_CODE_BUBBLEWRAP") != "1":
        return (
            "Claude Code refuses --permission-mode bypassPermissions when run as root; if this machine is a "
            'disposable sandbox, set env = { IS_SANDBOX = "1" } under [agents.claude-code] in worktrial.toml'
        )
    return None


SPEC = PresetSpec(
    name="claude-code",
    binary="claude",
    summary="Anthropic Claude Code (claude -p, stream-json)",
    install="npm install -g @anthropic-ai/claude-code",
    argv=_argv,
    parser=ClaudeStreamParser,
    env=lambda scratch: {"CLAUDE_CONFIG_DIR": scratch_dir(scratch, "claude")},
    stdin_prompt=True,
    reports=("tokens", "cost", "turns", "tool calls"),
    check=_check,
    # settings.json's env (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY...) is routed and rewritten in the copy; the
    # subscription login in .credentials.json stays out (carry_login takes it in when nothing is routed).
    carries=(
        ConfigCarry(
            "CLAUDE_CONFIG_DIR",
            "claude",
            ".claude",
            ("settings.json",),
            logins=(".credentials.json",),
            env_files=("settings.json",),
        ),
    ),
    settings_env_wins=True,
    splits_route=True,
    run_env=_run_env,
    base_url="ANTHROPIC_BASE_URL",
    upstream=lambda inv: ANTHROPIC,
    budgets=("max_turns",),
    price_provider="anthropic",
)
