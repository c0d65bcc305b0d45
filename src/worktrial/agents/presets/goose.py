"""Goose: ``goose run -t PROMPT --output-format stream-json``.

Events are ``message`` (a conversation message whose content items include ``toolRequest``),
``notification``, ``error`` and a final ``complete``. ``complete`` always has ``total_tokens``; current
releases add ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_write_input_tokens`` and ``cost_usd`` when known. Older releases report only the total, which
has no place in the usage record, so the split stays unknown (noted in the trace).
"""

from __future__ import annotations

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


def _argv(inv: Invocation) -> list[str]:
    args = ["run", "--output-format", "stream-json"]
    if inv.model:
        provider, model = split_route(inv.model)
        if provider:
            args += ["--provider", provider]
        args += ["--model", model or inv.model]
    return [*args, *inv.extra_args, "-t", inv.prompt]


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
)
