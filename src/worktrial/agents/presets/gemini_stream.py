"""Gemini CLI's ``--output-format stream-json``: one JSON event per line, and its session file.

Events (0.61): ``init{session_id, model}``, ``message``, ``tool_use{tool_name}``, ``tool_result``, ``error`` and a
final ``result{status: success|error, error{type, message}, stats}``. The ``result`` comes even when the run fails
(with the provider's error in ``error.message``, e.g. ``[API Error: {"error":{"code":401,...}}]``), which the
single JSON document of ``--output-format json`` never carried on stdout. Its ``stats`` has ``input_tokens``
(cached included), ``cached`` and ``output_tokens`` (thinking excluded) but neither thinking tokens nor a request
count; the session file Gemini CLI writes under ``$GEMINI_CLI_HOME/.gemini/tmp/*/chats/session-*.jsonl`` has one
``gemini`` message per model call with ``tokens{input, output, cached, thoughts}``: turns and exact tokens come from
there, and after a timeout they are what the run used until the cut.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from worktrial.agents.presets.parsing import (
    ExitInfo,
    JsonLinesParser,
    Verdict,
    as_dict,
    as_int,
    as_str,
    bump,
    exit_reason,
    iter_json_lines,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.model.records import ErrorCategory, Tokens, Usage

EXIT_MEANINGS = {
    1: "general error or API failure",
    41: "authentication failed",
    42: "input error",
    52: "configuration error",
    53: "turn limit exceeded",
    55: "the folder is not trusted",
}
"""Gemini CLI's documented exit codes; other codes are an HTTP status & 0xFF (145 for 401)."""
CLAIMED_FAILURE_CODES = frozenset({42, 53})
"""Exit codes that say the agent ran and did not finish (not that it could not start)."""
KEY_HINT = "check GEMINI_API_KEY or security.auth.selectedType in ~/.gemini/settings.json (copied into each attempt)"
API_STATUS = re.compile(r'"code"\s*:\s*(\d{3})\b|\b(?:status|code):?\s*(\d{3})\b')
SESSION_FILES = 4


def status_of(text: str | None) -> int | None:
    """The HTTP status in Gemini CLI's error text (``[API Error: {"error":{"code":401,...}}]``), if any."""
    match = API_STATUS.search(text or "")
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def session_usage(scratch: Path, label: str, notes: list[str]) -> tuple[Tokens | None, int | None, str | None]:
    """Tokens, model calls and model from the session file under the attempt's ``GEMINI_CLI_HOME``."""
    root = scratch / "gemini" / ".gemini" / "tmp"
    if not root.is_dir() or root.is_symlink():
        return None, None, None
    files = sorted(p for p in root.glob("*/chats/session-*.jsonl") if p.is_file() and not p.is_symlink())
    calls: dict[str, Tokens] = {}
    model: str | None = None
    for path in files[-SESSION_FILES:]:
        for record in iter_json_lines(path, label, notes):
            if record.get("type") != "gemini":
                continue
            # A message is written again when its tool calls finish: the last version of each id counts.
            key = as_str(record.get("id")) or f"{path.name}:{len(calls)}"
            counts = as_dict(record.get("tokens"))
            thoughts = as_int(counts.get("thoughts"))
            output = as_int(counts.get("output"))
            calls[key] = Tokens(
                input=as_int(counts.get("input")),
                cached_input=as_int(counts.get("cached")),
                # worktrial's output counts every generated token; Gemini's excludes its thoughts.
                output=None if output is None else output + (thoughts or 0),
                reasoning=thoughts,
            )
            model = as_str(record.get("model")) or model
    if not calls:
        return None, None, model
    total = Tokens()
    for tokens in calls.values():
        total = total.add(tokens)
    return total, len(calls), model


class GeminiStreamParser(JsonLinesParser):
    label = "gemini-cli"

    def __init__(self) -> None:
        super().__init__()
        self.model: str | None = None
        self.result: dict[str, Any] | None = None
        self.tool_counts: dict[str, int] = {}
        self.error_counts: dict[str, int] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "init":
            self.model = as_str(event.get("model")) or self.model
        elif kind == "tool_use":
            bump(self.tool_counts, as_str(event.get("tool_name")) or "unknown")
        elif kind == "error":
            bump(self.error_counts, "stream_error")
        elif kind == "result":
            self.result = event

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage(tool_counts=dict(self.tool_counts), error_counts=dict(self.error_counts))
        self._usage(exit_info, usage)
        verdict = self._judge(exit_info, usage)
        verdict.model = self.model
        return verdict

    def _usage(self, exit_info: ExitInfo, usage: Usage) -> None:
        tokens, calls, model = session_usage(exit_info.scratch, self.label, usage.notes)
        self.model = self.model or model
        stats = as_dict((self.result or {}).get("stats"))
        if tokens is not None:
            usage.tokens, usage.turns = tokens, calls
            reported = as_int(stats.get("input_tokens"))
            if reported is not None and reported != tokens.input:
                usage.notes.append(f"gemini-cli: result stats input {reported} differs from its session file")
            return
        if stats:
            # Without the session file: the result's totals, thinking tokens and model calls unknown.
            usage.tokens = Tokens(
                input=as_int(stats.get("input_tokens")),
                cached_input=as_int(stats.get("cached")),
                output=as_int(stats.get("output_tokens")),
            )
            usage.notes.append("gemini-cli: session file not found; thinking tokens and model calls unknown")

    def _judge(self, exit_info: ExitInfo, usage: Usage) -> Verdict:
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        code = exit_info.returncode
        result = self.result
        if result is not None and result.get("status") == "success" and code == 0:
            return Verdict(claimed=True, usage=usage)
        error = as_dict((result or {}).get("error"))
        message = as_str(error.get("message"))
        if result is None:
            message, status = self._stderr_error(exit_info)
        else:
            status = status_of(message)
        if status is None and code == 41:
            status = 401
        if code not in (0, None) or result is not None:
            category = classify(status, message) if (status is not None or message) else None
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, message, KEY_HINT)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
        meaning = EXIT_MEANINGS.get(code) if code is not None else None
        if result is not None:
            kind = as_str(error.get("type")) or "error"
            bump(usage.error_counts, kind)
            why = f"gemini-cli reported {kind}" + (f" ({meaning})" if meaning else "")
            return Verdict(claimed=False, usage=usage, reason=why)
        reason = exit_reason(self.label, exit_info) + (f" ({meaning})" if meaning else "")
        if code == 0:
            return Verdict(claimed=None, usage=usage, reason="gemini-cli exited 0 without a result event")
        if code in CLAIMED_FAILURE_CODES:
            return Verdict(claimed=False, usage=usage, reason=reason)
        return Verdict(claimed=None, usage=usage, reason=reason, error_category=ErrorCategory.AGENT_FAILED)

    def _stderr_error(self, exit_info: ExitInfo) -> tuple[str | None, int | None]:
        """Before any result (bad settings, untrusted folder) Gemini CLI prints an error document to stderr."""
        text = exit_info.stderr_tail.decode("utf-8", "replace")
        start = text.rfind("\n{")
        while start >= 0:
            try:
                document = json.loads(text[start + 1 :])
            except ValueError:
                start = text.rfind("\n{", 0, start)
                continue
            error = as_dict(as_dict(document).get("error"))
            message = as_str(error.get("message"))
            code = as_int(error.get("code"))
            return message, code if code is not None and 400 <= code <= 599 else status_of(text)
        statuses = re.findall(r"\bstatus:\s*(\d{3})\b", text)
        return None, int(statuses[-1]) if statuses else None
