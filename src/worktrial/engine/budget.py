"""The run's budget (``--max-cost``): no attempt starts once the spend so far plus what the running attempts are
likely to spend would pass it; the running ones finish, and the run ends ``stopped`` with the reason.

Pure bookkeeping over attempt records: the run decides when to ask. An attempt's spend is its recorded
``cost_usd``; an attempt whose cost is unknown cannot be counted, so it stops the run unless the user allowed
unpriced attempts (then it counts as 0 and is reported).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from worktrial.model.envelope import BudgetInfo
from worktrial.model.records import AttemptRecord


@dataclass
class Budget:
    max_cost: float | None
    max_cost_per_attempt: float | None = None
    allow_unpriced: bool = False
    spent: float = 0.0
    unrecorded: float = 0.0
    """Spent by attempts the gateway ended when the run's spend passed ``max_cost`` (no record: they rerun)."""
    priced: int = 0
    unpriced: int = 0
    stopped: str | None = None
    """Why the budget stopped the run (None: it did not)."""
    _costs: list[float] = field(default_factory=list)

    @property
    def limited(self) -> bool:
        return self.max_cost is not None

    def count(self, records: Iterable[AttemptRecord], *, free: bool = False) -> None:
        for record in records:
            self.add(record, free=free)

    def add(self, record: AttemptRecord, *, free: bool = False) -> None:
        """One finished attempt's spend (also attempts of earlier sessions of a resumed run); ``free``: its agent
        calls no model, so an unknown cost is $0."""
        if record.cost_usd is None and free:
            self.priced += 1
            self._costs.append(0.0)
            return
        if record.cost_usd is None:
            self.unpriced += 1
            if self.limited and not self.allow_unpriced and self.stopped is None and record.outcome != "error":
                self.stopped = (
                    f"attempt {record.task_id} #{record.attempt} reported no cost, so --max-cost ${self.max_cost:g} "
                    "cannot be kept (give the agent a priced model, or pass --allow-unpriced to count it as $0)"
                )
            return
        self.priced += 1
        self.spent += record.cost_usd
        self._costs.append(record.cost_usd)

    def cut(self, reason: str, cost_usd: float | None) -> None:
        """An attempt the gateway ended because the run's spend passed ``--max-cost``: its spend counts, it gets
        no record, and the run stops."""
        self.unrecorded += cost_usd or 0.0
        self.stopped = self.stopped or reason

    @property
    def total(self) -> float:
        """Everything spent: the recorded attempts and those the budget ended."""
        return self.spent + self.unrecorded

    def estimate(self, running: int) -> float:
        """What the running attempts will likely add: the mean spend of a finished attempt, per running one."""
        if running <= 0 or not self._costs:
            return 0.0
        return running * sum(self._costs) / len(self._costs)

    def allows_start(self, running: int) -> bool:
        """Whether one more attempt may start with ``running`` attempts still running; records why not."""
        if self.stopped is not None:
            return False
        if self.max_cost is None:
            return True
        expected = self.total + self.estimate(running + 1)
        if expected > self.max_cost:
            self.stopped = (
                f"the budget --max-cost ${self.max_cost:g} is reached: ${self.total:.4f} spent"
                + (f", about ${self.estimate(running):.4f} more in {running} running attempt(s)" if running else "")
                + f", and another attempt would likely bring it to ${expected:.4f}"
            )
            return False
        return True

    def info(self) -> BudgetInfo | None:
        """``run.budget`` in the envelope (None when the run had no budget)."""
        if self.max_cost is None and self.max_cost_per_attempt is None:
            return None
        return BudgetInfo(
            max_cost=self.max_cost,
            max_cost_per_attempt=self.max_cost_per_attempt,
            spent=round(self.spent, 6),
            spent_unrecorded=round(self.unrecorded, 6),
            unpriced_attempts=self.unpriced,
            allow_unpriced=self.allow_unpriced,
            stopped=self.stopped is not None,
            reason=self.stopped,
        )


FREE_AGENTS = frozenset({"oracle", "nop"})
"""Agents that call no model: an attempt of theirs costs $0 even though it reports no cost."""


def unpriced_reason(agent: str, description: dict[str, object]) -> str | None:
    """Why a budget cannot be kept for this agent before anything runs (its model has no price), or None.

    Command and custom agents report their own cost (usage file or parser); one that does not is caught on its
    first attempt instead.
    """
    if agent in FREE_AGENTS or "price" in description or "pricing" in description:
        return None
    reports = description.get("reports")
    if isinstance(reports, list) and "cost" in reports:
        return None
    if agent != "builtin" and not description.get("preset"):
        return None
    model = description.get("model") or "its default model"
    return (
        f"a budget needs prices, and {agent} with {model} has none (not in the price table, and the agent does not "
        "report cost); add the model's price to your config ([prices] in docs/agents.md), or pass --allow-unpriced "
        "to count unknown costs as $0"
    )
