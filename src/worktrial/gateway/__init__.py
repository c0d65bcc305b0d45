"""The run's model gateway: agents reach their providers through it with a per-attempt token (docs/gateway.md)."""

from worktrial.gateway.server import Gateway
from worktrial.gateway.session import GatewayReport, PriceFn, ProviderFailure, Route, RunSpend, Session

__all__ = ["Gateway", "GatewayReport", "PriceFn", "ProviderFailure", "Route", "RunSpend", "Session"]
