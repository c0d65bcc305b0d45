"""The presets whose provider is reached only through ``--base-url`` (copilot, continue, kilo, gptme, droid) are
routed through the run's model gateway exactly then: the CLI is given the gateway's URL and the attempt's token,
in its environment and in the files worktrial writes for it, and never the key. The real CLIs are driven in
tests/test_real_more_agents.py; this checks what each is handed, for every route, without them."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from worktrial.agents.base import AgentContext, AgentOptions
from worktrial.agents.presets import PRESETS
from worktrial.agents.presets.base import PresetAgent
from worktrial.gateway import Gateway, Session

SECRET = "sk-the-users-real-key-0123456789"
UPSTREAM = "http://127.0.0.1:9/v1"


def _handed(agent: PresetAgent, gateway: Gateway, scratch: Path, env: dict[str, str]) -> tuple[str, Session, str]:
    """Route one attempt: (the URL the CLI is pointed at, the attempt's session, everything the CLI is given)."""
    session = gateway.open(threading.Event())
    ctx = cast(AgentContext, SimpleNamespace(gateway=session))
    invocation, withheld = agent._through_gateway(ctx, agent._invocation("prompt", scratch, scratch), env)
    spec = agent.spec
    given = dict(env)
    if spec.run_env is not None:
        given.update(spec.run_env(invocation, given))
    given = {name: value for name, value in given.items() if value not in withheld}
    if spec.prepare is not None:
        spec.prepare(invocation)
    files = [p.read_text() for p in sorted(scratch.rglob("*")) if p.is_file()]
    argv = spec.argv(invocation)
    return invocation.base_url or "", session, "\n".join([json.dumps(given), *argv, *files])


@pytest.mark.parametrize(
    ("preset", "model", "route", "key_var"),
    [
        ("copilot", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("copilot", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY"),
        ("copilot", "openai/gpt-4.1-mini", "openai", "COPILOT_PROVIDER_API_KEY"),
        ("continue", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("continue", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY"),
        ("kilo", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("kilo", "openrouter/some/model", "openai", "OPENROUTER_API_KEY"),
        ("gptme", "gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("gptme", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("droid", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("droid", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY"),
    ],
)
def test_base_url_goes_through_the_gateway_and_the_key_stays_out(
    preset: str, model: str, route: str, key_var: str, tmp_path: Path
) -> None:
    agent = PresetAgent(PRESETS[preset], AgentOptions(model=model, base_url=UPSTREAM))
    env = {key_var: SECRET, "PATH": "/usr/bin"}
    with Gateway() as gateway:
        url, session, given = _handed(agent, gateway, tmp_path, env)
        token = session.token
        assert url.startswith("http://127.0.0.1:") and url.endswith(f"/g/{token}/{route}")
        assert url in given and token in given  # the CLI reaches the gateway, holding the attempt's token
        assert SECRET not in given and UPSTREAM not in given
        routed = session.routes[route]
        assert routed.key == SECRET and routed.base_url == UPSTREAM  # the gateway forwards there with the key


@pytest.mark.parametrize("preset", ["copilot", "continue", "kilo", "gptme", "droid"])
def test_without_base_url_the_cli_talks_to_its_vendor(preset: str, tmp_path: Path) -> None:
    agent = PresetAgent(PRESETS[preset], AgentOptions(model="openai/gpt-4.1-mini"))
    env = {"OPENAI_API_KEY": SECRET}
    with Gateway() as gateway:
        url, _session, _given = _handed(agent, gateway, tmp_path, env)
        assert url == "" and env == {"OPENAI_API_KEY": SECRET}
        assert gateway.port is None  # nothing was routed, so the gateway never started


def test_gptme_with_a_provider_of_its_own_is_not_routed(tmp_path: Path) -> None:
    """gptme takes ``--base-url`` only for a model it runs as ``local/NAME``; its other providers ignore it."""
    agent = PresetAgent(PRESETS["gptme"], AgentOptions(model="anthropic/claude-sonnet-4-5", base_url=UPSTREAM))
    env = {"ANTHROPIC_API_KEY": SECRET}
    with Gateway() as gateway:
        url, _session, _given = _handed(agent, gateway, tmp_path, env)
        assert url == UPSTREAM and env == {"ANTHROPIC_API_KEY": SECRET}
