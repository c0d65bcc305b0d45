"""What ``worktrial agents`` shows: every known agent, whether its program is installed, and its version."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from worktrial.agents.base import AgentOptions
from worktrial.agents.custom import CustomAgent, custom_tables
from worktrial.agents.presets import PRESETS, PresetAgent
from worktrial.agents.registry import agent_specs
from worktrial.model.config import Config

BUNDLED = ("oracle", "nop", "command", "builtin")


@dataclass(frozen=True)
class AgentRow:
    name: str
    kind: str
    """``bundled``, ``preset``, ``custom`` (worktrial.toml) or ``plugin``."""
    installed: bool | None
    """None when there is no program to look for (bundled and plugin agents)."""
    version: str | None
    summary: str
    install: str | None = None


def list_agents(config: Config | None = None) -> list[AgentRow]:
    """Every agent ``--agent`` accepts, probing preset binaries (``--version``) and custom commands."""
    config = config or Config()
    options = AgentOptions(config=config)
    rows: list[AgentRow] = []
    for name, spec in agent_specs().items():
        if name in PRESETS:
            preset = PRESETS[name]
            agent = PresetAgent(preset, options)
            installed, version = agent.probe()
            rows.append(AgentRow(name, "preset", installed, version, spec.summary, preset.install))
        else:
            kind = "bundled" if name in BUNDLED else "plugin"
            rows.append(AgentRow(name, kind, None, None, spec.summary))
    specs = agent_specs()
    for name, table in sorted(custom_tables(config).items()):
        if name in specs:
            continue
        try:
            custom = CustomAgent(name, table, options)
        except Exception as exc:  # a broken table is listed with its problem, not fatal to the listing
            rows.append(AgentRow(name, "custom", False, None, f"invalid: {exc}"))
            continue
        program = custom.program()
        found: bool | None = None if program is None else shutil.which(program) is not None
        summary = table.description or f"{custom.command} (parser: {custom.parser_name})"
        rows.append(AgentRow(name, "custom", found, None, summary))
    return rows
