"""The presets whose provider is reached only through ``--base-url`` (copilot, continue, kilo, gptme, droid) are
routed through the run's model gateway exactly then; goose and vtcode are routed for an ``openai/`` or
``anthropic/`` route whose key is set, or with ``--base-url``. The CLI is given the gateway's URL and the attempt's
token, in its environment and in the files worktrial writes for it, and never the key. The real CLIs are driven
in tests/test_real_more_agents.py where they install; this checks what each is handed, for every route, without
them, and (for goose and vtcode, which are not installed here) that the URL each builds from what it is handed
reaches the provider's own path through the gateway."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import urljoin

import httpx2 as httpx
import pytest

from tests.cli_servers import CliServer, anthropic_plain, chat_plain, chat_usage
from worktrial.agents.base import AgentContext, AgentOptions
from worktrial.agents.presets import PRESETS
from worktrial.agents.presets.base import PresetAgent
from worktrial.agents.presets.carry import UserSetup
from worktrial.errors import BadInputError
from worktrial.gateway import Gateway, Session

SECRET = "sk-the-users-real-key-0123456789"
UPSTREAM = "http://127.0.0.1:9/v1"


def _handed(agent: PresetAgent, gateway: Gateway, scratch: Path, env: dict[str, str]) -> tuple[str, Session, str]:
    """Route one attempt: (the URL the CLI is pointed at, the attempt's session, everything the CLI is given)."""
    session = gateway.open(threading.Event())
    ctx = cast(AgentContext, SimpleNamespace(gateway=session))
    invocation, rewrite = agent._through_gateway(ctx, agent._invocation("prompt", scratch, scratch), env, UserSetup())
    withheld = rewrite.withheld
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
        ("goose", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("goose", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY"),
        ("goose", "gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("vtcode", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
        ("vtcode", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY"),
        ("vtcode", "gpt-4.1-mini", "openai", "OPENAI_API_KEY"),
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


@pytest.mark.parametrize("preset", ["copilot", "continue", "kilo", "droid"])
def test_without_base_url_the_cli_talks_to_its_vendor(preset: str, tmp_path: Path) -> None:
    agent = PresetAgent(PRESETS[preset], AgentOptions(model="openai/gpt-4.1-mini"))
    env = {"OPENAI_API_KEY": SECRET}
    with Gateway() as gateway:
        url, _session, _given = _handed(agent, gateway, tmp_path, env)
        assert url == "" and env == {"OPENAI_API_KEY": SECRET}
        assert gateway.port is None  # nothing was routed, so the gateway never started


def test_gptme_with_an_openai_key_goes_through_the_gateway(tmp_path: Path) -> None:
    """gptme's OpenAI provider takes ``OPENAI_BASE_URL``: with the key alone it is routed, run as ``local/NAME``."""
    agent = PresetAgent(PRESETS["gptme"], AgentOptions(model="openai/gpt-4.1-mini"))
    with Gateway() as gateway:
        url, session, handed = _given_env(agent, gateway, tmp_path, {"OPENAI_API_KEY": SECRET})
    assert url.endswith(f"/g/{session.token}/openai") and handed["env"]["OPENAI_BASE_URL"] == url
    assert handed["env"]["OPENAI_API_KEY"] == session.token and SECRET not in json.dumps(handed)
    assert handed["argv"][handed["argv"].index("-m") + 1] == "local/gpt-4.1-mini"


def test_gptme_with_a_provider_of_its_own_is_not_routed(tmp_path: Path) -> None:
    """gptme takes ``--base-url`` only for a model it runs as ``local/NAME``; its other providers ignore it."""
    agent = PresetAgent(PRESETS["gptme"], AgentOptions(model="anthropic/claude-sonnet-4-5", base_url=UPSTREAM))
    env = {"ANTHROPIC_API_KEY": SECRET}
    with Gateway() as gateway:
        url, _session, _given = _handed(agent, gateway, tmp_path, env)
        assert url == UPSTREAM and env == {"ANTHROPIC_API_KEY": SECRET}


def _given_env(
    agent: PresetAgent, gateway: Gateway, scratch: Path, env: dict[str, str]
) -> tuple[str, Session, dict[str, Any]]:
    """Like ``_handed``, but the environment the CLI gets and its argv kept apart."""
    session = gateway.open(threading.Event())
    ctx = cast(AgentContext, SimpleNamespace(gateway=session))
    invocation, rewrite = agent._through_gateway(ctx, agent._invocation("prompt", scratch, scratch), env, UserSetup())
    withheld = rewrite.withheld
    given = dict(env)
    if agent.spec.run_env is not None:
        given.update(agent.spec.run_env(invocation, given))
    given = {name: value for name, value in given.items() if value not in withheld}
    return invocation.base_url or "", session, {"env": given, "argv": agent.spec.argv(invocation)}


@pytest.mark.parametrize(
    ("preset", "model", "route", "key_var", "provider_flag"),
    [
        (
            "goose",
            "openai/gpt-4.1-mini",
            "openai",
            "OPENAI_API_KEY",
            ["--provider", "openai", "--model", "gpt-4.1-mini"],
        ),
        ("goose", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY", ["--provider", "anthropic"]),
        (
            "vtcode",
            "openai/gpt-4.1-mini",
            "openai",
            "OPENAI_API_KEY",
            ["--provider", "openai", "--model", "gpt-4.1-mini"],
        ),
        ("vtcode", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY", ["--provider", "anthropic"]),
    ],
)
def test_a_provider_key_alone_goes_through_the_gateway(
    preset: str, model: str, route: str, key_var: str, provider_flag: list[str], tmp_path: Path
) -> None:
    """goose and vtcode call the provider the route names with its key: routed without ``--base-url``, to the
    provider's own API, with the CLI's base-URL variable set to the gateway."""
    agent = PresetAgent(PRESETS[preset], AgentOptions(model=model))
    env = {key_var: SECRET, "OPENAI_ORGANIZATION": "org-x", "PATH": "/usr/bin"}
    with Gateway() as gateway:
        url, session, handed = _given_env(agent, gateway, tmp_path, env)
        given, argv = handed["env"], handed["argv"]
        assert url.endswith(f"/g/{session.token}/{route}")
        assert given[key_var] == session.token and SECRET not in json.dumps(handed)
        assert (
            given["OPENAI_ORGANIZATION"] == "org-x"
        )  # a setting of the provider's, neither key nor endpoint: it stays
        assert argv[argv.index(provider_flag[0]) : argv.index(provider_flag[0]) + len(provider_flag)] == provider_flag
        base_var = {
            ("goose", "openai"): "OPENAI_HOST",
            ("goose", "anthropic"): "ANTHROPIC_HOST",
            ("vtcode", "openai"): "OPENAI_BASE_URL",
            ("vtcode", "anthropic"): "ANTHROPIC_BASE_URL",
        }[preset, route]
        assert given[base_var].rstrip("/") == url
        upstream = session.routes[route]
        assert upstream.key == SECRET
        assert (
            upstream.base_url
            == {
                ("goose", "openai"): "https://api.openai.com/v1",
                ("goose", "anthropic"): "https://api.anthropic.com",
                ("vtcode", "openai"): "https://api.openai.com/v1",
                ("vtcode", "anthropic"): "https://api.anthropic.com/v1",
            }[preset, route]
        )


@pytest.mark.parametrize(
    ("preset", "model", "env"),
    [
        ("goose", "gpt-4.1-mini", {"OPENAI_API_KEY": SECRET}),  # the provider is the user's GOOSE_PROVIDER
        ("goose", "openrouter/some/model", {"OPENROUTER_API_KEY": SECRET}),
        ("goose", "openai/gpt-4.1-mini", {}),  # no key: a provider set up in goose's own config
        ("vtcode", "gpt-4.1-mini", {"OPENAI_API_KEY": SECRET}),  # VT Code's configured provider
        ("vtcode", "x-ai/grok-code-fast-1", {"OPENROUTER_API_KEY": SECRET}),  # an OpenRouter slug
        ("vtcode", "anthropic/claude-sonnet-4-5", {}),
    ],
)
def test_goose_and_vtcode_are_not_routed_where_the_gateway_cannot_stand_in(
    preset: str, model: str, env: dict[str, str], tmp_path: Path
) -> None:
    agent = PresetAgent(PRESETS[preset], AgentOptions(model=model))
    before = dict(env)
    with Gateway() as gateway:
        url, _session, handed = _given_env(agent, gateway, tmp_path, env)
        assert url == "" and env == before and handed["env"] == before
        assert gateway.port is None


def _request_url(preset: str, route: str, env: dict[str, str]) -> str:
    """The URL the CLI posts to, built from what it is handed the way the CLI builds it: goose joins its path
    onto the host (api_client.rs ``build_url``), VT Code appends ``/chat/completions`` or ``/messages`` to its
    base URL."""
    if preset == "goose" and route == "openai":
        return urljoin(env["OPENAI_HOST"], env["OPENAI_BASE_PATH"])
    if preset == "goose":
        return urljoin(env["ANTHROPIC_HOST"], "v1/messages")
    if route == "openai":
        return env["OPENAI_BASE_URL"] + "/chat/completions"
    return env["ANTHROPIC_BASE_URL"] + "/messages"


@pytest.mark.parametrize(
    ("preset", "model", "route", "key_var", "base_suffix"),
    [
        ("goose", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY", "/v1"),
        ("goose", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY", ""),
        ("vtcode", "openai/gpt-4.1-mini", "openai", "OPENAI_API_KEY", "/v1"),
        ("vtcode", "anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC_API_KEY", "/v1"),
    ],
)
def test_the_url_the_cli_builds_reaches_the_providers_path(
    preset: str, model: str, route: str, key_var: str, base_suffix: str, tmp_path: Path
) -> None:
    """From ``--base-url`` in the CLI's convention to the path the provider serves, through the gateway, with the
    real key swapped in: a base-URL variable off by a ``/v1`` would miss the provider's path."""
    usage = chat_usage(7, 3) if route == "openai" else {"input_tokens": 7, "output_tokens": 3}
    answer = chat_plain("m", usage, text="ok") if route == "openai" else anthropic_plain("m", "ok", usage)
    with CliServer(lambda _request: answer) as server, Gateway() as gateway:
        agent = PresetAgent(PRESETS[preset], AgentOptions(model=model, base_url=server.url + base_suffix))
        _url, session, handed = _given_env(agent, gateway, tmp_path, {key_var: SECRET})
        headers = {"authorization": f"Bearer {session.token}", "x-api-key": session.token}
        got = httpx.post(_request_url(preset, route, handed["env"]), json={"model": "m"}, headers=headers)
        assert got.status_code == 200
        served = server.posts("/v1/chat/completions" if route == "openai" else "/v1/messages")
        assert [r.path for r in served] == ["/v1/chat/completions" if route == "openai" else "/v1/messages"]
        assert SECRET in json.dumps(served[0].headers)
        assert session.report().usage.tokens.input == 7


def test_cursor_talks_to_cursor_and_refuses_base_url(tmp_path: Path) -> None:
    """cursor-agent has no provider endpoint to point anywhere (its calls go to Cursor's service): it is never
    routed, whatever provider keys are set, and ``--base-url`` stops the run in one line instead of being dropped."""
    agent = PresetAgent(PRESETS["cursor"], AgentOptions(model="gpt-5"))
    env = {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET, "CURSOR_API_KEY": "cursor-key-0123456789"}
    before = dict(env)
    with Gateway() as gateway:
        url, _session, _handed = _given_env(agent, gateway, tmp_path, env)
        assert url == "" and env == before and gateway.port is None
    refusing = PresetAgent(PRESETS["cursor"], AgentOptions(model="gpt-5", base_url=UPSTREAM))
    with pytest.raises(BadInputError, match="cursor cannot be pointed at --base-url"):
        refusing.preflight()
