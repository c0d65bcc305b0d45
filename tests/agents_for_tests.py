"""In-process agents for tests, loaded by dotted path (``--agent tests.agents_for_tests:FlakyInfraAgent``)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from worktrial.agents import AgentContext, AgentOptions, AgentResult
from worktrial.agents.base import AgentError
from worktrial.isolation import proc
from worktrial.model.records import ErrorCategory


class FlakyInfraAgent:
    """Breaks like infrastructure would (a provider's 5xx) or crashes on chosen tasks; counts every call per (task,
    attempt)."""

    name = "flaky-infra"
    calls: ClassVar[Counter[tuple[str, int]]] = Counter()
    _lock = threading.Lock()

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        key = (ctx.task.id, ctx.attempt)
        with self._lock:
            self.calls[key] += 1
            n = self.calls[key]
        if (ctx.task.id == "infra" and n <= 2) or ctx.task.id == "always-infra":
            # What a preset reports when its provider answered 5xx: an error the harness observed.
            return AgentResult(claimed=None, error=AgentError(ErrorCategory.PROVIDER_SERVER, "provider answered 503"))
        if ctx.task.id == "crashes":  # an adapter failing on what the agent wrote: never re-rolled
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        if ctx.task.id == "fails":
            return AgentResult(claimed=False, reason="gave up")
        if ctx.task.id == "slow":
            time.sleep(ctx.remaining() + 2.5)
            return AgentResult(claimed=True)
        (ctx.worktree / "done.txt").write_text("done\n")
        return AgentResult(claimed=True)


class StubbornAgent:
    """Starts a child process, then ignores cancellation for a long time (a badly behaved in-process agent)."""

    name = "stubborn"

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def preflight(self) -> None:
        return None

    def run(self, ctx: AgentContext) -> AgentResult:
        marker = os.environ.get("MARK", "stubborn")
        child = threading.Thread(
            target=proc.run,
            args=([sys.executable, "-c", "import time; time.sleep(300)", marker],),
            kwargs={"cwd": ctx.worktree, "timeout": 600, "scope": ctx.scope},
            daemon=True,
        )
        child.start()
        time.sleep(120)
        return AgentResult(claimed=True)
