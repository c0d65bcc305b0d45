"""Routes, settings, prices and provider error categories of the builtin agent (no network)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from typing import Any

import pytest

from worktrial.agents.base import AgentOptions
from worktrial.agents.builtin import BuiltinAgent
from worktrial.agents.builtin.routes import PLACEHOLDER_KEY, PRESETS, resolve_route
from worktrial.agents.builtin.settings import load_settings
from worktrial.agents.builtin.transport import error_from_status, status_category
from worktrial.agents.pricing import Price, cost_usd, price_table, resolve_price
from worktrial.errors import BadInputError
from worktrial.model.config import parse_config
from worktrial.model.records import Tokens

KEY = "sk-unit-SECRET-42"


GEMINI_HOST = "https://generativelanguage.googleapis.com"
PRESET_CASES = [
    ("openai/gpt-5.1", "gpt-5.1", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    ("openrouter/qwen/qwen3-coder", "qwen/qwen3-coder", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    ("ollama/qwen2.5-coder:7b", "qwen2.5-coder:7b", "http://localhost:11434/v1", "OLLAMA_API_KEY"),
    ("vllm/Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "http://localhost:8000/v1", "VLLM_API_KEY"),
    ("lmstudio/qwen3-8b", "qwen3-8b", "http://localhost:1234/v1", "LMSTUDIO_API_KEY"),
    ("llamacpp/any", "any", "http://localhost:8080/v1", "LLAMACPP_API_KEY"),
    ("deepseek/deepseek-chat", "deepseek-chat", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    (
        "gemini/gemini-2.5-pro",
        "gemini-2.5-pro",
        "https://generativelanguage.googleapis.com/v1beta/openai/",
        "GEMINI_API_KEY",
    ),
]


@pytest.mark.parametrize(("model", "name", "base_url", "key_env"), PRESET_CASES)
def test_presets(model: str, name: str, base_url: str, key_env: str) -> None:
    provider = model.partition("/")[0]
    route = resolve_route(model, env={})
    assert (route.provider, route.model, route.base_url, route.key_env) == (provider, name, base_url, key_env)
    assert route.api == ("anthropic" if provider == "anthropic" else "openai")
    assert route.key_required == (provider in {"openai", "anthropic", "openrouter", "deepseek", "gemini"})


def test_keys_come_from_the_environment_and_local_servers_need_none() -> None:
    assert resolve_route("openai/gpt-5.1", env={"OPENAI_API_KEY": KEY}).api_key == KEY
    local = resolve_route("ollama/qwen3:8b", env={})
    assert local.api_key == PLACEHOLDER_KEY and not local.has_key and not local.key_required
    assert resolve_route("vllm/m", env={"VLLM_API_KEY": "served-with-key"}).api_key == "served-with-key"
    assert KEY not in repr(resolve_route("openai/gpt-5.1", env={"OPENAI_API_KEY": KEY}))


def test_base_url_precedence_flag_then_config_then_preset() -> None:
    config = parse_config({"providers": {"ollama": {"base_url": "http://gpu-box:11434/v1"}}})
    assert resolve_route("ollama/m", config=config, env={}).base_url == "http://gpu-box:11434/v1"
    assert resolve_route("ollama/m", "http://127.0.0.1:9/v1", config, env={}).base_url == "http://127.0.0.1:9/v1"


def test_config_can_declare_a_provider() -> None:
    config = parse_config({"providers": {"corp": {"base_url": "https://llm.corp/v1", "api_key_env": "CORP_KEY"}}})
    route = resolve_route("corp/coder", config=config, env={"CORP_KEY": KEY})
    assert (route.api, route.base_url, route.api_key, route.key_required) == (
        "openai",
        "https://llm.corp/v1",
        KEY,
        True,
    )
    proxy = parse_config({"providers": {"proxy": {"base_url": "http://127.0.0.1:4000", "api": "anthropic"}}})
    assert resolve_route("proxy/claude", config=proxy, env={}).api == "anthropic"


@pytest.mark.parametrize(
    ("model", "base_url", "config", "message"),
    [
        (None, None, {}, "needs --model provider/model"),
        ("gpt-5.1", None, {}, "is not a provider/model route"),
        ("openai/", None, {}, "is not a provider/model route"),
        ("acme/m", None, {}, "unknown provider 'acme'"),
        ("openai-compatible/m", None, {}, "needs --base-url URL"),
        ("ollama/m", "ftp://host/v1", {}, "is not an http(s) URL"),
        ("ollama/m", None, {"providers": {"ollama": {"api_key": "x"}}}, "keys themselves belong in the environment"),
        (
            "ollama/m",
            None,
            {"providers": {"ollama": {"api": "grpc"}}},
            "[providers.ollama].api: must be one of openai, anthropic",
        ),
    ],
)
def test_route_errors_are_one_clear_message(
    model: str | None, base_url: str | None, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadInputError, match=re.escape(message)):
        resolve_route(model, base_url, parse_config(config), env={})


def test_agent_describe_and_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    options = AgentOptions(
        model="openai/gpt-5.1",
        base_url="https://user:pass@proxy.example:8443/v1?token=abc",
        settings={"max_turns": 9, "temperature": 0.0},
        config=parse_config({"agents": {"builtin": {"max_tokens": 5000, "context_window": 64000}}}),
    )
    agent = BuiltinAgent(options)
    agent.preflight()
    info = agent.describe()
    assert info["base_url"] == "https://proxy.example:8443/v1"
    assert (info["max_turns"], info["temperature"], info["max_total_tokens"]) == (9, 0.0, 5000)
    assert info["context_window"] == 64000 and info["pricing"]["source"] == "table"
    for secret in (KEY, "pass", "token=abc"):
        assert secret not in repr(info)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(BadInputError, match="set OPENAI_API_KEY"):
        BuiltinAgent(AgentOptions(model="openai/gpt-5.1")).preflight()
    # A local model server that is down fails every attempt alike: preflight refuses before the first.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    with pytest.raises(BadInputError, match=r"nothing answers at .* \(connection refused\)"):
        BuiltinAgent(AgentOptions(model="ollama/qwen3:8b", base_url=closed)).preflight()


def test_settings_merge_and_validation() -> None:
    config = parse_config({"agents": {"builtin": {"max_turns": 10, "temperature": 0.5}}})
    settings = load_settings(config, {"max_turns": 3, "temperature": None})
    assert (settings.max_turns, settings.temperature, settings.max_tokens) == (3, 0.5, None)
    # Config keeps only what the user wrote: the default of an unset key does not mask a later flag.
    assert load_settings(config, {}).max_turns == 10 and config.builtin is not None
    assert config.builtin.model_fields_set == {"max_turns", "temperature"}
    with pytest.raises(BadInputError, match=re.escape("[agents.builtin].max_turns: must be greater than or equal")):
        parse_config({"agents": {"builtin": {"max_turns": 0}}}, "config.toml")
    with pytest.raises(BadInputError, match=re.escape("config.toml: [agents.builtin]: unknown key(s) max_turn;")):
        parse_config({"agents": {"builtin": {"max_turn": 5}}}, "config.toml")
    with pytest.raises(BadInputError, match=re.escape("([agents.builtin] or flags): max_turns: must be")):
        load_settings(config, {"max_turns": -1})


def test_price_table_is_dated_and_covers_the_cloud_presets() -> None:
    table = price_table()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.taken_on)
    providers = {route.partition("/")[0] for route in table.models}
    assert {"openai", "anthropic", "deepseek", "gemini", "openrouter"} <= providers
    assert all(p.input > 0 and p.output > 0 for p in table.models.values())


def test_price_resolution_prefers_config() -> None:
    assert resolve_price("ollama/qwen3:8b") is None
    table = resolve_price("openai/gpt-5.1")
    assert table is not None and table.source == "table"
    config = parse_config(
        {"pricing": {"openai/gpt-5.1": {"input": 1, "output": 2}, "ollama/*": {"input": 0, "output": 0}}}
    )
    exact = resolve_price("openai/gpt-5.1", config)
    assert exact is not None and exact.source == "config" and exact.price == Price(input=1.0, output=2.0)
    free = resolve_price("ollama/qwen3:8b", config)
    assert free is not None and cost_usd(Tokens(input=10, output=10), free.price) == 0.0
    with pytest.raises(BadInputError, match=re.escape('[pricing."openai/gpt-5.1"].output: must be greater')):
        parse_config({"pricing": {"openai/gpt-5.1": {"input": 1, "output": -2}}})
    with pytest.raises(BadInputError, match=re.escape("unknown key(s) cache; known: input, output, cached_input")):
        parse_config({"pricing": {"openai/gpt-5.1": {"input": 1, "output": 2, "cache": 1}}})
    for bad in (True, "1.5", float("inf")):
        with pytest.raises(BadInputError, match=re.escape('[pricing."openai/gpt-5.1"].input: must be')):
            parse_config({"pricing": {"openai/gpt-5.1": {"input": bad, "output": 2}}})


def test_cost_is_unknown_rather_than_zero() -> None:
    price = Price(input=2.0, output=10.0, cached_input=0.5, cache_write=2.5)
    assert cost_usd(Tokens(input=100, output=10), None) is None
    assert cost_usd(Tokens(output=10), price) is None
    tokens = Tokens(input=1_000_000, output=100_000, cached_input=400_000, cache_creation=100_000)
    assert cost_usd(tokens, price) == pytest.approx(500_000 * 2e-6 + 400_000 * 0.5e-6 + 100_000 * 2.5e-6 + 1.0)
    # Without a cache price, cached tokens cost the input price: never cheaper than the truth.
    assert cost_usd(
        Tokens(input=1_000_000, output=0, cached_input=500_000), Price(input=2.0, output=10.0)
    ) == pytest.approx(2.0)


def test_http_status_categories_and_messages() -> None:
    route = resolve_route("openai/gpt-5.1", env={"OPENAI_API_KEY": KEY})
    assert [status_category(s) for s in (401, 403, 404, 429, 500, 529, 408, 400)] == [
        "provider_auth",
        "provider_auth",
        "model_not_found",
        "provider_rate_limit",
        "provider_server",
        "provider_server",
        "provider_server",
        None,
    ]
    assert error_from_status(route, 408, "", "", 2).category == "provider_server"
    auth = error_from_status(route, 401, f"Incorrect API key provided: {KEY}", "invalid_api_key", 2)
    assert auth.fatal and auth.category == "provider_auth" and KEY not in str(auth) and "OPENAI_API_KEY" in str(auth)
    missing = error_from_status(route, 404, f"The model does not exist (key {KEY})", "model_not_found", 2)
    assert missing.fatal and "***" in str(missing) and KEY not in str(missing)
    overflow = error_from_status(route, 400, "", "context_length_exceeded", 2)
    assert overflow.context_overflow and not overflow.fatal
    assert not error_from_status(route, 429, "slow", "", 2).fatal
    other = error_from_status(route, 400, "tools are not supported", "", 2)
    assert other.category == "provider_bad_request" and not other.fatal


def test_startup_does_not_import_the_sdks() -> None:
    code = (
        "import sys, worktrial.cli.main\n"
        "from worktrial.agents.registry import agent_specs\n"
        "assert 'builtin' in agent_specs()\n"
        "assert not {'openai', 'anthropic'} & set(sys.modules), 'SDK imported at startup'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_preset_has_a_key_variable() -> None:
    assert all(p.key_env and p.key_env.endswith("_API_KEY") for p in PRESETS.values())
