"""Agents: the protocol, the registry and the bundled agents."""

from worktrial.agents.base import Agent, AgentContext, AgentError, AgentOptions, AgentResult, AgentSpec
from worktrial.agents.registry import agent_specs, create_agent, hookimpl
from worktrial.model.records import Tokens, Usage

__all__ = [
    "Agent",
    "AgentContext",
    "AgentError",
    "AgentOptions",
    "AgentResult",
    "AgentSpec",
    "Tokens",
    "Usage",
    "agent_specs",
    "create_agent",
    "hookimpl",
]
