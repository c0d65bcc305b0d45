"""Continue CLI: ``cn -p --auto --format json PROMPT``.

Headless ``cn`` prints one JSON object at the end, ``{"response": ..., "status": "success"}``, and exits 0; a
failure is ``{"status": "error", "message": "401 ..."}`` on stderr with exit 1 (the provider's HTTP status leads
the message). The output has no usage, but the session file Continue writes into its home directory
(``$CONTINUE_GLOBAL_DIR/sessions/<id>.json``, in the attempt's scratch directory) keeps the provider's usage of
every model reply (``history[].message.usage``: OpenAI's shape, ``prompt_tokens`` with ``cached_tokens`` and
``completion_tokens`` with ``reasoning_tokens``; ``message_tokens`` says how Anthropic's differ), which is summed.
Its session-wide ``usage`` is not used (it drops the cached figure, and its cost is Continue's guess for models it
does not know). With ``--base-url`` the CLI goes through the model gateway, whose counts of every call are recorded
instead (this report is then the cross-check).

Without ``--base-url`` Continue reads ``config.yaml`` from its home directory (copied from ``~/.continue``) or, with
none, the signed-in user's hub assistant, and ``--model`` is passed as ``cn``'s own ``--model`` (a Continue hub
model slug, ``owner/package``). With ``--base-url`` worktrial writes a config of one model into the attempt's
scratch directory and passes ``--config``: provider ``openai`` (Chat Completions) at the URL, or for an
``anthropic/NAME`` route provider ``anthropic`` at the URL's ``/v1/`` (``--base-url`` is the API's root, as for
claude-code), with ``apiKey: ${{ secrets.<PROVIDER>_API_KEY }}``, which Continue resolves from the environment (no
key is written to disk).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import Invocation, PresetSpec, byok_upstream, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry
from worktrial.agents.presets.parsing import (
    MAX_FILE_BYTES,
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
from worktrial.model.envelope import split_route
from worktrial.model.records import Tokens, Usage

CONFIG_FILE = "continue-base-url.yaml"
STATUS = re.compile(r"^\s*(\d{3})\b")
KEY_HINT = "check the provider's key variable or the apiKey in ~/.continue/config.yaml (copied into each attempt)"
MAX_SESSIONS = 16


def home_dir(scratch: Path) -> Path:
    return scratch / "continue"


def message_tokens(usage: dict[str, Any]) -> Tokens:
    """One reply's tokens. Continue keeps each provider's convention: OpenAI's ``prompt_tokens`` count the cached
    part; from Anthropic they do not, and the details name ``cache_read_tokens`` and ``cache_write_tokens``, which
    are then added back."""
    details = as_dict(usage.get("prompt_tokens_details"))
    prompt, read = as_int(usage.get("prompt_tokens")), as_int(details.get("cached_tokens"))
    write = as_int(details.get("cache_write_tokens"))
    if "cache_read_tokens" in details or "cache_write_tokens" in details:
        read = as_int(details.get("cache_read_tokens"))
        prompt = None if prompt is None else prompt + (read or 0) + (write or 0)
    return Tokens(
        input=prompt,
        output=as_int(usage.get("completion_tokens")),
        cached_input=read,
        cache_creation=write,
        reasoning=as_int(as_dict(usage.get("completion_tokens_details")).get("reasoning_tokens")),
    )


def stderr_error(tail: bytes) -> str | None:
    """The message of the last ``{"status": "error", ...}`` line on stderr, if any."""
    for line in reversed(tail.decode("utf-8", "replace").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("status") == "error":
            return as_str(value.get("message")) or ""
    return None


class ContinueParser(JsonLinesParser):
    label = "continue"

    def __init__(self) -> None:
        super().__init__()
        self.final: dict[str, Any] | None = None
        self.model: str | None = None

    def on_event(self, event: dict[str, Any]) -> None:
        if isinstance(event.get("status"), str):
            self.final = event

    def _read_sessions(self, scratch: Path, usage: Usage) -> None:
        sessions = home_dir(scratch) / "sessions"
        try:
            files = sorted(p for p in sessions.glob("*.json") if p.name != "sessions.json" and p.is_file())
        except OSError:
            files = []
        if not files:
            usage.notes.append("continue: no session file; usage unknown")
            return
        replies = 0
        for path in files[:MAX_SESSIONS]:
            if path.stat().st_size > MAX_FILE_BYTES:
                usage.notes.append(f"continue: {path.name} is larger than {MAX_FILE_BYTES} bytes; skipped")
                continue
            document = as_dict(read_json_file(path, self.label, usage.notes))
            for item in as_list(document.get("history")):
                message = as_dict(as_dict(item).get("message"))
                for call in as_list(message.get("toolCalls")):
                    bump(usage.tool_counts, as_str(as_dict(as_dict(call).get("function")).get("name")) or "unknown")
                reply_usage = as_dict(message.get("usage"))
                if message.get("role") == "assistant" and reply_usage:
                    replies += 1
                    usage.tokens = usage.tokens.add(message_tokens(reply_usage))
                    self.model = as_str(reply_usage.get("model")) or self.model
        usage.turns = replies or None

    def verdict(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage()
        self._read_sessions(exit_info.scratch, usage)
        verdict = self._judge(exit_info, usage)
        verdict.model = self.model
        return verdict

    def _judge(self, exit_info: ExitInfo, usage: Usage) -> Verdict:
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        error = stderr_error(exit_info.stderr_tail)
        if self.final is not None and self.final.get("status") == "error":
            error = as_str(self.final.get("message")) or ""
        if error is not None:
            bump(usage.error_counts, "error")
            match = STATUS.match(error)
            status = int(match.group(1)) if match else None
            category = classify(status, error)
            if category is not None:
                bump(usage.error_counts, category)
                found = failure(self.label, category, status, error, KEY_HINT)
                return Verdict(
                    claimed=None, usage=usage, reason=found.message, error_category=category, fatal=found.fatal
                )
            return Verdict(claimed=False, usage=usage, reason="continue reported an error")
        if self.final is None:
            return self.fallback(exit_info, usage, "a final status")
        if self.final.get("status") != "success" or exit_info.returncode not in (0, None):
            status_text = as_str(self.final.get("status")) or "unknown"
            why = f"continue status {status_text}" if status_text != "success" else exit_reason("continue", exit_info)
            return Verdict(claimed=False, usage=usage, reason=why)
        return Verdict(claimed=True, usage=usage)


def _argv(inv: Invocation) -> list[str]:
    args = ["-p", "--auto", "--format", "json"]
    if inv.base_url:
        args += ["--config", str(inv.scratch / CONFIG_FILE)]
    elif inv.model:
        args += ["--model", inv.model]  # without --base-url: a Continue hub model slug (owner/package)
    return [*args, *inv.extra_args, inv.prompt]


def _prepare(inv: Invocation) -> None:
    if not inv.base_url or not inv.model:
        return
    provider, name = split_route(inv.model)
    kind = "anthropic" if provider == "anthropic" else "openai"
    api_base = inv.base_url
    if kind == "anthropic" and not api_base.rstrip("/").endswith("/v1"):
        # cn appends "messages" to an Anthropic apiBase; --base-url is the API's root, as for claude-code.
        api_base = api_base.rstrip("/") + "/v1/"
    model = {
        "name": "worktrial",
        "provider": kind,
        "model": name or inv.model,
        "apiBase": api_base,
        "apiKey": "${{ secrets." + (provider or kind).upper().replace("-", "_") + "_API_KEY }}",
        "roles": ["chat", "edit", "apply"],
        "capabilities": ["tool_use"],
    }
    config = {"name": "worktrial", "version": "1.0.0", "schema": "v1", "models": [model]}
    path = inv.scratch / CONFIG_FILE
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    path.chmod(0o600)


SPEC = PresetSpec(
    name="continue",
    binary="cn",
    summary="Continue CLI (cn -p --auto --format json)",
    install="npm install -g @continuedev/cli",
    argv=_argv,
    parser=ContinueParser,
    env=lambda scratch: {"CONTINUE_GLOBAL_DIR": scratch_dir(scratch, "continue")},
    reports=("tokens", "turns (model replies)", "tool calls"),
    carries=(
        ConfigCarry(
            "CONTINUE_GLOBAL_DIR", "continue", ".continue", ("config.yaml", "config.json", ".env"), env_files=(".env",)
        ),
    ),
    base_url="a config of one model at the URL (--config in the attempt's scratch directory)",
    base_url_needs_model=True,
    prepare=_prepare,
    upstream=byok_upstream,
)
