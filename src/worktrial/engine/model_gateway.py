"""An attempt's use of the run's model gateway: its session, prices, and what the traffic says about the attempt.

The gateway counts usage from the provider's own answers, so where an agent's model calls went through it those
counts are the attempt's; the agent's own report stays as a cross-check, and a disagreement becomes a note. A
provider failure the gateway saw decides the outcome before the agent's claim does: a refused key or an unknown
model stops the run; a 5xx, 429, unreachable provider or cut stream the agent's last call ended on, or a call still
waiting on the provider when the attempt ended (``provider_slow``), is an infrastructure error (``--retry-errors``
runs the attempt again), never the agent's failure. Conversely a provider failure an agent CLI reports although the
gateway saw it make no model call is the CLI's own (its configuration), not the provider's.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from worktrial.agents.base import AgentError, AgentOptions, AgentResult
from worktrial.agents.pricing import cost_usd, resolve_price
from worktrial.engine.executor import AgentRef, AttemptSpec
from worktrial.errors import BadInputError
from worktrial.gateway import GatewayReport, PriceFn, ProviderFailure, Session
from worktrial.isolation.sandbox import Sandbox, SandboxDecision, decide
from worktrial.model.records import ErrorCategory, GatewayCounts, Tokens

if TYPE_CHECKING:
    from worktrial.gateway import Gateway

COST_TOLERANCE = 1e-6
SLOW_CALL_SECS = 30.0
"""A model call still without a byte from the provider after this long (or a quarter of the task's timeout, if
less) when the attempt ends made the provider, not the agent, the reason it ended."""
PROVIDER_CATEGORIES = frozenset(
    {
        ErrorCategory.PROVIDER_AUTH,
        ErrorCategory.MODEL_NOT_FOUND,
        ErrorCategory.PROVIDER_RATE_LIMIT,
        ErrorCategory.PROVIDER_SERVER,
        ErrorCategory.PROVIDER_UNREACHABLE,
        ErrorCategory.PROVIDER_BAD_REQUEST,
        ErrorCategory.PROVIDER_ERROR,
    }
)
"""What an agent CLI may report of its provider: only true when a model call reached the provider."""


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

    @property
    def rate_limited(self) -> int:
        """The provider's 429s seen at the gateway so far (none before it is made): ``--jobs auto`` backs off."""
        gateway = self._gateway
        return gateway.rate_limited if gateway is not None else 0

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


def unreachable_config(agent: str, description: Mapping[str, Any], decision: SandboxDecision) -> str | None:
    """Before the first attempt: a loopback URL the agent's own configuration names, which a sandbox with a network
    of its own cannot reach. Refused (one line) when the agent is not routed, whose model calls would go there and
    fail until its timeout; a warning when it is (the URL is then some other service of its configuration)."""
    endpoints = description.get("unrouted_endpoints") or []
    if not endpoints or decision.kind != "bubblewrap" or decision.network not in ("on", "off"):
        return None
    where = (
        f"agent {agent}: its configuration names {endpoints[0]}, on this host's loopback, which attempts cannot "
        f"reach on a network of their own (--network {decision.network})"
    )
    if "upstream" not in description:
        raise BadInputError(
            f"{where}, and worktrial does not carry it through its model gateway for {agent}; give it as "
            "--base-url (with --model) so the gateway does, or pass --network host"
        )
    return f"{where}; if {agent} needs it, pass --network host"


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


def slow_after(timeout_secs: float) -> float:
    """How long a model call may wait on the provider at the attempt's end before the provider is to blame."""
    return min(SLOW_CALL_SECS, timeout_secs / 4)


def apply_report(result: AgentResult, report: GatewayReport, agent: str, timeout_secs: float) -> GatewayReport:
    """The gateway's counts become the attempt's usage (what the agent reported differently becomes a note), and
    the report comes back with the provider failure that decides the attempt, if any (``GatewayReport.failure``)."""
    if report.where is None:  # the agent routed nothing through the gateway (a login of the CLI's own)
        return report
    failure = report.failure or _slow(report, result, timeout_secs)
    if not report.requests:
        _no_model_call(result, agent)
    result.usage = result.usage.model_copy(
        update={
            "gateway": GatewayCounts(
                requests=report.requests,
                statuses=report.statuses,
                failure=failure.category.value if failure is not None else None,
                other_requests=report.other_requests,
                agent_startup_secs=report.startup_secs,
                upstream=report.where,
            )
        }
    )
    if report.requests:
        _take_counts(result, report, agent)
    return dataclasses.replace(report, failure=failure)


def _slow(report: GatewayReport, result: AgentResult, timeout_secs: float) -> ProviderFailure | None:
    """``provider_slow``: the agent ended (its timeout, its own client's) while a model call waited on the provider."""
    waited = max(report.waiting, default=0.0)
    if result.claimed is True or waited < slow_after(timeout_secs):
        return None
    where = f" at {report.where}" if report.where else ""
    return ProviderFailure(
        ErrorCategory.PROVIDER_SLOW,
        f"the agent's model call had waited {waited:.0f}s on the provider{where} without an answer when the "
        "attempt ended",
    )


def _no_model_call(result: AgentResult, agent: str) -> None:
    """The agent was routed and no model call reached the gateway: a provider failure it reports is its own
    configuration's (Gemini CLI's "Invalid auth method selected" exits as if the key were refused), and a timeout
    was spent before its first call."""
    error = result.error
    if error is not None and error.category in PROVIDER_CATEGORIES:
        result.error = AgentError(
            ErrorCategory.AGENT_FAILED,
            f"{agent} reported a provider failure but sent no model call (the model gateway saw none), so its own "
            f"configuration stopped it: {error.message}",
            fatal=True,
        )
    elif result.timed_out:
        result.usage.notes.append(f"{agent} timed out before its first model call (the model gateway saw none)")


def _take_counts(result: AgentResult, report: GatewayReport, agent: str) -> None:
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
        }
    )
