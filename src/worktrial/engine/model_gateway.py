"""An attempt's use of the run's model gateway: its session, prices, and what the traffic says about the attempt.

The gateway counts usage from the provider's own answers, so where an agent's model calls went through it those
counts are the attempt's; the agent's own report stays as a cross-check, and a disagreement becomes a note. A
provider failure the gateway saw decides the outcome before the agent's claim does: a refused key or an unknown
model stops the run, a 5xx, 429 or lost connection the agent's last call ended on is an infrastructure error
(``--retry-errors`` runs the attempt again), never the agent's failure.
"""

from __future__ import annotations

import threading

from worktrial.agents.base import AgentOptions, AgentResult
from worktrial.agents.presets import PRESETS
from worktrial.agents.pricing import cost_usd, resolve_price
from worktrial.engine.executor import AttemptSpec
from worktrial.gateway import Gateway, GatewayReport, PriceFn, Session
from worktrial.isolation.sandbox import Sandbox, decide
from worktrial.model.records import GatewayCounts, Tokens

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


def routes_through_gateway(agent: str) -> bool:
    """Whether the agent's model calls go through the gateway (from inside any sandbox, even to a loopback
    ``--base-url``): the presets that name their upstream, and the command agent given ``--base-url``."""
    spec = PRESETS.get(agent)
    return agent == "command" or (spec is not None and spec.upstream is not None)


def own_network(spec: AttemptSpec) -> bool:
    """Whether the agent runs in a network namespace of its own, where the host's loopback is out of reach."""
    decision = spec.sandbox_decision or decide(spec.sandbox)
    return decision.kind == "bubblewrap" and decision.network in ("off", "on")


def open_session(gateway: Gateway, spec: AttemptSpec, cancel: threading.Event, sandbox: Sandbox) -> Session:
    """The attempt's session; an agent in a container reaches it through a forwarder the container gets from the
    host (``Sandbox.reach_gateway``), one in a bubblewrap sandbox of its own network through its socket."""
    session = gateway.open(
        cancel,
        price=gateway_price(spec.agent.options),
        cost_cap=spec.max_cost_per_attempt,
        own_network=own_network(spec) and sandbox.kind != "container",
    )
    sandbox.reach_gateway(gateway.forward_target)
    return session


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
