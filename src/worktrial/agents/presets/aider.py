"""Aider: ``aider --yes-always --no-auto-commits --message PROMPT --analytics-log FILE``.

Aider has no machine-readable stdout; its analytics log (JSON lines written locally, whether or not
analytics are sent anywhere) has one ``message_send`` event per model call with ``prompt_tokens``,
``completion_tokens`` and ``cost``. Aider never says whether it solved the task and its exit status
only reports crashes, so finishing normally counts as a claim of success and verification decides.
``--no-analytics`` keeps ``--yes-always`` from opting the user into sending analytics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.parsing import (
    ExitInfo,
    Verdict,
    add_cost,
    as_cost,
    as_dict,
    as_int,
    exit_reason,
    iter_json_lines,
)
from worktrial.model.records import Tokens, Usage

ANALYTICS_LOG = "aider-analytics.jsonl"
"""File name under the scratch directory (custom agents using the aider parser write it there too)."""


def read_analytics(path: Path, notes: list[str]) -> tuple[Usage, int]:
    """Usage summed over ``message_send`` events, and how many there were."""
    usage = Usage()
    sends = 0
    total_cost: float | None = None
    for event in iter_json_lines(path, "aider", notes):
        if event.get("event") != "message_send":
            continue
        sends += 1
        props: dict[str, Any] = as_dict(event.get("properties"))
        usage.tokens = usage.tokens.add(
            Tokens(input=as_int(props.get("prompt_tokens")), output=as_int(props.get("completion_tokens")))
        )
        usage.cost_usd = add_cost(usage.cost_usd, as_cost(props.get("cost")))
        running = as_cost(props.get("total_cost"))
        if running is not None:
            total_cost = running if total_cost is None else max(total_cost, running)
    if usage.cost_usd is None:
        usage.cost_usd = total_cost
    usage.turns = sends if sends else None
    return usage, sends


class AiderParser:
    """Ignores stdout (aider's is for humans) and reads the analytics log at exit."""

    label = "aider"

    def feed(self, chunk: bytes) -> None:
        return None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        notes: list[str] = []
        try:
            usage, sends = read_analytics(exit_info.scratch / ANALYTICS_LOG, notes)
        except Exception as exc:  # never crash the attempt over a log file
            usage, sends = Usage(), 0
            notes.append(f"aider: analytics log unreadable ({type(exc).__name__}); usage unknown")
        if sends == 0:
            notes.append("aider: no message_send events in the analytics log; usage unknown")
        usage.notes.extend(notes)
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if exit_info.returncode == 0:
            return Verdict(claimed=True, usage=usage)
        return Verdict(claimed=False, usage=usage, reason=exit_reason("aider", exit_info))


def _argv(inv: Invocation) -> list[str]:
    args = [
        "--yes-always",
        "--no-auto-commits",
        "--no-analytics",
        "--analytics-log",
        str(inv.scratch / ANALYTICS_LOG),
        "--no-check-update",
        "--no-show-release-notes",
        "--no-gitignore",
        "--no-pretty",
        "--chat-history-file",
        scratch_dir(inv.scratch, "aider", "chat-history.md"),
        "--input-history-file",
        scratch_dir(inv.scratch, "aider", "input-history"),
    ]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--message", inv.prompt]


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="file", flag="--message-file"),  # prompts over 64 KiB (agents.prompt)
    name="aider",
    binary="aider",
    summary="Aider (aider --message, usage from its analytics log; finishing claims success)",
    install="python -m pip install aider-install && aider-install",
    argv=_argv,
    parser=AiderParser,
    # Aider keeps its state (~/.aider: caches, analytics id, model metadata) under the home directory.
    env=lambda scratch: {"HOME": scratch_dir(scratch, "aider", "home")},
    reports=("tokens", "cost", "turns"),
)
