"""Presets for popular agent CLIs, registered through the same pluggy hook a third-party plugin uses."""

from __future__ import annotations

from collections.abc import Callable

from worktrial.agents.base import Agent, AgentOptions, AgentSpec
from worktrial.agents.presets import (
    aider,
    claude_code,
    codex,
    continue_cli,
    copilot,
    cursor,
    droid,
    gemini_cli,
    goose,
    gptme,
    grok_cli,
    kilo,
    mini_swe_agent,
    opencode,
    qwen_code,
    vtcode,
)
from worktrial.agents.presets.base import PresetAgent, PresetSpec
from worktrial.agents.presets.parsing import ParserFactory
from worktrial.agents.registry import hookimpl

PRESETS: dict[str, PresetSpec] = {
    spec.name: spec
    for spec in (
        claude_code.SPEC,
        codex.SPEC,
        gemini_cli.SPEC,
        opencode.SPEC,
        qwen_code.SPEC,
        goose.SPEC,
        cursor.SPEC,
        aider.SPEC,
        mini_swe_agent.SPEC,
        vtcode.SPEC,
        copilot.SPEC,
        continue_cli.SPEC,
        kilo.SPEC,
        gptme.SPEC,
        droid.SPEC,
        grok_cli.SPEC,
    )
}

PARSERS: dict[str, ParserFactory] = {name: spec.parser for name, spec in PRESETS.items()}
"""Output parsers by name, for custom agents declared in worktrial.toml."""


def _factory(spec: PresetSpec) -> Callable[[AgentOptions], Agent]:
    return lambda options: PresetAgent(spec, options)


@hookimpl
def register_agents(register: Callable[[AgentSpec], None]) -> None:
    for spec in PRESETS.values():
        register(AgentSpec(spec.name, spec.summary, _factory(spec)))


__all__ = ["PARSERS", "PRESETS", "PresetAgent", "PresetSpec"]
