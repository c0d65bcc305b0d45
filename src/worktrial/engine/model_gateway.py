"""An attempt's use of the run's model gateway: its session, prices, and what the traffic says about the attempt.

The gateway counts usage from the provider's own answers, so where an agent's model calls went through it those
counts are the attempt's; the agent's own report stays as a cross-check, and a disagreement becomes a note. A
provider failure the gateway saw decides the outcome before the agent's claim does: a refused key or an unknown
model stops the run, a 5xx, 429 or lost connection the agent's last call ended on is an infrastructure error
(``--retry-errors`` runs the attempt again), never the agent's failure.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from worktrial.agents.base import AgentOptions, AgentResult
from worktrial.agents.pricing import cost_usd, resolve_price
from worktrial.engine.executor import AgentRef, AttemptSpec
from worktrial.gateway import GatewayReport, PriceFn, Session
from worktrial.isolation.sandbox import decide
from worktrial.model.records import GatewayCounts, Tokens

if TYPE_CHECKING:
    from worktrial.gateway import Gateway

COST_TOLERANCE = 1e-6


def gateway_price(options: AgentOptions) -> PriceFn:
    """Prices by the model the provider answered with, else the one asked for, else ``--model`` as given."""

    def price(provider: str, answered: str | None, requested: str | None, tokens: Tokens) -> float | None:
        routes = [f"{provider}/{m}" for m in (answered, requested) if m]
        if options.model:
            routes.append(options.model if "/" in options.model else f"{provider}/{options.model}")
        for route in routes:
            resolved = resolve_price(route, options.config)
            if resolved is not None:
                return cost_usd(tokens, resolved.price)
        return None

    return price


NEVER_ROUTED = frozenset({"nop", "oracle", "builtin"})
"""Bundled agents that never call a provider from their processes (the built-in agent calls its model from the
harness itself): their attempts get no gateway session."""


def routes_through_gateway(agent: str) -> bool:
    """Whether the agent's model calls go through the gateway (from inside any sandbox, even to a loopback
    ``--base-url``): the presets that name their upstream, and the command agent given ``--base-url``."""
    if agent == "command":
        return True
    if agent in NEVER_ROUTED:
        return False
    from worktrial.agents.presets import PRESETS  # the preset table, only for an agent that may be a preset

    spec = PRESETS.get(agent)
    return spec is not None and spec.upstream is not None


def may_route(agent: AgentRef) -> bool:
    """Whether an attempt of ``agent`` gets a session at the run's gateway: every agent but the bundled ones that
    never route (a command agent only with ``--base-url``). Presets, custom and plugin agents get one; whether they
    route through it is theirs to decide per attempt (a preset routes where its key or ``--base-url`` is given)."""
    if agent.name == "command":
        return agent.options.base_url is not None
    return agent.name not in NEVER_ROUTED


class RunGateway:
    """The run's model gateway, made when the first attempt that may route through it starts: a run whose agent
    never does (nop, oracle, the built-in agent, a command without ``--base-url``) never imports its web stack
    (uvicorn, starlette, httpx, asyncio), nor starts its thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gateway: Gateway | None = None
        self._limit: tuple[float, float] | None = None

    def for_attempt(self, spec: AttemptSpec) -> Gateway | None:
        """The gateway an attempt of ``spec`` opens its session at, or None when its agent never routes."""
        if not may_route(spec.agent):
            return None
        with self._lock:
            if self._gateway is None:
                from worktrial.gateway.server import Gateway

                self._gateway = Gateway()
                if self._limit is not None:
                    self._gateway.limit_run(*self._limit)
            return self._gateway

    def limit_run(self, max_cost: float, spent: float) -> None:
        """``Gateway.limit_run``, now or when the gateway is made."""
        with self._lock:
            self._limit = (max_cost, spent)
            if self._gateway is not None:
                self._gateway.limit_run(max_cost, spent)

    def close(self) -> None:
        with self._lock:
            gateway, self._gateway = self._gateway, None
        if gateway is not None:
            gateway.close()


def own_network(spec: AttemptSpec) -> bool:
    """Whether the agent runs in a network namespace of its own, where the host's loopback is out of reach."""
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.kind == "bubblewrap" and decision.network in ("off", "on")


def open_session(gateway: Gateway, spec: AttemptSpec, cancel: threading.Event) -> Session:
    return gateway.open(
        cancel,
        price=gateway_price(spec.agent.options),
        cost_cap=spec.max_cost_per_attempt,
        own_network=own_network(spec),
    )


def apply_report(result: AgentResult, report: GatewayReport, agent: str) -> None:
    """The gateway's counts become the attempt's usage; what the agent reported differently becomes a note."""
    if not report.requests:
        return
    own = result.usage
    seen = report.usage
    notes = list(own.notes)
    mine, theirs = own.tokens, seen.tokens
    if (mine.input, mine.output) != (None, None) and (mine.input, mine.output) != (theirs.input, theirs.output):
        notes.append(
            f"usage cross-check: {agent} reported {mine.input} input / {mine.output} output tokens, the gateway "
            f"counted {theirs.input} / {theirs.output} from the provider's answers (the gateway's are recorded)"
        )
    cost = seen.cost_usd
    if cost is None and own.cost_usd is not None:
        cost = own.cost_usd
        notes.append(f"the gateway could not price the model; the cost is {agent}'s own report")
    elif cost is not None and own.cost_usd is not None and abs(cost - own.cost_usd) > COST_TOLERANCE:
        notes.append(
            f"cost cross-check: {agent} reported ${own.cost_usd:.6f}, the price table gives ${cost:.6f} for the "
            "gateway's counts (the latter is recorded)"
        )
    result.usage = own.model_copy(
        update={
            "tokens": theirs,
            "cost_usd": cost,
            "model": seen.model or own.model,
            "latency_ms": seen.latency_ms,
            "notes": notes + [n for n in seen.notes if n not in notes],
            "gateway": GatewayCounts(
                requests=report.requests,
                statuses=report.statuses,
                failure=report.failure.category.value if report.failure is not None else None,
            ),
        }
    )
