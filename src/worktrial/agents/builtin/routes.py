"""Model routes: ``provider/model`` -> which wire API, which base URL, which key.

Every preset knows its default base URL and the environment variable that holds its key. ``--base-url`` wins over
config (``[providers.NAME] base_url``), which wins over the preset; config can also declare new providers that speak
either API. Keys are only ever read from the environment, never from a config file, and never leave this module
except to the SDK client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from worktrial.errors import BadInputError
from worktrial.model.config import Api, Config, ProviderConfig
from worktrial.util import public_url

# Local servers ignore the key, but the SDKs insist on having one.
PLACEHOLDER_KEY = "not-needed"
CLOUD_CONTEXT_TOKENS = 128_000
LOCAL_CONTEXT_TOKENS = 32_768


@dataclass(frozen=True)
class Preset:
    """A provider worktrial knows out of the box."""

    name: str
    api: Api
    base_url: str | None
    key_env: str | None
    key_required: bool
    local: bool = False

    @property
    def default_context_tokens(self) -> int:
        return LOCAL_CONTEXT_TOKENS if self.local else CLOUD_CONTEXT_TOKENS


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("openai", "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", True),
        Preset("anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", True),
        Preset("openrouter", "openai", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True),
        Preset("deepseek", "openai", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", True),
        Preset("gemini", "openai", "https://generativelanguage.googleapis.com/v1beta/openai/", "GEMINI_API_KEY", True),
        Preset("ollama", "openai", "http://localhost:11434/v1", "OLLAMA_API_KEY", False, local=True),
        Preset("vllm", "openai", "http://localhost:8000/v1", "VLLM_API_KEY", False, local=True),
        Preset("lmstudio", "openai", "http://localhost:1234/v1", "LMSTUDIO_API_KEY", False, local=True),
        Preset("llamacpp", "openai", "http://localhost:8080/v1", "LLAMACPP_API_KEY", False, local=True),
        Preset("openai-compatible", "openai", None, "OPENAI_COMPATIBLE_API_KEY", False),
    )
}


@dataclass(frozen=True)
class Route:
    """A resolved model route. ``api_key`` is excluded from repr so it cannot leak into logs or errors."""

    provider: str
    model: str
    api: Api
    base_url: str
    key_env: str | None
    key_required: bool
    default_context_tokens: int
    api_key: str = field(default=PLACEHOLDER_KEY, repr=False)

    @property
    def route(self) -> str:
        return f"{self.provider}/{self.model}"

    @property
    def has_key(self) -> bool:
        return self.api_key != PLACEHOLDER_KEY

    def public_base_url(self) -> str:
        """The base URL without user info, query or fragment (those may hold credentials)."""
        return public_url(self.base_url)


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInputError(f"{where}: {url!r} is not an http(s) URL")
    return url


def known_providers(config: Config | None = None) -> list[str]:
    return sorted(set(PRESETS) | set(config.providers if config else ()))


def resolve_route(
    model: str | None,
    base_url: str | None = None,
    config: Config | None = None,
    env: Mapping[str, str] | None = None,
) -> Route:
    """Resolve ``provider/model`` against the presets and config; every problem is one clear BadInputError."""
    config = config or Config()
    env = os.environ if env is None else env
    if not model:
        raise BadInputError("the builtin agent needs --model provider/model (e.g. openai/gpt-5.1, ollama/qwen3:8b)")
    provider, sep, name = model.partition("/")
    if not sep or not provider or not name.strip():
        raise BadInputError(
            f"--model {model!r} is not a provider/model route (e.g. openai/gpt-5.1); "
            f"known providers: {', '.join(known_providers(config))}"
        )
    preset = PRESETS.get(provider)
    declared = config.providers.get(provider)
    custom = declared or ProviderConfig()
    if preset is None and declared is None:
        raise BadInputError(
            f"unknown provider {provider!r} in --model {model}; known providers: {', '.join(known_providers(config))} "
            '(or declare one in config: [providers.NAME] base_url = "...", api = "openai")'
        )
    api: Api = custom.api or (preset.api if preset else "openai")
    url = base_url or custom.base_url or (preset.base_url if preset else None)
    if not url:
        raise BadInputError(
            f"--model {model} needs --base-url URL (e.g. http://127.0.0.1:8000/v1), "
            f"or base_url in config under [providers.{provider}]"
        )
    url = _check_url(url, "--base-url" if base_url else f"base URL for {provider}")
    key_env = custom.api_key_env or (preset.key_env if preset else None)
    # A custom provider that names a key variable needs it; a preset decides for itself.
    key_required = preset.key_required if preset else custom.api_key_env is not None
    key = env.get(key_env, "").strip() if key_env else ""
    return Route(
        provider=provider,
        model=name,
        api=api,
        base_url=url,
        key_env=key_env,
        key_required=key_required,
        default_context_tokens=preset.default_context_tokens if preset else LOCAL_CONTEXT_TOKENS,
        api_key=key or PLACEHOLDER_KEY,
    )
