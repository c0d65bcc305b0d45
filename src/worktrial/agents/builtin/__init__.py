"""The builtin coding agent on real model providers (``--model provider/model``).

Registered through the same pluggy hook a third-party plugin uses. Nothing here imports a provider SDK: the
transports import theirs when an attempt starts, so ``worktrial --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable

from worktrial.agents.base import AgentSpec
from worktrial.agents.builtin.agent import BuiltinAgent
from worktrial.agents.registry import hookimpl

__all__ = ["BuiltinAgent", "register_agents"]


@hookimpl
def register_agents(register: Callable[[AgentSpec], None]) -> None:
    register(
        AgentSpec("builtin", "worktrial's own coding agent on a model route (--model provider/model)", BuiltinAgent)
    )
