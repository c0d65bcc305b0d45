"""The run's model gateway: agents reach their providers through it with a per-attempt token (docs/gateway.md).

``Gateway`` (the server: uvicorn, starlette, httpx, asyncio) is imported when it is first asked for, so what only
needs a session's interface (the agent protocol, routes) does not load the web stack.
"""

from typing import TYPE_CHECKING, Any

from worktrial.gateway.session import GatewayReport, PriceFn, ProviderFailure, Route, RunSpend, Session

if TYPE_CHECKING:
    from worktrial.gateway.server import Gateway

__all__ = ["Gateway", "GatewayReport", "PriceFn", "ProviderFailure", "Route", "RunSpend", "Session"]


def __getattr__(name: str) -> Any:
    if name == "Gateway":
        from worktrial.gateway.server import Gateway

        return Gateway
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
