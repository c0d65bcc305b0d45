"""Which of the caller's credential-like variables each agent receives (docs/security.md, "Environment").

Agents start from an environment without any credential-like variable (``worktrial.isolation.childenv``). A preset
gets back the variables of the providers its CLI can talk to, and nothing else: Claude Code never sees an OpenAI
key, Codex never sees AWS credentials. A CLI that talks to many providers (OpenCode, aider, mini-swe-agent, goose,
VT Code) gets the variables of the providers it supports. Anything more is the user's choice: ``--pass-env NAME``
or ``pass_env = [...]`` in ``[agents.NAME]``. Only credential-like names are filtered at all, so a provider's base
URL variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) reaches every agent anyway.
"""

from __future__ import annotations

PROVIDER_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_*", "CLAUDE_CODE_OAUTH_TOKEN"),
    "openai": ("OPENAI_*", "CODEX_API_KEY", "AZURE_OPENAI_*"),
    "google": ("GEMINI_*", "GOOGLE_*", "VERTEXAI_*"),
    "openrouter": ("OPENROUTER_*",),
    "groq": ("GROQ_*",),
    "deepseek": ("DEEPSEEK_*",),
    "mistral": ("MISTRAL_*",),
    "xai": ("XAI_*",),
    "together": ("TOGETHER_*", "TOGETHERAI_*"),
    "fireworks": ("FIREWORKS_*",),
    "cohere": ("COHERE_*", "CO_API_KEY"),
    "dashscope": ("DASHSCOPE_*",),
    "moonshot": ("MOONSHOT_*",),
    "zai": ("ZHIPU_*", "ZAI_*"),
    "huggingface": ("HF_TOKEN", "HUGGINGFACE_*"),
    "ollama": ("OLLAMA_*",),
    "litellm": ("LITELLM_*",),
}
"""Provider -> the variables (names or ``PREFIX_*``) its key, token or endpoint credentials live in."""

_MANY = (
    "anthropic",
    "openai",
    "google",
    "openrouter",
    "groq",
    "deepseek",
    "mistral",
    "xai",
    "together",
    "fireworks",
    "cohere",
    "huggingface",
    "ollama",
)

PRESET_PROVIDERS: dict[str, tuple[str, ...]] = {
    "claude-code": ("anthropic",),
    "codex": ("openai",),
    "gemini-cli": ("google",),
    "qwen-code": ("openai", "dashscope"),
    "cursor": (),
    "opencode": (*_MANY, "moonshot", "zai"),
    "aider": (*_MANY, "litellm"),
    "mini-swe-agent": (*_MANY, "litellm"),
    "goose": (*_MANY, "litellm"),
    "vtcode": (*_MANY, "moonshot", "zai"),
}
"""Preset -> the providers its CLI can be configured for."""

PRESET_EXTRA: dict[str, tuple[str, ...]] = {
    "cursor": ("CURSOR_*",),
    "goose": ("GOOSE_*", "DATABRICKS_*"),
    "vtcode": ("VTCODE_*", "VT_*"),
    "qwen-code": ("QWEN_*",),
}
"""Preset -> its CLI's own credential variables (a vendor login token)."""


def preset_credentials(preset: str) -> tuple[str, ...]:
    """The credential variables a preset CLI receives without ``--pass-env``."""
    providers = PRESET_PROVIDERS.get(preset, ())
    return tuple(p for name in providers for p in PROVIDER_VARIABLES[name]) + PRESET_EXTRA.get(preset, ())
