"""The preset table in docs/agents.md says which real CLI version each preset is verified against: exactly the
versions pinned in tests/real_agents/versions.toml (which the real-CLI tests install and run), and "documented
output only" for every other preset."""

from __future__ import annotations

import re
from pathlib import Path

from tests.real_agents.install import tools
from worktrial.agents.presets import PRESETS

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \|.*\| ([^|]+) \|$")


def verified_column() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line.strip())
        if match and match.group(1) in PRESETS and line.count("|") >= 6:
            rows.setdefault(match.group(1), match.group(2).strip())
    return rows


def test_preset_table_names_the_pinned_versions() -> None:
    rows = verified_column()
    assert set(rows) == set(PRESETS)
    pinned = tools()
    for name, cell in rows.items():
        if name in pinned:
            assert cell == f"the real CLI, {pinned[name].version}", name
        else:
            assert cell.startswith("documented output only"), name
    assert set(pinned) <= set(PRESETS)  # every pinned tool is a preset the table lists
