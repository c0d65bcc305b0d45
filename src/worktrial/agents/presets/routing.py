"""Where a preset CLI's model calls go when the model gateway stands in for its provider (docs/gateway.md).

The upstream is what the user configured for the CLI: ``--base-url``, else the endpoint the CLI's own configuration
names (a settings file), else its provider's base-URL variable (``ANTHROPIC_BASE_URL``), and only when none is set
the provider's default host. The key is the provider's key variable, or an API key the CLI's own files hold. A CLI
with neither a key nor an endpoint of the user's is logged in to its vendor (a subscription): it is not routed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from worktrial.agents.presets.carry import UserSetup

_SECRET_VARIABLE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
_ENDPOINT_VARIABLE = re.compile(r"BASE_URL|API_BASE|_HOST$|ENDPOINT", re.I)


@dataclass(frozen=True)
class Upstream:
    """How a CLI reaches one provider, for routing it through the model gateway (``worktrial.gateway``)."""

    route: str
    """The provider's wire family at the gateway and in the price table: ``anthropic``, ``openai``, ``gemini``."""
    keys: tuple[str, ...]
    """The variables the CLI reads this provider's key from, in the CLI's order of preference."""
    default_base: str
    """The provider's own base URL in the CLI's convention (with ``/v1`` where the CLI expects it)."""
    base_vars: tuple[str, ...] = ()
    """The variables the CLI reads this provider's base URL from (``ANTHROPIC_BASE_URL``), in its order."""
    provider: str | None = None
    """The provider its models are priced under, when it is not ``route`` (``openrouter``)."""

    @property
    def price_provider(self) -> str:
        return self.provider or self.route


OPENAI = Upstream("openai", ("OPENAI_API_KEY",), "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE"))
ANTHROPIC = Upstream(
    "anthropic", ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"), "https://api.anthropic.com", ("ANTHROPIC_BASE_URL",)
)
GEMINI = Upstream(
    "gemini",
    ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "https://generativelanguage.googleapis.com",
    ("GOOGLE_GEMINI_BASE_URL",),
)
OPENROUTER = Upstream(
    "openai", ("OPENROUTER_API_KEY",), "https://openrouter.ai/api/v1", ("OPENROUTER_API_BASE",), "openrouter"
)
"""OpenRouter as litellm calls it (aider, mini-swe-agent): Chat Completions, ``OPENROUTER_API_BASE``."""
BY_ROUTE = {u.route: u for u in (OPENAI, ANTHROPIC, GEMINI)}


@dataclass(frozen=True)
class Configured:
    """What the user's own configuration of the CLI says about its provider, beyond the environment's variables
    (a preset's ``setup`` reads it from ``UserSetup``)."""

    base_url: str | None = None
    """The endpoint, exactly as written in a file (the copy gets the gateway's URL in its place)."""
    base_from: str | None = None
    """Where it is written: ``~/.codex/config.toml``."""
    key: str | None = None
    """An API key a file holds (Codex's ``auth.json`` after ``codex login --with-api-key``)."""
    key_from: str | None = None
    key_var: str | None = None
    """The variable the CLI reads this provider's key from, when its config names one (Codex's ``env_key``, Qwen
    Code's ``envKey``): the attempt's token goes there."""
    model: str | None = None
    """The model the configuration selects."""
    upstream: Upstream | None = None
    """The provider, when the configuration chooses it (Qwen Code's ``selectedType``, aider's ``model``)."""
    elsewhere: bool = False
    """The configuration chooses a provider the gateway does not speak for (a litellm route to Groq): not
    routed."""


SetupReader = Callable[[UserSetup, Mapping[str, str], str | None, str | None], Configured]
"""(the user's files, the environment the CLI sees, the route's provider, ``--model``) -> what the files configure."""


@dataclass(frozen=True)
class RoutePlan:
    """A routed CLI: what the gateway forwards its model calls to, and where its key comes from."""

    upstream: Upstream
    base_url: str
    base_from: str | None
    """Where the endpoint was named (``--base-url``, a variable, a file); None: the provider's default host."""
    key: str | None
    """The user's key (the gateway sends it upstream); None: the CLI's own header is passed on as it is."""
    key_var: str
    """The variable the CLI gets the attempt's token in."""
    key_from: str
    """Where the key came from, for the line a refused key ends the run with."""
    model: str | None = None
    """The model the CLI's own configuration selects, when it does."""

    def described(self, public: Callable[[str], str]) -> dict[str, str]:
        """For the envelope's agent object (``public`` strips credentials from a URL)."""
        return {
            "route": self.upstream.route,
            "base_url": public(self.base_url),
            "from": self.base_from or "the provider's default",
        }


def plan_route(
    upstream: Upstream | None, configured: Configured, env: Mapping[str, str], base_url: str | None
) -> RoutePlan | None:
    """The route of a CLI whose provider the gateway can stand in for (``upstream``), or None: not routed."""
    if configured.upstream is not None:  # the configuration names the provider (Qwen Code's selectedType)
        upstream = configured.upstream
    if configured.elsewhere:
        return None
    if upstream is None:
        return None
    keys = ((configured.key_var,) if configured.key_var else ()) + upstream.keys
    key_var = next((name for name in keys if env.get(name)), None)
    key = env[key_var] if key_var else configured.key
    base_var = next((name for name in upstream.base_vars if env.get(name)), None)
    base, base_from = upstream.default_base, None
    if base_url:
        base, base_from = base_url, "--base-url"
    elif configured.base_url:
        base, base_from = configured.base_url, configured.base_from or "the CLI's configuration"
    elif base_var:
        base, base_from = env[base_var], base_var
    if not key and base_from is None:
        return None  # a login of the CLI's own (a subscription): it talks to its vendor
    return RoutePlan(
        upstream=upstream,
        base_url=base,
        base_from=base_from,
        key=key or None,
        key_var=key_var or configured.key_var or upstream.keys[0],
        key_from=key_var or configured.key_from or "the provider's API key",
        model=configured.model,
    )


def leaves_the_environment(name: str, upstream: Upstream) -> bool:
    """Whether a provider variable leaves a routed CLI's environment: its keys and endpoints (the gateway stands
    in for them); settings such as ``OPENAI_MODEL`` stay."""
    return bool(_SECRET_VARIABLE.search(name) or _ENDPOINT_VARIABLE.search(name)) or name in upstream.base_vars
