"""A preset's own configuration carried into the attempt: the user's endpoint and key are routed through the model
gateway, the copy holds the attempt's token and the gateway's URL instead, login files stay out, and a login that
cannot be routed refuses the run in one line. The real CLIs set up this way run in tests/test_real_setups.py."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from worktrial.agents.base import AgentContext, AgentOptions
from worktrial.agents.presets import PRESETS
from worktrial.agents.presets.base import PresetAgent
from worktrial.agents.presets.carry import ConfigCarry, UserFile, parse, read_setup, secrets_in
from worktrial.engine.model_gateway import unreachable_config
from worktrial.errors import BadInputError
from worktrial.gateway import Gateway
from worktrial.isolation.limits import Limits
from worktrial.isolation.sandbox import SandboxDecision
from worktrial.model.config import AgentConfig, Config

KEY = "sk-proj-users-own-key-0123456789abcdef"
PROXY = "http://127.0.0.1:4000/v1"


def _agent(name: str, carry_login: bool = False) -> PresetAgent:
    return PresetAgent(PRESETS[name], AgentOptions(config=Config(agents={name: AgentConfig(carry_login=carry_login)})))


def _attempt(agent: PresetAgent, gateway: Gateway, home: Path, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """Route one attempt and carry the config as ``run`` does: (the CLI's environment, everything in its scratch)."""
    scratch = home.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    session = gateway.open(threading.Event())
    ctx = cast(AgentContext, SimpleNamespace(gateway=session))
    env = {"HOME": str(home), **env}
    setup = read_setup(agent.spec.carries, env, agent.config_dir)
    invocation, rewrite = agent._through_gateway(ctx, agent._invocation("prompt", scratch, scratch), env, setup)
    env.update(agent._env(scratch, env, rewrite, setup))
    if agent.spec.run_env is not None:
        env.update(agent.spec.run_env(invocation, env))
    env = {k: v for k, v in env.items() if v not in rewrite.withheld}
    if agent.spec.prepare is not None:
        agent.spec.prepare(invocation)
    files = "\n".join(p.read_text() for p in sorted(scratch.rglob("*")) if p.is_file())
    routes = {name: (r.base_url, r.key) for name, r in session.routes.items()}
    return env, json.dumps({"routes": routes, "token": session.token, "url": invocation.base_url}) + "\n" + files


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_", "QWEN_", "CLAUDE_")):
            monkeypatch.delenv(name)
    return path


def test_codex_key_from_codex_login_is_routed_and_auth_json_stays_out(home: Path) -> None:
    """``codex login --with-api-key`` writes the key into ~/.codex/auth.json: the gateway sends it upstream, the
    attempt's copy has no auth.json and the CLI holds the attempt's token."""
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text(json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": KEY}))
    (home / ".codex" / "config.toml").write_text(f'model = "gpt-5"\nopenai_base_url = "{PROXY}"\n')
    agent = _agent("codex")
    agent._check_carry()
    assert agent.describe()["upstream"] == {"route": "openai", "base_url": PROXY, "from": "~/.codex/config.toml"}
    with Gateway() as gateway:
        env, given = _attempt(agent, gateway, home, {})
    handed = json.loads(given.splitlines()[0])
    assert handed["routes"] == {"openai": [PROXY, KEY]}  # the user's endpoint and key, at the gateway
    assert KEY not in given.split("\n", 1)[1] and KEY not in json.dumps(env)
    assert env["CODEX_API_KEY"] == handed["token"]
    assert f'openai_base_url = "{handed["url"]}"' in given  # the copy of config.toml names the gateway
    assert not list((home.parent / "scratch").rglob("auth.json"))
    assert json.loads((home / ".codex" / "auth.json").read_text())["OPENAI_API_KEY"] == KEY  # never modified


def test_claude_code_settings_env_is_the_upstream(home: Path) -> None:
    """~/.claude/settings.json's env names a proxy on the host's loopback and its key: the gateway forwards to the
    proxy (reachable from any sandbox through the gateway's socket), never to api.anthropic.com."""
    settings = {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000", "ANTHROPIC_API_KEY": KEY}, "model": "m"}
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": "sk-ant-oat-x"}}))
    agent = _agent("claude-code")
    agent._check_carry()
    with Gateway() as gateway:
        _env, given = _attempt(agent, gateway, home, {})
    handed = json.loads(given.splitlines()[0])
    assert handed["routes"] == {"anthropic": ["http://127.0.0.1:4000", KEY]}
    copied = json.loads((home.parent / "scratch" / "claude" / "settings.json").read_text())
    assert copied["env"] == {"ANTHROPIC_BASE_URL": handed["url"], "ANTHROPIC_API_KEY": handed["token"]}
    assert not (home.parent / "scratch" / "claude" / ".credentials.json").exists()
    assert json.loads((home / ".claude" / "settings.json").read_text()) == settings


def test_qwen_code_readme_setup(home: Path) -> None:
    """Qwen Code's README: a modelProviders entry with baseUrl and envKey, the key in the settings' env, the auth
    type and model. QWEN_HOME is the attempt's, with the settings carried in; OPENAI_MODEL stays in the
    environment (a setting, not a key)."""
    settings = {
        "modelProviders": {
            "openai": [{"id": "qwen3-coder", "name": "q", "baseUrl": PROXY, "envKey": "DASHSCOPE_API_KEY"}]
        },
        "env": {"DASHSCOPE_API_KEY": KEY},
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": "qwen3-coder"},
    }
    (home / ".qwen").mkdir()
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    agent = _agent("qwen-code")
    agent._check_carry()
    with Gateway() as gateway:
        env, given = _attempt(agent, gateway, home, {"OPENAI_MODEL": "qwen3-coder"})
    handed = json.loads(given.splitlines()[0])
    assert handed["routes"] == {"openai": [PROXY, KEY]}
    assert env["QWEN_HOME"].startswith(str(home.parent / "scratch")) and env["OPENAI_MODEL"] == "qwen3-coder"
    assert env["DASHSCOPE_API_KEY"] == handed["token"] and KEY not in given.split("\n", 1)[1]
    copied = json.loads((Path(env["QWEN_HOME"]) / "settings.json").read_text())
    assert copied["modelProviders"]["openai"][0]["baseUrl"] == handed["url"]
    assert copied["env"] == {"DASHSCOPE_API_KEY": handed["token"]}


def test_gemini_routed_by_key_selects_the_key_in_the_copy(home: Path) -> None:
    (home / ".gemini").mkdir()
    (home / ".gemini" / ".env").write_text(f"GEMINI_API_KEY={KEY}\n")
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}})
    )
    (home / ".gemini" / "oauth_creds.json").write_text(json.dumps({"access_token": "ya29.a0-login-token-0123456789ab"}))
    agent = _agent("gemini-cli")
    agent._check_carry()
    with Gateway() as gateway:
        _env, given = _attempt(agent, gateway, home, {})
    handed = json.loads(given.splitlines()[0])
    assert handed["routes"] == {"gemini": ["https://generativelanguage.googleapis.com", KEY]}
    gemini = home.parent / "scratch" / "gemini" / ".gemini"
    assert json.loads((gemini / "settings.json").read_text())["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert (gemini / ".env").read_text() == f"GEMINI_API_KEY={handed['token']}\n"
    assert not (gemini / "oauth_creds.json").exists() and "ya29" not in given


def test_a_login_that_cannot_be_routed_refuses_the_run_unless_carried(home: Path) -> None:
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": "x" * 20}}))
    with pytest.raises(BadInputError) as refused:
        _agent("claude-code")._check_carry()
    line = str(refused.value)
    assert "\n" not in line and "~/.claude/.credentials.json" in line
    assert "ANTHROPIC_API_KEY" in line and "carry_login = true under [agents.claude-code]" in line
    agent = _agent("claude-code", carry_login=True)
    agent._check_carry()  # the user's choice: it goes in as it is
    with Gateway() as gateway:
        _attempt(agent, gateway, home, {})
    assert (home.parent / "scratch" / "claude" / ".credentials.json").exists()


def test_a_secret_the_rewrite_cannot_find_refuses_the_run(home: Path) -> None:
    """A secret written with a JSON escape is not where a text replacement looks: the run refuses rather than
    carry it (an escaped key that the raw text still shows whole is removed like any other)."""
    (home / ".claude").mkdir()
    settings = json.dumps({"env": {"ANTHROPIC_API_KEY": KEY}})[:-2] + ', "OTHER_TOKEN": "other\\"secret-value-1234"}}'
    (home / ".claude" / "settings.json").write_text(settings)
    with pytest.raises(BadInputError, match=r"~/\.claude/settings\.json holds a credential \(OTHER_TOKEN\)"):
        _agent("claude-code")._check_carry()


def test_the_users_base_url_variable_is_the_upstream(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    agent = _agent("claude-code")
    agent._check_carry()
    assert agent.describe()["upstream"] == {
        "route": "anthropic",
        "base_url": "http://127.0.0.1:4000",
        "from": "ANTHROPIC_BASE_URL",
    }


@pytest.mark.parametrize(
    ("name", "text", "secrets"),
    [
        (
            "settings.json",
            '{"env": {"OPENAI_API_KEY": "abcdefgh1234"}, "apiKey": "zyxwvu98765"}',
            {"abcdefgh1234", "zyxwvu98765"},
        ),
        ("config.toml", 'experimental_bearer_token = "tok-1234567890"\nmax_tokens = "100000000"\n', {"tok-1234567890"}),
        (".env", "export MY_SERVICE_TOKEN='secret-value-123'\nMODEL=gpt-5-mini-2025\n", {"secret-value-123"}),
        ("config.yaml", "models:\n  - apiKey: yaml-secret-99\n    tokenizer: cl100k_base\n", {"yaml-secret-99"}),
        (
            "settings.json",
            '{"envKey": "DASHSCOPE_API_KEY", "apiKey": "{env:MY_KEY}", "keybindings": "vim-mode-on"}',
            set(),
        ),
        (
            "notes.json",
            '{"whatever": "AIzaSyA-0123456789abcdefghijklmnopqrstu"}',
            {"AIzaSyA-0123456789abcdefghijklmnopqrstu"},
        ),
    ],
)
def test_secrets_in_settings(name: str, text: str, secrets: set[str]) -> None:
    file = UserFile(ConfigCarry("X", "x", "", (name,)), name, Path(name), text, name)
    assert secrets_in(file) == secrets


def test_jsonc_settings_parse() -> None:
    assert parse("settings.json", '{\n  // a comment\n  "a": "x // not a comment", /* b */ "b": [1, 2,],\n}') == {
        "a": "x // not a comment",
        "b": [1, 2],
    }


def test_a_loopback_endpoint_the_sandbox_cannot_reach_is_explained_before_the_first_attempt(home: Path) -> None:
    """continue's config names a local model server; without --base-url worktrial does not carry it, so under a
    network of the attempt's own every attempt would wait for it until its timeout: one line refuses the run."""
    (home / ".continue").mkdir()
    (home / ".continue" / "config.yaml").write_text(
        "models:\n  - name: local\n    provider: openai\n    model: coder\n    apiBase: http://127.0.0.1:8080/v1\n"
    )
    agent = _agent("continue")
    agent._check_carry()
    description = agent.describe()
    assert description["unrouted_endpoints"] == ["http://127.0.0.1:8080/v1"] and "upstream" not in description
    own = SandboxDecision(kind="bubblewrap", network="on", limits=Limits())
    with pytest.raises(BadInputError) as refused:
        unreachable_config("continue", description, own)
    assert "http://127.0.0.1:8080/v1" in str(refused.value) and "--network host" in str(refused.value)
    assert unreachable_config("continue", description, replace(own, network="host")) is None


def test_a_routed_agents_other_loopback_service_is_a_warning(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": {"OTEL_ENDPOINT": "http://localhost:4318"}}))
    agent = _agent("claude-code")
    agent._check_carry()
    own = SandboxDecision(kind="bubblewrap", network="off", limits=Limits())
    line = unreachable_config("claude-code", agent.describe(), own)
    assert line is not None and "http://localhost:4318" in line and "--network off" in line
