"""Aider: ``aider --yes-always --no-auto-commits --no-stream --message PROMPT --analytics-log FILE``.

Aider has no machine-readable stdout; its analytics log (JSON lines written locally, whether or not
analytics are sent anywhere) has one ``message_send`` event per model call with ``prompt_tokens``,
``completion_tokens`` and ``cost``. Those are the provider's figures only with ``--no-stream`` (streaming, aider
records its own estimate). Aider never says whether it solved the task and its exit status only reports crashes,
so finishing normally counts as a claim of success and verification decides -- unless no model call succeeded:
aider 0.86 prints a provider failure (``litellm.AuthenticationError: ...``) on stdout and still exits 0, so the
last such line is read from stdout and classified like the built-in agent's errors. ``--no-analytics`` keeps
``--yes-always`` from opting the user into sending analytics.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import (
    Invocation,
    LongPrompt,
    PresetSpec,
    litellm_base_url,
    litellm_provider,
    litellm_upstream,
    scratch_dir,
)
from worktrial.agents.presets.carry import ConfigCarry, UserSetup
from worktrial.agents.presets.parsing import (
    ExitInfo,
    LineSplitter,
    Verdict,
    add_cost,
    as_cost,
    as_dict,
    as_int,
    exit_reason,
    iter_json_lines,
)
from worktrial.agents.presets.provider_errors import classify_litellm, failure
from worktrial.agents.presets.routing import Configured
from worktrial.model.records import ErrorCategory, Tokens, Usage

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


LITELLM_LINE = re.compile(r"litellm\.(\w+):\s*(.*)")
MODEL_LINE = re.compile(r"^(?:Main model|Model): (\S+) with ")
"""Aider's banner names the model it runs (its analytics log redacts names it does not know)."""
KEY_HINT = "check the provider's key variable or ~/.env / ~/.aider.conf.yml (copied into each attempt)"


class AiderParser:
    """Reads the analytics log at exit; of stdout (aider's is for humans) only the last provider error line."""

    label = "aider"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._splitter = LineSplitter(self._line, limit=64 * 1024)
        self._pending = False
        self.model: str | None = None
        self.error: tuple[str, str] | None = None
        """The last ``litellm.<Exception>`` aider printed and its message (with the wrapped line after it)."""

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._splitter.feed(chunk)

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").strip()
        if self._pending and self.error is not None and text:
            self.error = (self.error[0], f"{self.error[1]} {text}")  # aider wraps long messages
        self._pending = False
        if self.model is None and (banner := MODEL_LINE.match(text)):
            self.model = banner.group(1)
        match = LITELLM_LINE.search(text)
        if match:
            self.error = (match.group(1), match.group(2))
            self._pending = True

    def finish(self, exit_info: ExitInfo) -> Verdict:
        with self._lock:
            self._splitter.close()
        verdict = self._finish(exit_info)
        verdict.model = self.model
        return verdict

    def _finish(self, exit_info: ExitInfo) -> Verdict:
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
        if self.error is not None and (sends == 0 or exit_info.returncode != 0):
            exception, message = self.error
            category = classify_litellm(exception, message)
            if category is not None:
                usage.error_counts[category] = usage.error_counts.get(category, 0) + 1
                found = failure(self.label, category, None, f"{exception}: {message}", KEY_HINT)
                # A request every attempt would repeat (rejected before any call succeeded) stops the run too.
                fatal = found.fatal or (category == ErrorCategory.PROVIDER_BAD_REQUEST and sends == 0)
                return Verdict(claimed=None, usage=usage, reason=found.message, error_category=category, fatal=fatal)
        if exit_info.returncode == 0:
            if sends == 0:
                return Verdict(claimed=None, usage=usage, reason="aider exited 0 without a model reply")
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
        "--no-stream",
        "--no-show-model-warnings",
        "--chat-history-file",
        scratch_dir(inv.scratch, "aider", "chat-history.md"),
        "--input-history-file",
        scratch_dir(inv.scratch, "aider", "input-history"),
    ]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--message", inv.prompt]


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    return litellm_base_url(inv, env)


CONF_SETTING = re.compile(r"^(model|openai-api-key|anthropic-api-key|openai-api-base)\s*:\s*[\"']?([^\"'\s#]+)", re.M)


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """The model ``~/.aider.conf.yml`` names (its provider is the upstream: ``openrouter/...`` reads
    ``OPENROUTER_API_KEY`` and ``OPENROUTER_API_BASE``, from ~/.env or the environment), and the key and OpenAI
    base the file sets itself."""
    del env, provider
    conf = setup.file(".aider.conf.yml")
    settings = dict(CONF_SETTING.findall(conf.text)) if conf is not None else {}
    named = model or settings.get("model")
    upstream = litellm_provider(named) if model is None and named else None
    chosen = "anthropic" if named and named.startswith("anthropic/") else "openai"
    key = settings.get(f"{chosen}-api-key")
    base = settings.get("openai-api-base") if chosen == "openai" else None
    shown = conf.shown if conf is not None else None
    return Configured(
        base_url=base,
        base_from=shown if base else None,
        key=key,
        key_from=shown if key else None,
        model=named,
        upstream=upstream,
        elsewhere=model is None and named is not None and upstream is None,
    )


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="file", flag="--message-file"),  # prompts over 64 KiB (agents.prompt)
    name="aider",
    binary="aider",
    summary="Aider (aider --message, usage from its analytics log; finishing claims success)",
    install="python -m pip install aider-install && aider-install",
    argv=_argv,
    parser=AiderParser,
    # Aider keeps its state (~/.aider: caches, analytics id, model metadata) under the home directory; its
    # settings (~/.aider.conf.yml, ~/.env with the provider keys) are copied into each attempt's home.
    env=lambda scratch: {"HOME": scratch_dir(scratch, "aider", "home")},
    reports=("tokens", "cost", "turns"),
    price_provider="openai",
    carries=(
        ConfigCarry(
            "HOME",
            "aider/home",
            "",
            (".aider.conf.yml", ".env", ".aider.model.settings.yml", ".aider.model.metadata.json"),
            env_files=(".env",),
        ),
    ),
    setup=_setup,
    run_env=_run_env,
    base_url="<PROVIDER>_API_BASE (litellm's variable for the route's provider; OPENAI_API_BASE without one)",
    upstream=litellm_upstream,
)
