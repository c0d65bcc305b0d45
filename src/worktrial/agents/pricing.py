"""Price table and cost computation.

Prices ship as ``worktrial/data/prices.json`` (USD per million tokens, with the date they were taken) and can be
overridden per route in config with ``[pricing."provider/model"]`` (or ``[pricing."provider/*"]`` for every model of
a provider, e.g. a local server that costs nothing). A route with no price has cost ``None``: unknown is never free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import ValidationError

from worktrial.model.config import Config, Price, describe_errors
from worktrial.model.records import Tokens

PER_MILLION = 1_000_000
__all__ = ["Price", "PriceTable", "ResolvedPrice", "cost_usd", "price_table", "resolve_price"]


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


@cache
def price_table() -> PriceTable:
    """The shipped price table (read once per process)."""
    text = resources.files("worktrial").joinpath("data/prices.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    try:
        # The shipped table has the shape of config's [pricing]: the same model checks both.
        models = Config.model_validate({"pricing": raw["models"]}).pricing
    except ValidationError as exc:  # a packaging bug, not user input: say where, loudly
        raise RuntimeError(describe_errors(exc, "worktrial/data/prices.json", Config)) from None
    return PriceTable(taken_on=str(raw["taken_on"]), models=models)


def resolve_price(route: str, config: Config | None = None) -> ResolvedPrice | None:
    """The price for ``provider/model``: config (exact, then ``provider/*``) wins over the table; else None."""
    overrides = config.pricing if config is not None else {}
    provider = route.partition("/")[0]
    for key in (route, f"{provider}/*"):
        if key in overrides:
            return ResolvedPrice(overrides[key], "config", None)
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


@dataclass(frozen=True)
class PriceRow:
    """One priced route for ``worktrial prices``: the price in force and where it comes from."""

    route: str
    input: float
    output: float
    cached_input: float | None
    cache_write: float | None
    source: Literal["table", "config"]
    taken_on: str | None


def price_rows(config: Config | None = None) -> list[PriceRow]:
    """Every route with a price: the shipped table, with config's ``[pricing]`` entries replacing or adding rows."""
    table = price_table()
    rows: dict[str, PriceRow] = {}
    for route, price in table.models.items():
        rows[route] = PriceRow(
            route, price.input, price.output, price.cached_input, price.cache_write, "table", table.taken_on
        )
    for route, price in (config.pricing if config is not None else {}).items():
        rows[route] = PriceRow(route, price.input, price.output, price.cached_input, price.cache_write, "config", None)
    return sorted(rows.values(), key=lambda row: row.route)
