"""One attempt's account at the gateway: its token, its upstreams, and what the gateway saw of its traffic.

The token is random and means nothing outside this run: the agent holds it in place of the provider's key, the
gateway swaps the real key in on the way out. Everything here is counts (tokens, requests, statuses, latency),
never a prompt or a completion.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from worktrial.gateway.recorder import Recorder
from worktrial.model.records import FATAL_ERRORS, ErrorCategory, Tokens, Usage
from worktrial.util import public_url

TOKEN_PREFIX = "wt-gw-"
TRANSIENT_LIMIT = 3
"""Consecutive failed exchanges (5xx, 429, no connection) after which the gateway ends the attempt: the CLI's own
retries did not help, and waiting for its timeout would only cost time."""
MAX_LATENCY_SAMPLES = 10_000

PriceFn = Callable[[str, str | None, str | None, Tokens], float | None]
"""(price provider, model the provider answered, model the request asked for, tokens) -> USD, or None: unpriced."""


@dataclass(frozen=True)
class Route:
    """One upstream an attempt's agent reaches through the gateway."""

    name: str
    """The path segment after the token (``anthropic``, ``openai``, ``gemini``)."""
    base_url: str
    """The provider's base URL in the CLI's own convention (what the CLI would have been given)."""
    key: str | None
    """The user's real key, sent upstream in place of the token (never shown to the agent)."""
    provider: str
    """The provider the price table lists the models under (``anthropic``, ``openai``, ``gemini``)."""
    key_name: str = "the provider's API key"
    """Where the key came from, for the one line a refused key ends the run with."""


class RunSpend:
    """The run's spend as the gateway counts it live, over every attempt, against the run's ``--max-cost``.

    Once a model call's cost takes the total past the cap, ``on_exceeded`` is called (once): the gateway refuses
    every further call and ends the attempts still running. Thread-safe.
    """

    def __init__(self, cap: float, spent: float, on_exceeded: Callable[[], None]) -> None:
        self.cap = cap
        self.spent = spent
        """Starts from what the run's stored attempts spent (a resumed run, earlier configurations of a matrix)."""
        self.exceeded = spent > cap
        self._on_exceeded = on_exceeded
        self._lock = threading.Lock()

    def add(self, cost: float) -> None:
        with self._lock:
            self.spent = round(self.spent + cost, 8)
            crossed = not self.exceeded and self.spent > self.cap
            self.exceeded = self.exceeded or crossed
        if crossed:
            self._on_exceeded()

    def reason(self) -> str:
        with self._lock:
            spent = self.spent
        return (
            f"the budget --max-cost ${self.cap:g} is spent: ${spent:.4f} by the model gateway's count of every "
            "attempt's calls, so it refused further calls and ended the running attempts"
        )


@dataclass(frozen=True)
class ProviderFailure:
    """A provider failure the gateway saw, sorted into worktrial's error categories."""

    category: ErrorCategory
    message: str
    status: int | None = None

    @property
    def fatal(self) -> bool:
        return self.category in FATAL_ERRORS


@dataclass(frozen=True)
class GatewayReport:
    """What went through the gateway for one attempt."""

    usage: Usage
    requests: int
    """Model calls forwarded to the provider (chat, responses, messages, generateContent)."""
    statuses: dict[str, int]
    """The model calls' statuses ("0": no answer)."""
    failure: ProviderFailure | None
    """Why the attempt cannot be the agent's doing: a fatal failure (refused key, unknown model), or a transient
    one (5xx, 429, no connection, a cut stream) that the agent's last model call ended on."""
    over_cap: bool
    """The attempt's spend passed ``--max-cost-per-attempt`` and the gateway refused further requests."""
    over_budget: str | None = None
    """Why the run's ``--max-cost`` cut this attempt short (the gateway refused its calls or ended it), or None."""
    other_requests: int = 0
    """Requests that were no model call (a model list, a HEAD probe, a WebSocket attempt): forwarded, not counted
    in ``requests``."""
    waiting: tuple[float, ...] = ()
    """For each model call still in flight when the report was taken: seconds since the provider last sent a byte
    of it (since it was sent, when no answer had begun)."""
    startup_secs: float | None = None
    """Seconds from the session's opening (the agent's start) to its first model call; None: it made none."""
    where: str | None = None
    """The upstream the agent's model calls went to (its public URL, no credentials), when it routed one."""


@dataclass
class Call:
    """One request in flight through the gateway (the gateway's loop writes it, the attempt's thread reads it)."""

    model_call: bool
    started: float = field(default_factory=time.monotonic)
    last_byte: float | None = None
    """When the provider last sent a byte of the answer (None: nothing yet)."""
    abort: Callable[[], None] | None = None
    """Ends the call from any thread (set by the gateway): the attempt is over, nobody waits for the answer."""

    def idle(self, now: float) -> float:
        return now - (self.last_byte if self.last_byte is not None else self.started)


@dataclass
class _Ledger:
    tokens: Tokens = field(default_factory=Tokens)
    cost: float | None = None
    unpriced: int = 0
    model: str | None = None
    requests: int = 0
    other_requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    first_call: float | None = None
    latency_ms: list[float] = field(default_factory=list)
    fatal: ProviderFailure | None = None
    last_failure: ProviderFailure | None = None
    consecutive: int = 0
    over_cap: bool = False
    over_budget: bool = False


class Session:
    """One attempt's token, routes and ledger. Thread-safe: the gateway's loop writes, the attempt's thread reads."""

    def __init__(
        self,
        listening: Callable[[], tuple[str, tuple[str, ...]]],
        price: PriceFn | None,
        cost_cap: float | None,
        cancel: threading.Event,
        socket_dir: Path | None = None,
        on_close: Callable[[Session], None] | None = None,
        run_spend: RunSpend | None = None,
    ) -> None:
        self.token = TOKEN_PREFIX + secrets.token_urlsafe(24)
        self._listening = listening
        """Starts the gateway (once) and says its base URL and the prefix that runs a program with the gateway's
        port forwarded into its own network namespace (empty when the program shares the host's loopback)."""
        self.forward: tuple[str, ...] = ()
        self.price = price
        self.cost_cap = cost_cap
        self.cancel = cancel
        self.socket_dir = socket_dir
        """The directory of the gateway's unix socket, which a sandbox must show for the forward to work."""
        self.routes: dict[str, Route] = {}
        self._ledger = _Ledger()
        self._lock = threading.Lock()
        self._on_close = on_close
        self.run_spend = run_spend
        """The run's live spend against ``--max-cost`` (None: the run has no budget)."""
        self.used = False
        self.recorder: Recorder | None = None
        """Set when the run records trajectories: the gateway hands it every model call (``recorder.py``)."""
        self.opened = time.monotonic()
        self._open_calls: dict[int, Call] = {}

    # -- the agent's side ----------------------------------------------------------------------------------------

    def route(self, route: Route) -> str:
        """Register an upstream; the URL the agent uses in place of ``route.base_url``."""
        base_url, self.forward = self._listening()
        with self._lock:
            self.routes[route.name] = route
            self.used = True
        return f"{base_url}/g/{self.token}/{route.name}"

    def bypass_proxies(self, env: dict[str, str]) -> None:
        """Keep the agent's own proxy settings (``HTTPS_PROXY``) off the gateway's loopback address."""
        for name in ("NO_PROXY", "no_proxy"):
            present = [h for h in env.get(name, "").split(",") if h.strip()]
            env[name] = ",".join([*present, *(h for h in ("127.0.0.1", "localhost") if h not in present)])

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run so that it reaches the gateway at ``base_url`` from inside its own network namespace."""
        return [*self.forward, *argv] if self.forward and self.used else list(argv)

    def report(self) -> GatewayReport:
        with self._lock:
            ledger = self._ledger
            notes = []
            if ledger.unpriced:
                notes.append(f"gateway: {ledger.unpriced} answer(s) of a model without a price: the cost is unknown")
            usage = Usage(
                tokens=ledger.tokens,
                cost_usd=None if ledger.unpriced else ledger.cost,
                model=ledger.model,
                latency_ms=list(ledger.latency_ms),
                notes=notes,
            )
            failure = ledger.fatal or (ledger.last_failure if ledger.consecutive else None)
            over_budget = ledger.over_budget
            now = time.monotonic()
            waiting = tuple(round(c.idle(now), 3) for c in self._open_calls.values() if c.model_call)
            startup = None if ledger.first_call is None else round(ledger.first_call - self.opened, 3)
            where = sorted({public_url(r.base_url) for r in self.routes.values()})
        cut = self.run_spend.reason() if over_budget and self.run_spend is not None else None
        return GatewayReport(
            usage,
            ledger.requests,
            dict(ledger.statuses),
            failure,
            ledger.over_cap,
            cut,
            other_requests=ledger.other_requests,
            waiting=waiting,
            startup_secs=startup,
            where=", ".join(where) or None,
        )

    def close(self) -> None:
        """The attempt is over: its token is worthless from now on, and its calls still in flight are ended."""
        if self._on_close is not None:
            self._on_close(self)
        self.abort_calls()

    def abort_calls(self) -> None:
        with self._lock:
            calls = list(self._open_calls.values())
        for call in calls:
            if call.abort is not None:
                call.abort()

    # -- the gateway's side --------------------------------------------------------------------------------------

    def end_for_budget(self) -> None:
        """The run's budget is spent: end this attempt (if its agent is reaching a model through the gateway)."""
        with self._lock:
            if not self.used:
                return
            self._ledger.over_budget = True
        self.cancel.set()

    def refusal(self) -> tuple[int, str] | None:
        """Why the gateway answers a request itself instead of forwarding it (status, message), or None."""
        if self.run_spend is not None and self.run_spend.exceeded:
            self.end_for_budget()
            return 429, "worktrial: the run's --max-cost is spent"
        with self._lock:
            ledger = self._ledger
            if ledger.over_cap:
                return 429, "worktrial: this attempt's --max-cost-per-attempt is spent"
            if ledger.fatal is not None:
                return ledger.fatal.status or 401, f"worktrial: {ledger.fatal.message}"
            if ledger.consecutive >= TRANSIENT_LIMIT and ledger.last_failure is not None:
                return 503, f"worktrial: {ledger.last_failure.message}"
        return None

    def begin(self, model_call: bool) -> Call:
        """A request is on its way upstream."""
        call = Call(model_call)
        with self._lock:
            self._open_calls[id(call)] = call
            if model_call and self._ledger.first_call is None:
                self._ledger.first_call = call.started
        return call

    def end(self, call: Call) -> None:
        with self._lock:
            self._open_calls.pop(id(call), None)

    def answered(self, call: Call, status: int) -> None:
        """Any answer from upstream, or none (``status`` 0), counted once per request: model calls apart."""
        latency_ms = (time.monotonic() - call.started) * 1000
        with self._lock:
            ledger = self._ledger
            if not call.model_call:
                ledger.other_requests += 1
                return
            ledger.requests += 1
            ledger.statuses[str(status)] = ledger.statuses.get(str(status), 0) + 1
            if len(ledger.latency_ms) < MAX_LATENCY_SAMPLES:
                ledger.latency_ms.append(round(latency_ms, 3))

    def used_tokens(self, route: Route, answered: str | None, requested: str | None, tokens: Tokens | None) -> None:
        """A successful exchange and the usage the provider reported in it."""
        cost = self._count(route, answered, requested, tokens)
        if cost is not None and self.run_spend is not None:
            self.run_spend.add(cost)  # outside the ledger's lock: passing the budget ends every session, this one too

    def _count(self, route: Route, answered: str | None, requested: str | None, tokens: Tokens | None) -> float | None:
        """Book one successful exchange; its cost (None: no usage, or unpriced)."""
        with self._lock:
            ledger = self._ledger
            ledger.consecutive = 0
            ledger.last_failure = None
            if answered:
                # Through an aggregator (OpenRouter answers "openai/gpt-5.1"), the model is named as routed.
                ledger.model = answered if route.provider == route.name else f"{route.provider}/{answered}"
            if tokens is None:
                return None
            ledger.tokens = ledger.tokens.add(tokens)
            cost = self.price(route.provider, answered, requested, tokens) if self.price is not None else None
            if cost is None:
                ledger.unpriced += 1
            else:
                ledger.cost = round((ledger.cost or 0.0) + cost, 8)
            if self.cost_cap is not None and ledger.cost is not None and ledger.cost > self.cost_cap:
                ledger.over_cap = True
                self.cancel.set()
            return cost

    def failed(self, failure: ProviderFailure) -> None:
        """A failed exchange: a fatal one ends the attempt at once, transient ones after ``TRANSIENT_LIMIT``."""
        with self._lock:
            ledger = self._ledger
            if failure.fatal:
                ledger.fatal = ledger.fatal or failure
                self.cancel.set()
                return
            ledger.consecutive += 1
            ledger.last_failure = failure
            if ledger.consecutive >= TRANSIENT_LIMIT:
                self.cancel.set()


def classify(route: Route, status: int, generating: bool, requested: str | None) -> ProviderFailure | None:
    """The failure an upstream status stands for, or None when it is the agent's business (a 400 for a request it
    got wrong, a 404 of an endpoint that is not a model call). No answer at all: ``no_answer``."""
    where = public_url(route.base_url)
    if status in (401, 403):
        return ProviderFailure(
            ErrorCategory.PROVIDER_AUTH,
            f"the provider at {where} refused the credentials (HTTP {status}); check {route.key_name}",
            status,
        )
    if status == 404 and generating:
        model = f" {requested!r}" if requested else ""
        return ProviderFailure(
            ErrorCategory.MODEL_NOT_FOUND,
            f"the provider at {where} does not know this model{model} (HTTP 404); check --model (and --base-url)",
            status,
        )
    if status == 429:
        return ProviderFailure(ErrorCategory.PROVIDER_RATE_LIMIT, f"rate limited by {where} (HTTP 429)", status)
    if status >= 500:
        return ProviderFailure(ErrorCategory.PROVIDER_SERVER, f"the provider at {where} failed (HTTP {status})", status)
    return None


UNREACHABLE = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol", "ProxyError"})
"""httpx's errors for a provider the gateway could not connect to (refused, no route, DNS, a proxy that refused)."""
SLOW = frozenset({"ReadTimeout", "PoolTimeout", "WriteTimeout"})
"""httpx's errors for a provider that took the connection but did not answer in time."""


def no_answer(route: Route, error: str) -> ProviderFailure:
    """The failure of a request that got no answer at all, by the transport error that ended it."""
    where = public_url(route.base_url)
    if error in UNREACHABLE:
        return ProviderFailure(
            ErrorCategory.PROVIDER_UNREACHABLE, f"the provider at {where} could not be reached ({error})"
        )
    if error in SLOW:
        return ProviderFailure(ErrorCategory.PROVIDER_SLOW, f"the provider at {where} did not answer in time ({error})")
    said = f" ({error})" if error else ""
    return ProviderFailure(
        ErrorCategory.PROVIDER_SERVER, f"the provider at {where} closed the call without an answer{said}"
    )


def stream_cut(route: Route, status: int, error: str | None) -> ProviderFailure:
    """A streamed answer that ended before its last event (the connection dropped, or closed early)."""
    how = f"broke off ({error})" if error else "ended early"
    return ProviderFailure(
        ErrorCategory.PROVIDER_STREAM_CUT,
        f"the provider at {public_url(route.base_url)} answered {status} and its stream {how}, before the answer ended",
        status,
    )
