"""Kilo Code CLI: ``kilo run --format json --auto -- PROMPT``, one JSON event per line.

Kilo's CLI is a fork of OpenCode and prints OpenCode's events (``step_finish`` with ``tokens`` and ``cost``,
``tool_use``, ``error`` with an ``APIError``'s ``statusCode``), so OpenCode's parser reads it, with its
normalisation (input counts cache reads and writes, output counts reasoning). Kilo prices only models it knows
and reports 0 otherwise, which worktrial records as unknown; with ``--base-url`` the model gateway's counts and cost
are recorded instead. Like OpenCode it takes its project directory from ``$PWD``, which the process layer sets to
the worktree.

``--base-url`` is an OpenAI-compatible Chat Completions endpoint: ``KILO_CONFIG_CONTENT`` (merged over the user's
own config) declares a provider ``worktrial`` at that URL, serving the ``--model`` name, with the key of the route's
provider (``{env:OPENAI_API_KEY}`` for ``openai/NAME`` or a bare name, ``{env:OPENROUTER_API_KEY}`` for
``openrouter/NAME``, ...); Kilo is run with ``--model worktrial/NAME``. The key stays in the environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from worktrial.agents.presets.base import Invocation, LongPrompt, PresetSpec, byok_upstream, scratch_dir
from worktrial.agents.presets.carry import ConfigCarry
from worktrial.agents.presets.opencode import OpenCodeParser
from worktrial.model.envelope import split_route

PROVIDER_ID = "worktrial"
"""The provider a ``--base-url`` endpoint is declared as (a name of its own: Kilo's built-in ``openai``
provider speaks the Responses API, which most compatible endpoints do not)."""


class KiloParser(OpenCodeParser):
    label = "kilo"
    key_hint = "check the provider's key variable or ~/.local/share/kilo/auth.json (copied into each attempt)"


def _route(inv: Invocation) -> tuple[str | None, str | None]:
    """The provider named in ``--model`` and the bare model name."""
    if not inv.model:
        return None, None
    return split_route(inv.model)


def _argv(inv: Invocation) -> list[str]:
    args = ["run", "--format", "json", "--auto"]
    if inv.model:
        model = inv.model
        if inv.base_url:
            model = f"{PROVIDER_ID}/{_route(inv)[1] or inv.model}"
        args += ["--model", model]
    return [*args, *inv.extra_args, "--", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {
        # Kilo keeps config, auth, sessions and its database under the XDG directories.
        "XDG_CONFIG_HOME": scratch_dir(scratch, "kilo", "config"),
        "XDG_DATA_HOME": scratch_dir(scratch, "kilo", "data"),
        "XDG_STATE_HOME": scratch_dir(scratch, "kilo", "state"),
        "KILO_DISABLE_AUTOUPDATE": "1",
    }


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    if not inv.base_url:
        return {}
    provider, name = _route(inv)
    key_var = f"{(provider or 'openai').upper().replace('-', '_')}_API_KEY"
    declared = {
        "npm": "@ai-sdk/openai-compatible",
        "name": PROVIDER_ID,
        "options": {"baseURL": inv.base_url, "apiKey": f"{{env:{key_var}}}"},
        "models": {name: {"name": name}} if name else {},
    }
    return {"KILO_CONFIG_CONTENT": json.dumps({"provider": {PROVIDER_ID: declared}})}


SPEC = PresetSpec(
    long_prompt=LongPrompt(via="stdin"),  # prompts over 64 KiB (agents.prompt)
    name="kilo",
    binary="kilo",
    summary="Kilo Code CLI (kilo run --format json --auto)",
    install="npm install -g @kilocode/cli",
    argv=_argv,
    parser=KiloParser,
    env=_env,
    reports=("tokens", "cost (0 for unknown models: unpriced)", "turns (steps)", "tool calls"),
    carries=(
        ConfigCarry("XDG_CONFIG_HOME", "kilo/config", ".config", ("kilo/kilo.json", "kilo/kilo.jsonc")),
        ConfigCarry("XDG_DATA_HOME", "kilo/data", ".local/share", (), logins=("kilo/auth.json",)),
    ),
    run_env=_run_env,
    base_url="KILO_CONFIG_CONTENT declaring an OpenAI-compatible provider at the URL",
    base_url_needs_model=True,
    upstream=byok_upstream,
)
