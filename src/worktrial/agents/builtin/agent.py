"""The builtin coding agent: one route, one settings object, a fresh SDK client and loop per attempt."""

from __future__ import annotations

import importlib.util
import socket
from typing import Any
from urllib.parse import urlsplit

from worktrial.agents.base import AgentContext, AgentOptions, AgentResult
from worktrial.agents.builtin.loop import AgentLoop
from worktrial.agents.builtin.routes import resolve_route
from worktrial.agents.builtin.settings import load_settings
from worktrial.agents.builtin.specs import TOOL_NAMES
from worktrial.agents.builtin.transport import make_transport
from worktrial.agents.pricing import resolve_price
from worktrial.errors import BadInputError

_API_NAMES = {"openai": "openai-chat-completions", "anthropic": "anthropic-messages"}


PROBE_TIMEOUT_SECS = 3.0


def endpoint_refuses(base_url: str) -> str | None:
    """Why the provider endpoint certainly cannot answer (connection refused), else None.

    One TCP connection, no request and no credentials: a server that is down fails every attempt the same way,
    so it is caught before the first one. Slow networks, DNS trouble or proxies are left to the attempts, whose
    errors say more than a probe can.
    """
    parts = urlsplit(base_url)
    if not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=PROBE_TIMEOUT_SECS):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except OSError:
        return None


class BuiltinAgent:
    """worktrial's own provider-agnostic coding agent (``--model provider/model``)."""

    name = "builtin"

    def __init__(self, options: AgentOptions) -> None:
        self.route = resolve_route(options.model, options.base_url, options.config)
        self.settings = load_settings(options.config, options.settings)
        self.price = resolve_price(self.route.route, options.config)

    def describe(self) -> dict[str, Any]:
        """Route, budgets and tools for the envelope; the key (and any credentials in the URL) never appear."""
        settings = self.settings
        info: dict[str, Any] = {
            "name": self.name,
            "route": self.route.route,
            "api": _API_NAMES[self.route.api],
            "base_url": self.route.public_base_url(),
            "max_turns": settings.max_turns,
            "context_window": settings.context_window or self.route.default_context_tokens,
            "tools": list(TOOL_NAMES),
        }
        if settings.max_tokens is not None:
            info["max_total_tokens"] = settings.max_tokens
        if settings.temperature is not None:
            info["temperature"] = settings.temperature
        if settings.max_output_tokens is not None:
            info["max_output_tokens"] = settings.max_output_tokens
        if self.price is not None:
            info["pricing"] = {"source": self.price.source, "taken_on": self.price.taken_on}
        return info

    def preflight(self) -> None:
        package = "anthropic" if self.route.api == "anthropic" else "openai"
        if importlib.util.find_spec(package) is None:
            raise BadInputError(f"the builtin agent needs the {package} package: pip install {package}")
        if self.route.key_required and not self.route.has_key:
            raise BadInputError(f"--model {self.route.route} needs an API key: set {self.route.key_env}")
        refused = endpoint_refuses(self.route.base_url)
        if refused:
            raise BadInputError(
                f"--model {self.route.route}: nothing answers at {self.route.public_base_url()} ({refused}); "
                "start the model server or fix --base-url"
            )

    def run(self, ctx: AgentContext) -> AgentResult:
        loop = AgentLoop(ctx, self.route, self.settings, self.price.price if self.price else None)
        transport = make_transport(self.route, self.settings, loop.on_status)
        try:
            return loop.run(transport)
        finally:
            transport.close()
