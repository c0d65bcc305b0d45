"""Which of the caller's credential-like variables each agent receives (docs/security.md, "Environment").

Agents start from an environment without any credential-like variable (``worktrial.isolation.childenv``). A preset
gets back the variables of the providers its CLI can talk to, and nothing else: Claude Code never sees an OpenAI
key, Codex never sees AWS credentials. A CLI that talks to many providers (OpenCode, aider, mini-swe-agent, goose,
VT Code) gets the variables of the providers it supports. Anything more is the user's choice: ``--pass-env NAME``
or ``pass_env = [...]`` in ``[agents.NAME]``. A provider's base URL variable (``OPENAI_BASE_URL``) is one of its
provider's variables: a command agent does not get it without ``--pass-env``.
"""

from __future__ import annotations

from worktrial.isolation.childenv import PROXY_NAMES

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
    "copilot": ("openai", "anthropic"),
    "continue": (*_MANY, "moonshot"),
    "kilo": (*_MANY, "moonshot", "zai"),
    "gptme": (*_MANY, "moonshot"),
    "droid": ("openai", "anthropic", "google", "openrouter", "groq", "deepseek", "xai", "fireworks", "ollama"),
    "grok-cli": ("xai",),
}
"""Preset -> the providers its CLI can be configured for."""

PRESET_EXTRA: dict[str, tuple[str, ...]] = {
    "claude-code": ("CLAUDE_*", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "IS_SANDBOX"),
    "codex": ("CODEX_*",),
    "cursor": ("CURSOR_*",),
    "goose": ("GOOSE_*", "DATABRICKS_*"),
    "vtcode": ("VTCODE_*", "VT_*"),
    "qwen-code": ("QWEN_*",),
    "opencode": ("OPENCODE_*",),
    "aider": ("AIDER_*",),
    "mini-swe-agent": ("MSWEA_*",),
    # Copilot's BYOK provider (COPILOT_PROVIDER_*) and its GitHub login tokens, in the CLI's order of precedence.
    "copilot": ("COPILOT_*", "GH_TOKEN", "GITHUB_TOKEN", "GH_HOST"),
    "continue": ("CONTINUE_*",),
    "kilo": ("KILO_*",),
    "gptme": ("GPTME_*",),
    "droid": ("FACTORY_*", "DROID_*"),
    "grok-cli": ("GROK_*",),
}
"""Preset -> its CLI's own variables (a vendor login token, the CLI's documented settings)."""


def preset_credentials(preset: str) -> tuple[str, ...]:
    """The caller's variables a preset CLI receives without ``--pass-env``: its providers', its own, the proxies
    (nothing for a name that is not a preset)."""
    if preset not in PRESET_PROVIDERS:
        return ()
    providers = PRESET_PROVIDERS[preset]
    own = tuple(p for name in providers for p in PROVIDER_VARIABLES[name]) + PRESET_EXTRA.get(preset, ())
    return (*own, *sorted(PROXY_NAMES))  # how it reaches them from behind a proxy
