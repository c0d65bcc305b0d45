"""``worktrial prices``: which models are priced, at what, and from when; config overrides shown as such."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from worktrial.agents.pricing import price_table


def test_prices_lists_the_table_with_its_date_and_config_overrides(cli: Callable[..., Result], repo: Path) -> None:
    table = price_table()
    result = cli(["prices"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert f"taken on {table.taken_on}" in result.output
    assert "| openai/gpt-5.1 | 1.25 | 0.125 | — | 10 | table (" in result.output
    assert "never 0" in result.output

    (repo / "worktrial.toml").write_text(
        '[pricing."openai/gpt-5.1"]\ninput = 2.0\noutput = 20.0\n\n[pricing."local/llama"]\ninput = 0\noutput = 0\n'
    )
    data = json.loads(cli(["prices", "--format", "json"], cwd=repo).stdout)
    assert data["taken_on"] == table.taken_on
    rows = {row["route"]: row for row in data["models"]}
    assert rows["openai/gpt-5.1"] == {
        "route": "openai/gpt-5.1",
        "input": 2.0,
        "output": 20.0,
        "cached_input": None,
        "cache_write": None,
        "source": "config",
        "taken_on": None,
    }
    assert rows["local/llama"]["source"] == "config" and rows["local/llama"]["input"] == 0.0
    assert rows["anthropic/claude-sonnet-4-5"]["source"] == "table"
    assert len(rows) == len(table.models) + 1


def test_price_table_is_dated_and_sane() -> None:
    table = price_table()
    assert len(table.taken_on) == 10 and table.taken_on[4] == "-"
    for route, price in table.models.items():
        assert "/" in route
        assert 0 < price.input <= price.output, route
        assert price.cached_input is None or price.cached_input < price.input, route
