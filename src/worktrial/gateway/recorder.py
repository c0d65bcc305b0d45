"""The gateway's trajectory recorder: one attempt's model calls as conversations of steps (``--trajectories``).

The server calls it per model call: ``begin`` with the request, ``event`` with each JSON body or stream event of
the answer (through ``wire.Exchange``), ``end`` once the answer is over (or failed). A request repeats the whole
conversation so far, so each call adds only what is new to its conversation: the first call's system prompt and
task, then the tool results and messages the agent appended since, then the model's answer as an agent step with
its tool calls, reasoning, usage and latency; a tool result lands in the observation of the step whose call it
answers. A CLI's side calls (a title, a summary, a subagent: another system prompt or first message) are
conversations of their own; the one with the most answers is the trajectory's main one, the others its
``subagent_trajectories``.

Nothing here is redacted or finally bounded: the engine seals the trajectory with the attempt's redactor
(``model.trajectory.seal``); this only keeps memory bounded while the attempt runs. The work of a finished call
(reading the request's conversation, adding the steps) runs on a thread of the recorder's own, in the order the
calls ended, so the gateway's event loop sends the answer's last bytes without waiting for it
(``benchmarks/trajectory_recording.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from worktrial.gateway.transcript import AnswerReader, Item, Prompt, read_prompt
from worktrial.gateway.wire import Wire
from worktrial.model.records import Tokens
from worktrial.model.trajectory import AgentInfo, Budget, Metrics, StepLog, Trajectory, final_metrics, now_iso

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 2000


@dataclass
class _Conversation:
    key: str
    log: StepLog
    seen: Counter[str] = field(default_factory=Counter)
    answers: int = 0


class Recording:
    """One model call being recorded: what the request showed, the answer as it arrives."""

    def __init__(self, recorder: Recorder, wire: Wire, body: bytes, path: str) -> None:
        self._recorder = recorder
        self.wire = wire
        self.path = path
        self.started = now_iso()
        self._body = body
        self.reader = AnswerReader(wire)

    def event(self, event: Any) -> None:
        self.reader.event(event)

    def end(self, status: int, latency_ms: float, *, model: str | None, tokens: Tokens | None, error: str) -> None:
        """The answer is over: ``status`` 0 when none came; ``error`` what went wrong, if anything."""
        self._recorder.later(lambda: self._end(status, latency_ms, model, tokens, error))

    def _end(self, status: int, latency_ms: float, model: str | None, tokens: Tokens | None, error: str) -> None:
        try:
            prompt = read_prompt(self.wire, self._body)
        except Exception:  # a recorder bug must never cost the attempt: the call is left out
            log.warning("trajectory: could not read a %s request", self.wire, exc_info=True)
            prompt = None
        self._body = b""
        self._recorder.record(self, prompt, status, latency_ms, model, tokens, error)


class Recorder:
    """One attempt's conversations as the gateway saw them. Thread-safe (the gateway's loop records, the attempt's
    thread reads once the agent has ended)."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self._conversations: list[_Conversation] = []
        self._lock = threading.Lock()
        self.calls = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="worktrial-trajectory")

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the recorder's thread, after the work handed to it before (nothing once it is closed)."""
        with contextlib.suppress(RuntimeError):  # closed: the attempt's trajectory was already taken
            self._worker.submit(work)

    def close(self) -> None:
        """Finish the calls already handed over; the recorder takes no more."""
        self._worker.shutdown(wait=True)

    def begin(self, wire: Wire | None, path: str, body: bytes) -> Recording | None:
        """A model call starts (None for other requests: model lists, token counts)."""
        return Recording(self, wire, body, path) if wire is not None else None

    def record(
        self,
        call: Recording,
        prompt: Prompt | None,
        status: int,
        latency_ms: float,
        model: str | None,
        tokens: Tokens | None,
        error: str,
    ) -> None:
        with self._lock:
            self.calls += 1
            conversation = self._conversation(prompt)
            if prompt is not None:
                self._new_items(conversation, prompt)
            steplog = conversation.log
            extra: dict[str, Any] = {"api": call.wire, "latency_ms": round(latency_ms, 1), "status": status}
            if status == 0 or status >= 400 or error:
                said = error or f"HTTP {status}"
                steplog.error(f"model call failed: {said}"[:MAX_ERROR_CHARS], **extra)
                return
            try:
                answer = call.reader.answer()
            except Exception:
                log.warning("trajectory: could not read a %s answer", call.wire, exc_info=True)
                steplog.error("the model's answer could not be read", **extra)
                return
            calls = [
                (item.call_id or f"call-{self.calls}-{i}", item.name or "tool", item.arguments or {})
                for i, item in enumerate(answer.calls, start=1)
            ]
            steplog.agent(
                answer.text,
                calls,
                reasoning=answer.reasoning or None,
                model=model,
                metrics=_metrics(tokens),
                started=call.started,
                extra=extra,
            )
            conversation.answers += 1
            for item in answer.items():  # echoed by the next request, where they are not new
                conversation.seen[item.key()] += 1

    def _conversation(self, prompt: Prompt | None) -> _Conversation:
        first = next((i for i in prompt.items if i.kind in ("user", "system")), None) if prompt else None
        key = Item("system", prompt.system).key() + (first.key() if first else "") if prompt else "?"
        for conversation in self._conversations:
            if conversation.key == key:
                return conversation
        conversation = _Conversation(key, StepLog(self.budget))
        self._conversations.append(conversation)
        if prompt is not None and prompt.system:
            conversation.log.system(prompt.system)
        return conversation

    def _new_items(self, conversation: _Conversation, prompt: Prompt) -> None:
        """Add what this request shows for the first time: an item is new when it occurs more often here than in
        any earlier request or answer of its conversation (a user who says "continue" twice said it twice)."""
        here: Counter[str] = Counter()
        fresh: list[Item] = []
        for item in prompt.items:
            key = item.key()
            here[key] += 1
            if here[key] > conversation.seen[key]:
                fresh.append(item)
        for key, count in here.items():
            conversation.seen[key] = max(conversation.seen[key], count)
        steplog = conversation.log
        pending: list[Item] = []

        def flush_assistant() -> None:
            # The agent put in words of the model's that no answer here had (a resumed or rewritten history).
            if pending:
                text = "\n".join(i.text for i in pending if i.kind == "assistant")
                calls = [
                    (i.call_id or f"echo-{n}", i.name or "tool", i.arguments or {})
                    for n, i in enumerate(pending)
                    if i.kind == "tool_call"
                ]
                steplog.agent(text, calls, extra={"from_request": True})
                pending.clear()

        for item in fresh:
            if item.kind in ("assistant", "tool_call"):
                pending.append(item)
                continue
            flush_assistant()
            if item.kind == "user":
                steplog.user(item.text)
            elif item.kind == "system":
                steplog.system(item.text)
            else:
                steplog.observe(item.call_id, item.text, is_error=item.is_error, name=item.name)
        flush_assistant()

    def trajectory(self, agent: AgentInfo) -> Trajectory | None:
        """The main conversation with the side ones embedded; None when no model call was recorded. Closes the
        recorder: calls that end later (a stream the gateway still drains) are left out."""
        self.close()
        with self._lock:
            conversations = [c for c in self._conversations if len(c.log)]
            if not conversations:
                return None
            main = max(conversations, key=lambda c: (c.answers, -conversations.index(c)))
            dropped = self.budget.dropped
            documents = []
            for number, conversation in enumerate(conversations):
                steps = conversation.log.steps()
                documents.append(
                    Trajectory(
                        trajectory_id=None if conversation is main else f"side-{number}",
                        agent=agent,
                        steps=steps,
                        final_metrics=final_metrics(steps),
                        extra=None if conversation is main else {"side_conversation": True},
                    )
                )
        root = documents[conversations.index(main)]
        subs = [d for d in documents if d is not root]
        notes = "recorded by worktrial's model gateway from the agent's model calls"
        extra = {"worktrial": {"source": "gateway", "model_calls": self.calls}}
        if dropped:
            extra["worktrial"]["dropped_steps"] = dropped
        return root.model_copy(update={"subagent_trajectories": subs or None, "notes": notes, "extra": extra})


def _metrics(tokens: Tokens | None) -> Metrics | None:
    if tokens is None:
        return None
    extra = {
        k: v
        for k, v in {"cache_creation_tokens": tokens.cache_creation, "reasoning_tokens": tokens.reasoning}.items()
        if v is not None
    }
    return Metrics(
        prompt_tokens=tokens.input,
        completion_tokens=tokens.output,
        cached_tokens=tokens.cached_input,
        extra=extra or None,
    )
