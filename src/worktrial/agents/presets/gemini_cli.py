"""Google Gemini CLI: ``gemini --yolo --output-format stream-json --prompt PROMPT`` (see gemini_stream.py).

The preset reads the event stream; ``GeminiJsonParser`` reads ``--output-format json`` for custom agents that use
it (the ``gemini-cli`` parser falls back to it when the output is no event stream). The single JSON document has
``stats.models.<model>.tokens{prompt, candidates, cached, thoughts}``
and ``api.totalRequests`` per model, and ``stats.tools{totalCalls, byName}``. When the run fails, 0.61 prints
its ``{"error": {...}}`` document to *stderr* (stdout stays empty) and exits with a code that says why: 41
authentication, 42 input error, 52 configuration, 53 turn limit, 55 untrusted folder, or an HTTP status & 0xFF
(145 for 401). No cost is reported: the attempt is priced from the price table (``gemini/<model>``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry, parse
from worktrial.agents.presets.gemini_stream import EXIT_MEANINGS, GeminiStreamParser
from worktrial.agents.presets.parsing import (
    DocumentParser,
    ExitInfo,
    Verdict,
    as_dict,
    as_int,
    as_str,
    exit_reason,
    plus,
    tokens_from,
)
from worktrial.agents.presets.provider_errors import classify, failure
from worktrial.agents.presets.routing import GEMINI
from worktrial.model.records import ErrorCategory, Tokens, Usage

TOKEN_FIELDS = {"input": "prompt", "output": "candidates", "cached_input": "cached", "reasoning": "thoughts"}
KEY_HINT = "check GEMINI_API_KEY or security.auth.selectedType in ~/.gemini/settings.json (copied into each attempt)"
STACK_STATUS = re.compile(r"\b(?:status|code):\s*(\d{3})\b")


def stderr_error(tail: bytes) -> tuple[dict[str, Any] | None, int | None]:
    """The last ``{"error": ...}`` document Gemini CLI printed to stderr, and an HTTP status seen in its stack."""
    text = tail.decode("utf-8", "replace")
    statuses = STACK_STATUS.findall(text)
    status = int(statuses[-1]) if statuses else None
    start = text.rfind("\n{")
    while start >= 0:
        try:
            value = json.loads(text[start + 1 :])
        except ValueError:
            start = text.rfind("\n{", 0, start)
            continue
        return (as_dict(value) if isinstance(value, dict) else None), status
    return None, status


class GeminiJsonParser(DocumentParser):
    label = "gemini-cli"

    def __init__(self) -> None:
        super().__init__()
        self.model: str | None = None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        verdict = self._finish(exit_info)
        verdict.model = self.model
        return verdict

    def _finish(self, exit_info: ExitInfo) -> Verdict:
        document, problem = self.document()
        usage = Usage()
        if document is None and not exit_info.timed_out and exit_info.returncode not in (0, None):
            error_doc, status = stderr_error(exit_info.stderr_tail)
            error = as_dict((error_doc or {}).get("error"))
            provider = self._provider_failure(exit_info.returncode, error, status, usage)
            if provider is not None:
                return provider
        if document is None:
            usage.notes.append(problem or "gemini-cli: no output")
            return self._by_exit(exit_info, usage, parsed=False)
        try:
            self._read_stats(as_dict(document.get("stats")), usage)
        except Exception as exc:  # an unexpected shape means unknown usage, not a crash
            usage = Usage(notes=[f"gemini-cli: stats of unexpected shape ({type(exc).__name__}); usage unknown"])
        if problem:
            usage.notes.append(problem)
        reported = document.get("error")
        if reported is not None and not exit_info.timed_out:
            kind = as_str(as_dict(reported).get("type")) or "error"
            usage.error_counts[kind] = usage.error_counts.get(kind, 0) + 1
            return Verdict(claimed=False, usage=usage, reason=f"gemini-cli reported {kind}")
        return self._by_exit(exit_info, usage, parsed=True)

    def _provider_failure(
        self, returncode: int | None, error: dict[str, Any], status: int | None, usage: Usage
    ) -> Verdict | None:
        code = as_int(error.get("code"))
        if code is not None and 400 <= code <= 599:
            status = code
        elif returncode == 41:
            status = status or 401
        message = as_str(error.get("message"))
        category = classify(status, message)
        if category is None:
            return None
        usage.error_counts[category] = usage.error_counts.get(category, 0) + 1
        found = failure(self.label, category, status, message, KEY_HINT)
        return Verdict(claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal)

    def _read_stats(self, stats: dict[str, object], usage: Usage) -> None:
        tokens = Tokens()
        requests: int | None = None
        models = [name for name in as_dict(stats.get("models")) if isinstance(name, str)]
        self.model = models[0] if len(models) == 1 else None
        for model_stats in as_dict(stats.get("models")).values():
            model_stats = as_dict(model_stats)
            tokens = tokens.add(tokens_from(as_dict(model_stats.get("tokens")), TOKEN_FIELDS))
            requests = plus(requests, as_int(as_dict(model_stats.get("api")).get("totalRequests")))
        if tokens.output is not None and tokens.reasoning:
            # Gemini's candidates exclude thinking tokens; worktrial's output counts every generated token.
            tokens = tokens.model_copy(update={"output": tokens.output + tokens.reasoning})
        usage.tokens = tokens
        usage.turns = requests
        tools = as_dict(stats.get("tools"))
        for name, by_name in as_dict(tools.get("byName")).items():
            count = as_int(as_dict(by_name).get("count"))
            if isinstance(name, str) and count:
                usage.tool_counts[name] = count
        total = as_int(tools.get("totalCalls"))
        if total is not None and total != sum(usage.tool_counts.values()):
            usage.notes.append(f"gemini-cli: stats.tools.totalCalls={total} differs from byName counts")

    def _by_exit(self, exit_info: ExitInfo, usage: Usage, *, parsed: bool) -> Verdict:
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        code = exit_info.returncode
        if code == 0:
            if parsed:
                return Verdict(claimed=True, usage=usage)
            return Verdict(claimed=None, usage=usage, reason="gemini-cli exited 0 without a JSON result")
        meaning = EXIT_MEANINGS.get(code) if code is not None else None
        reason = exit_reason("gemini-cli", exit_info) + (f" ({meaning})" if meaning else "")
        if not parsed and code not in (42, 53):
            return Verdict(claimed=None, usage=usage, reason=reason, error_category=ErrorCategory.AGENT_FAILED)
        return Verdict(claimed=False, usage=usage, reason=reason)


class GeminiParser:
    """Gemini CLI's stream-json events, or (when the output holds none) its single ``--output-format json``
    document: both are fed the same bytes, each with its own bounded buffer."""

    label = "gemini-cli"

    def __init__(self) -> None:
        self.stream = GeminiStreamParser()
        self.document = GeminiJsonParser()

    def feed(self, chunk: bytes) -> None:
        self.stream.feed(chunk)
        self.document.feed(chunk)

    def finish(self, exit_info: ExitInfo) -> Verdict:
        stream = self.stream.finish(exit_info)
        if self.stream.result is not None or self.stream.model is not None:
            return stream
        document = self.document.finish(exit_info)
        return document if document.usage.tokens.input is not None or stream.usage.tokens.input is None else stream


def _argv(inv: Invocation) -> list[str]:
    args = ["--yolo", "--output-format", "stream-json"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--prompt", inv.prompt]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    return {"GOOGLE_GEMINI_BASE_URL": inv.base_url} if inv.base_url else {}


def _prepare(inv: Invocation) -> None:
    """Routed with a key, Gemini CLI must use it: headless, it takes its auth method from
    ``security.auth.selectedType`` (without one it refuses, "Invalid auth method selected", and with a login's it
    would look for the login's files, which stay out), so the attempt's copy of the settings selects the key."""
    if inv.upstream is None or inv.upstream.route != "gemini":
        return
    path = inv.scratch / "gemini" / ".gemini" / "settings.json"
    settings = parse(path.name, path.read_text(encoding="utf-8")) if path.is_file() else {}
    if not isinstance(settings, dict):
        return  # not JSON: left as the user wrote it
    security = settings.setdefault("security", {})
    auth = security.setdefault("auth", {}) if isinstance(security, dict) else None
    if not isinstance(auth, dict):
        return
    auth["selectedType"] = "gemini-api-key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2), encoding="utf-8")


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin", flag="--prompt"),  # prompts over 64 KiB (agents.prompt)
    name="gemini-cli",
    binary="gemini",
    summary="Google Gemini CLI (gemini --yolo --output-format stream-json)",
    install="npm install -g @google/gemini-cli",
    argv=_argv,
    parser=GeminiParser,
    # GEMINI_CLI_HOME replaces the home directory Gemini CLI keeps its .gemini state under; the worktree is a
    # fresh folder it has never seen, which headless mode refuses (exit 55) unless trust is granted.
    env=lambda scratch: {"GEMINI_CLI_HOME": scratch_dir(scratch, "gemini"), "GEMINI_CLI_TRUST_WORKSPACE": "true"},
    reports=("tokens", "turns", "tool calls", "cost (from the price table)"),
    price_provider="gemini",
    carries=(
        ConfigCarry(
            "GEMINI_CLI_HOME",
            "gemini",
            "",
            (".gemini/settings.json", ".gemini/.env", ".gemini/google_accounts.json"),
            logins=(".gemini/oauth_creds.json",),
            env_files=(".gemini/.env",),
        ),
    ),
    prepare=_prepare,
    splits_route=True,
    run_env=_run_env,
    base_url="GOOGLE_GEMINI_BASE_URL",
    upstream=lambda inv: GEMINI,
)
