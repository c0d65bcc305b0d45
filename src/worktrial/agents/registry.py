"""Agent registry on pluggy: bundled agents register through the same hook a plugin uses.

A plugin package exposes a module in the ``worktrial.agents`` entry-point group with::

    from worktrial.agents import AgentSpec, hookimpl

    @hookimpl
    def register_agents(register):
        register(AgentSpec("my-agent", "what it is", MyAgent))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache

import pluggy

from worktrial.agents.base import Agent, AgentOptions, AgentSpec
from worktrial.errors import BadInputError

PROJECT = "worktrial"
ENTRY_POINT_GROUP = "worktrial.agents"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class _Specs:
    @hookspec
    def register_agents(self, register: Callable[[AgentSpec], None]) -> None:
        """Call ``register(AgentSpec(...))`` once per agent the plugin provides."""


@cache
def agent_specs() -> dict[str, AgentSpec]:
    """Every known agent by name: bundled ones first, then plugins'."""
    from worktrial.agents import builtin, presets, simple

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(_Specs)
    pm.register(simple)
    pm.register(builtin)
    pm.register(presets)
    pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    specs: dict[str, AgentSpec] = {}

    def register(spec: AgentSpec) -> None:
        specs.setdefault(spec.name, spec)

    # get_hookimpls() lists plugins in registration order (bundled first); with setdefault the first wins,
    # so bundled agents win name clashes. (pluggy *calls* them in reverse, hence no pm.hook call here.)
    for impl in pm.hook.register_agents.get_hookimpls():
        impl.function(register=register)
    return specs


@cache
def _simple_specs() -> dict[str, AgentSpec]:
    """The agents of the first bundled plugin (oracle, nop, command). The first registration of a name wins, so
    nothing can replace these: they are built without loading the rest (presets, the built-in agent, plugins)."""
    from worktrial.agents import simple

    specs: dict[str, AgentSpec] = {}

    def register(spec: AgentSpec) -> None:
        specs.setdefault(spec.name, spec)

    simple.register_agents(register=register)
    return specs


def create_agent(name: str, options: AgentOptions) -> Agent:
    """Build an agent by short name, a custom ``[agents.NAME]`` from config, or dotted path ``module:Factory``."""
    if (simple := _simple_specs().get(name)) is not None:
        return simple.factory(options)
    from worktrial.agents.custom import create_custom_agent, custom_tables

    specs = agent_specs()
    if name in specs:
        return specs[name].factory(options)
    custom = create_custom_agent(name, options)
    if custom is not None:
        return custom
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise BadInputError(f"cannot load agent {name!r}: {exc}") from None
        agent = factory(options)
        if not isinstance(agent, Agent):
            raise BadInputError(f"{name!r} did not build an agent (needs name, describe, preflight, run)")
        return agent
    known = ", ".join(sorted({*specs, *custom_tables(options.config)}))
    raise BadInputError(f"unknown agent {name!r}; known agents: {known} (or a dotted path module:Factory)")
