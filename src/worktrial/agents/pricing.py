"""Price table and cost computation.

Prices ship as ``worktrial/data/prices.json`` (USD per million tokens, with the date they were taken) and can be
overridden per route in config with ``[pricing."provider/model"]`` (or ``[pricing."provider/*"]`` for every model of
a provider, e.g. a local server that costs nothing). A route with no price has cost ``None``: unknown is never free.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from worktrial.errors import BadInputError
from worktrial.model.records import Tokens

PER_MILLION = 1_000_000
_FIELDS = ("input", "output", "cached_input", "cache_write")


@dataclass(frozen=True)
class Price:
    """USD per million tokens. Missing cache prices fall back to the input price (the conservative choice)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


@dataclass(frozen=True)
class PriceTable:
    taken_on: str
    models: dict[str, Price]


@dataclass(frozen=True)
class ResolvedPrice:
    """A route's price and where it came from, for the envelope's agent settings."""

    price: Price
    source: Literal["table", "config"]
    taken_on: str | None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BadInputError(f"{where}: must be a non-negative number (got {value!r})")
    return float(value)


def parse_price(raw: Any, where: str) -> Price:
    """A price from a JSON object or a TOML table; bad input names the exact place."""
    if not isinstance(raw, dict):
        raise BadInputError(f"{where}: must be a table of {', '.join(_FIELDS)}")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise BadInputError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
    for required in ("input", "output"):
        if required not in raw:
            raise BadInputError(f"{where}: needs both input and output prices")
    return Price(
        input=_number(raw["input"], f"{where}.input"),
        output=_number(raw["output"], f"{where}.output"),
        cached_input=_number(raw["cached_input"], f"{where}.cached_input") if "cached_input" in raw else None,
        cache_write=_number(raw["cache_write"], f"{where}.cache_write") if "cache_write" in raw else None,
    )


@cache
def price_table() -> PriceTable:
    """The shipped price table (read once per process)."""
    text = resources.files("worktrial").joinpath("data/prices.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    models = {route: parse_price(entry, f"prices.json: {route}") for route, entry in raw["models"].items()}
    return PriceTable(taken_on=str(raw["taken_on"]), models=models)


def resolve_price(route: str, config: dict[str, Any] | None = None) -> ResolvedPrice | None:
    """The price for ``provider/model``: config (exact, then ``provider/*``) wins over the table; else None."""
    overrides = (config or {}).get("pricing", {})
    if not isinstance(overrides, dict):
        raise BadInputError('config: [pricing] must be a table of "provider/model" tables')
    provider = route.partition("/")[0]
    for key in (route, f"{provider}/*"):
        if key in overrides:
            return ResolvedPrice(parse_price(overrides[key], f'config: pricing."{key}"'), "config", None)
    table = price_table()
    if route in table.models:
        return ResolvedPrice(table.models[route], "table", table.taken_on)
    return None


def cost_usd(tokens: Tokens, price: Price | None) -> float | None:
    """Cost of the given usage, or None when the price or the input/output counts are unknown.

    ``tokens.input`` counts every prompt token; ``cached_input`` and ``cache_creation`` are the parts of it billed
    at the cache read and cache write prices.
    """
    if price is None or tokens.input is None or tokens.output is None:
        return None
    cached = tokens.cached_input or 0
    created = tokens.cache_creation or 0
    fresh = max(0, tokens.input - cached - created)
    cached_price = price.input if price.cached_input is None else price.cached_input
    write_price = price.input if price.cache_write is None else price.cache_write
    total = fresh * price.input + cached * cached_price + created * write_price + tokens.output * price.output
    return round(total / PER_MILLION, 8)
