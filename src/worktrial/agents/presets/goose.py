"""Goose: ``goose run -t PROMPT --output-format stream-json``.

Events are ``message`` (a conversation message whose content items include ``toolRequest``),
``notification``, ``error`` and a final ``complete``. ``complete`` always has ``total_tokens``; current
releases add ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_write_input_tokens`` and ``cost_usd`` when known. Older releases report only the total, which
has no place in the usage record, so the split stays unknown (noted in the trace).

Model gateway: goose's ``openai`` provider reads ``OPENAI_HOST`` and ``OPENAI_BASE_PATH`` (the request path
joined onto the host) and its ``anthropic`` provider ``ANTHROPIC_HOST`` (it posts to ``v1/messages``), each with
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` (goose's provider docs and ``crates/goose/src/providers/openai.rs``,
``anthropic.rs``). So an ``openai/NAME`` or ``anthropic/NAME`` route is routed through the gateway; ``--base-url``
is an OpenAI-compatible base (with ``/v1``) run as goose's ``openai`` provider, or the Anthropic API's root for an
``anthropic/NAME`` route. Without ``--base-url`` other routes (goose's other providers, a bare name run with the
provider of the user's ``GOOSE_PROVIDER``) are not routed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
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
    exit_reason,
    tokens_from,
)
from worktrial.agents.presets.routing import ANTHROPIC, OPENAI, Upstream
from worktrial.model.envelope import split_route
from worktrial.model.records import Usage

COMPLETE_FIELDS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cached_input": "cache_read_input_tokens",
    "cache_creation": "cache_write_input_tokens",
}


class GooseParser(JsonLinesParser):
    label = "goose"

    def __init__(self) -> None:
        super().__init__()
        self.complete: dict[str, Any] | None = None
        self.tool_counts: dict[str, int] = {}
        self.seen_requests: set[str] = set()
        self.error = False
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message":
            for item in as_list(as_dict(event.get("message")).get("content")):
                item = as_dict(item)
                if item.get("type") != "toolRequest":
                    continue
                request_id = as_str(item.get("id"))
                if request_id is not None:
                    # Streaming providers resend a message as it grows; count each request once.
                    if request_id in self.seen_requests or len(self.seen_requests) > 100_000:
                        continue
                    self.seen_requests.add(request_id)
                call = as_dict(item.get("toolCall"))
                name = as_str(as_dict(call.get("value")).get("name")) or as_str(call.get("name")) or "unknown"
                bump(self.tool_counts, name)
        elif kind == "error":
            self.error = True
            bump(self.error_counts, "stream_error")
        elif kind == "complete":
            self.complete = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), error_counts=dict(self.error_counts))
        if self.complete is not None:
            usage.tokens = tokens_from(self.complete, COMPLETE_FIELDS)
            usage.cost_usd = as_cost(self.complete.get("cost_usd"))
            if usage.tokens.total() is None and as_int(self.complete.get("total_tokens")) is not None:
                usage.notes.append("goose: reported only total_tokens; input/output split unknown")
        if self.error and not exit_info.timed_out:
            return Verdict(claimed=False, usage=usage, reason="goose reported an error event")
        if self.complete is None:
            usage.notes.append("goose: no complete event; usage unknown")
            return self.fallback(exit_info, usage, "a complete event")
        if exit_info.returncode not in (0, None):
            return Verdict(claimed=False, usage=usage, reason=exit_reason("goose", exit_info))
        return Verdict(claimed=True, usage=usage)


def _provider(inv: Invocation) -> str | None:
    """The goose provider the invocation names; with ``--base-url`` every route but ``anthropic/`` runs on
    ``openai`` (the URL is an OpenAI-compatible endpoint)."""
    provider = split_route(inv.model)[0] if inv.model else None
    if inv.base_url and provider != "anthropic":
        return "openai"
    return provider


def _argv(inv: Invocation) -> list[str]:
    args = ["run", "--output-format", "stream-json"]
    if inv.model:
        model = split_route(inv.model)[1]
        provider = _provider(inv)
        if provider:
            args += ["--provider", provider]
        args += ["--model", model or inv.model]
    return [*args, *inv.extra_args, "-t", inv.prompt]


def _upstream(inv: Invocation) -> Upstream | None:
    provider = _provider(inv)
    if provider == "openai":
        # The gateway URL stands for the ``/v1`` base: goose is given it as host with ``chat/completions`` as path.
        return Upstream("openai", ("OPENAI_API_KEY",), OPENAI.default_base)
    if provider == "anthropic":
        return Upstream("anthropic", ("ANTHROPIC_API_KEY",), ANTHROPIC.default_base)
    return None


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    if not inv.base_url:
        return {}
    # goose joins its request path onto the host; the trailing slash keeps the host's own path in every release.
    host = inv.base_url.rstrip("/") + "/"
    if _provider(inv) == "anthropic":
        return {"ANTHROPIC_HOST": host}
    return {"OPENAI_HOST": host, "OPENAI_BASE_PATH": "chat/completions"}


def _env(scratch: Path) -> dict[str, str]:
    return {
        # GOOSE_PATH_ROOT relocates config, data and state; the XDG variables cover releases before it.
        "GOOSE_PATH_ROOT": scratch_dir(scratch, "goose", "root"),
        "XDG_CONFIG_HOME": scratch_dir(scratch, "goose", "config"),
        "XDG_DATA_HOME": scratch_dir(scratch, "goose", "data"),
        "XDG_STATE_HOME": scratch_dir(scratch, "goose", "state"),
        "GOOSE_MODE": "auto",
        "GOOSE_DISABLE_KEYRING": "1",
    }


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="file", flag="-i"),  # prompts over 64 KiB (agents.prompt)
    name="goose",
    binary="goose",
    summary="Goose (goose run --output-format stream-json)",
    install="brew install block-goose-cli, or download_cli.sh from the Goose installation docs",
    argv=_argv,
    parser=GooseParser,
    env=_env,
    reports=("tokens", "cost", "tool calls"),
    run_env=_run_env,
    base_url="OPENAI_HOST + OPENAI_BASE_PATH=chat/completions, or ANTHROPIC_HOST for an anthropic/ route",
    base_url_needs_model=True,
    upstream=_upstream,
)
