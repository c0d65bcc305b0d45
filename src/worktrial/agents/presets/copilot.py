"""GitHub Copilot CLI: ``copilot -p PROMPT --allow-all --no-ask-user --output-format json``, one JSON event per line.

Events are ``{"type", "data", ...}``: ``assistant.message`` (one per model reply; ``data.toolRequests`` are its tool
calls and ``data.model`` the model), ``session.error`` (``data.statusCode`` and ``data.errorType`` when a provider
failed, after the CLI's own retries) and a final ``result`` with ``exitCode``. The stream carries no tokens:
``--usage-output-file`` makes the CLI write its usage (``modelMetrics.<model>.usage{inputTokens, outputTokens,
cacheReadTokens, cacheWriteTokens, reasoningTokens}`` and ``requests.count``) into the attempt's scratch directory
at exit, which is read instead. Its ``inputTokens`` count the cached part and ``outputTokens`` the reasoning part
(checked against a scripted Chat Completions server). Copilot's own cost is in premium requests, not dollars, so the
cost stays unknown. With ``--base-url`` the CLI goes through the model gateway, whose counts and cost of every call
are recorded instead (this report is then the cross-check).

``--base-url`` is Copilot's "bring your own key" mode: ``COPILOT_PROVIDER_BASE_URL`` (GitHub login not needed),
``COPILOT_PROVIDER_TYPE`` from the route (``anthropic/...`` speaks Anthropic Messages, anything else OpenAI Chat
Completions), and the route's provider key (``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``) as
``COPILOT_PROVIDER_API_KEY`` unless that is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, byok_upstream, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry
from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_int,
    as_list,
    as_str,
    bump,
    exit_reason,
    read_json_file,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import Upstream
from worktrial.model.records import Tokens, Usage

USAGE_FILE = "copilot-usage.json"
KEY_HINT = "check COPILOT_PROVIDER_API_KEY (or OPENAI_API_KEY / ANTHROPIC_API_KEY with --base-url), or copilot login"


def usage_file_tokens(document: dict[str, Any]) -> tuple[Tokens, int | None]:
    """Tokens summed over the usage file's models, and its model requests (None when it lists none)."""
    tokens = Tokens()
    requests: int | None = None
    for metrics in as_dict(document.get("modelMetrics")).values():
        metrics = as_dict(metrics)
        usage = as_dict(metrics.get("usage"))
        tokens = tokens.add(
            Tokens(
                input=as_int(usage.get("inputTokens")),
                output=as_int(usage.get("outputTokens")),
                cached_input=as_int(usage.get("cacheReadTokens")),
                cache_creation=as_int(usage.get("cacheWriteTokens")),
                reasoning=as_int(usage.get("reasoningTokens")),
            )
        )
        count = as_int(as_dict(metrics.get("requests")).get("count"))
        if count is not None:
            requests = (requests or 0) + count
    return tokens, requests


class CopilotParser(JsonLinesParser):
    label = "copilot"

    def __init__(self) -> None:
        super().__init__()
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.model: str | None = None
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        data = as_dict(event.get("data"))
        if kind == "assistant.message":
            self.model = as_str(data.get("model")) or self.model
            for request in as_list(data.get("toolRequests")):
                bump(self.tool_counts, as_str(as_dict(request).get("name")) or "unknown")
        elif kind == "tool.execution_complete" and data.get("success") is False:
            bump(self.error_counts, "tool_error")
        elif kind == "session.error":
            self.error = self.error or data
            bump(self.error_counts, as_str(data.get("errorType")) or "session_error")
        elif kind == "result":
            self.result = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), error_counts=dict(self.error_counts))
        document = read_json_file(exit_info.scratch / USAGE_FILE, self.label, usage.notes)
        if isinstance(document, dict):
            usage.tokens, usage.turns = usage_file_tokens(document)
        if self.error is not None and not exit_info.timed_out:
            status, message = as_int(self.error.get("statusCode")), as_str(self.error.get("message"))
            category = classify(status, message)
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, message, KEY_HINT)
                return Verdict(
                    claimed=None,
                    usage=usage,
                    reason=found.message,
                    error_category=category,
                    fatal=found.fatal,
                    model=self.model,
                )
            kind = as_str(self.error.get("errorType")) or "an error"
            return Verdict(claimed=False, usage=usage, reason=f"copilot reported {kind}", model=self.model)
        if self.result is None:
            usage.notes.append("copilot: no result event")
            verdict = self.fallback(exit_info, usage, "a result event")
            verdict.model = self.model
            return verdict
        code = as_int(self.result.get("exitCode"))
        if code not in (0, None) or exit_info.returncode not in (0, None):
            reason = f"copilot result exitCode {code}" if code else exit_reason("copilot", exit_info)
            return Verdict(claimed=False, usage=usage, reason=reason, model=self.model)
        return Verdict(claimed=True, usage=usage, model=self.model)


def _argv(inv: Invocation) -> list[str]:
    args = ["--allow-all", "--no-ask-user", "--output-format", "json", "--no-auto-update", "--no-color"]
    args += ["--usage-output-file", str(inv.scratch / USAGE_FILE)]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "-p", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {"COPILOT_HOME": scratch_dir(scratch, "copilot"), "COPILOT_AUTO_UPDATE": "false"}


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    if not inv.base_url:
        return {}
    kind = "anthropic" if inv.provider == "anthropic" else "openai"
    mapped = {"COPILOT_PROVIDER_BASE_URL": inv.base_url, "COPILOT_PROVIDER_TYPE": kind}
    key = env.get("ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY")
    if key and not env.get("COPILOT_PROVIDER_API_KEY"):
        mapped["COPILOT_PROVIDER_API_KEY"] = key
    return mapped


def _upstream(inv: Invocation) -> Upstream | None:
    """BYOK at ``--base-url``; ``COPILOT_PROVIDER_API_KEY`` first, as the CLI reads it."""
    upstream = byok_upstream(inv)
    if upstream is None:
        return None
    return Upstream(upstream.route, ("COPILOT_PROVIDER_API_KEY", *upstream.keys), upstream.default_base)


SPEC = PresetSpec(
    name="copilot",
    binary="copilot",
    summary="GitHub Copilot CLI (copilot -p --allow-all --output-format json)",
    install="npm install -g @github/copilot",
    argv=_argv,
    parser=CopilotParser,
    env=_env,
    reports=("tokens", "turns (model calls)", "tool calls"),
    carries=(ConfigCarry("COPILOT_HOME", "copilot", ".copilot", ("settings.json", "config.json", "mcp-config.json")),),
    splits_route=True,
    run_env=_run_env,
    base_url="COPILOT_PROVIDER_BASE_URL (BYOK), COPILOT_PROVIDER_TYPE from the route",
    base_url_needs_model=True,
    upstream=_upstream,
)
