"""The agent loop: ask the model, run the tools it calls, repeat until ``finish`` or a budget runs out.

The loop records aggregate facts (turns, tool and error counts, latencies, tokens) in the attempt's usage; the
conversation itself lives in memory for the attempt and is dropped with it, unless the run records trajectories
(``ctx.trajectory``): then each step is also added to the attempt's trajectory, which the harness redacts and
bounds before it stores it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from worktrial.agents.base import AgentContext, AgentError, AgentResult
from worktrial.agents.builtin.conversation import (
    ContextBudget,
    Conversation,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from worktrial.agents.builtin.routes import Route
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.specs import (
    SPECS,
    TOOL_NAMES,
    TOOL_SPECS,
    FinishArgs,
    InvalidArguments,
    parse_arguments_for,
)
from worktrial.agents.builtin.tools import Toolbox
from worktrial.agents.builtin.transport import ModelReply, ProviderError, Transport, status_category
from worktrial.agents.pricing import Price, cost_usd
from worktrial.model.records import ErrorCategory, Tokens, Usage
from worktrial.model.trajectory import Metrics, now_iso

SYSTEM_PROMPT = """\
You are an autonomous coding agent working in a git repository; the current directory is the repository root.
Nobody will answer questions or approve actions: work on your own until the task is done.

Use the tools to inspect and change files and to run commands, and check your work (for example by running the
tests) before you finish. Paths are relative to the repository root and must stay inside it.

When the task is done, call finish with status "success" and a short summary. If you cannot complete it, call
finish with status "failure". Stopping without calling finish counts as giving up."""

NUDGE = "You did not call a tool. Keep working on the task with the tools, and call finish when you are done."
MAX_IDLE_REPLIES = 3
# Seconds within which a transport timeout counts as the attempt's deadline, not the provider's fault.
DEADLINE_SLACK_SECS = 1.0
DEFAULT_OUTPUT_RESERVE = 4096


@dataclass
class _Tally:
    usage: Usage = field(default_factory=lambda: Usage(tokens=Tokens(), turns=0))
    unreported_calls: int = 0
    seen: set[str] = field(default_factory=set)

    def count_error(self, category: str) -> None:
        self.usage.error_counts[category] = self.usage.error_counts.get(category, 0) + 1


class AgentLoop:
    """One attempt's conversation with the model. Not shared between threads."""

    def __init__(self, ctx: AgentContext, route: Route, settings: BuiltinSettings, price: Price | None) -> None:
        self.ctx = ctx
        self.route = route
        self.settings = settings
        self.price = price
        self.tally = _Tally()
        self.tools = Toolbox(
            ctx.worktree,
            ctx.env,
            output_limit=settings.tool_output_bytes,
            bash_timeout_secs=settings.bash_timeout_secs,
            remaining=ctx.remaining,
            scope=ctx.scope,
        )
        window = settings.context_window or route.default_context_tokens
        reserve = min(settings.max_output_tokens or DEFAULT_OUTPUT_RESERVE, window // 4)
        self.context = ContextBudget(window_tokens=window, output_reserve=reserve)
        self.schema_chars = len(json.dumps([(s.name, s.description, s.parameters) for s in TOOL_SPECS]))

    def on_status(self, status: int) -> None:
        """Called by the SDK's HTTP client for every response, retried ones included."""
        category = status_category(status)
        if category is not None:
            self.tally.count_error(category)

    def run(self, transport: Transport) -> AgentResult:
        conversation = Conversation(SYSTEM_PROMPT, [UserMessage(self.ctx.task.prompt)])
        usage = self.tally.usage
        idle_replies = 0
        if (log := self.ctx.trajectory) is not None:
            log.system(SYSTEM_PROMPT)
            log.user(self.ctx.task.prompt)
        while True:
            stop = self._budget_stop()
            if stop is not None:
                return stop
            self.context.fit(conversation, self.schema_chars)
            chars_sent = conversation.chars() + self.schema_chars
            started, started_at = time.monotonic(), now_iso()
            try:
                reply = transport.complete(
                    conversation, TOOL_SPECS, min(self.settings.request_timeout_secs, self.ctx.remaining())
                )
            except ProviderError as err:
                usage.latency_ms.append(round((time.monotonic() - started) * 1000, 3))
                if self.ctx.trajectory is not None:
                    self.ctx.trajectory.error(f"model call failed: {err.message}", error_category=err.category.value)
                failed = self._provider_failure(err, conversation)
                if failed is None:
                    continue
                return failed
            usage.latency_ms.append(round((time.monotonic() - started) * 1000, 3))
            usage.turns = (usage.turns or 0) + 1
            usage.tokens = usage.tokens.add(reply.tokens)
            if not reply.usage_reported:
                self.tally.unreported_calls += 1
            self.context.observe(reply.tokens.input, chars_sent)
            conversation.messages.append(reply.message)
            self._record_reply(reply, started_at, time.monotonic() - started)
            if not reply.message.tool_calls:
                idle_replies += 1
                if idle_replies >= MAX_IDLE_REPLIES:
                    return self._end(None, reason=f"model replied {idle_replies} times without a tool call")
                conversation.messages.append(UserMessage(NUDGE))
                if self.ctx.trajectory is not None:
                    self.ctx.trajectory.user(NUDGE)
                continue
            idle_replies = 0
            results: list[ToolResult] = []
            for call in reply.message.tool_calls:
                finished = self._handle_call(call, results)
                if finished is not None:
                    return finished
                if self.ctx.cancelled():
                    return self._end(None, reason="run interrupted")
            conversation.messages.append(ToolResults(results))

    def _record_reply(self, reply: ModelReply, started_at: str, secs: float) -> None:
        if (log := self.ctx.trajectory) is None:
            return
        tokens = reply.tokens
        metrics = Metrics(
            prompt_tokens=tokens.input,
            completion_tokens=tokens.output,
            cached_tokens=tokens.cached_input,
            cost_usd=cost_usd(tokens, self.price) if reply.usage_reported else None,
        )
        calls = [
            (c.id, c.name, c.arguments if c.arguments is not None else {"unparsed_arguments": c.raw_arguments})
            for c in reply.message.tool_calls
        ]
        extra = {"latency_ms": round(secs * 1000, 1)}
        log.agent(reply.message.text, calls, model=self.route.model, metrics=metrics, started=started_at, extra=extra)

    def _budget_stop(self) -> AgentResult | None:
        usage = self.tally.usage
        if self.ctx.cancelled():
            return self._end(None, reason="run interrupted")
        if self.ctx.remaining() <= 0:
            return self._end(None, timed_out=True)
        if (usage.turns or 0) >= self.settings.max_turns:
            return self._end(None, reason=f"turn budget of {self.settings.max_turns} model calls exhausted")
        if self.ctx.over_cap(cost_usd(usage.tokens, self.price)):
            return self._end(None, reason="cost cap reached")
        total = usage.tokens.total() or 0
        if self.settings.max_tokens is not None and total >= self.settings.max_tokens:
            return self._end(None, reason=f"token budget of {self.settings.max_tokens} tokens exhausted ({total})")
        return None

    def _provider_failure(self, err: ProviderError, conversation: Conversation) -> AgentResult | None:
        """The attempt's result after a failed model call, or None to call the model again."""
        if err.timed_out and self.ctx.remaining() <= DEADLINE_SLACK_SECS:
            return self._end(None, timed_out=True)
        if not err.counted:
            self.tally.count_error(err.category)
        if err.context_overflow:
            if self.context.shrink_after_overflow(conversation):
                return None
            return self._end(None, reason="context window exhausted (nothing left to elide)")
        # The first request of an attempt is the same for every task: if it is rejected, so will all the others be.
        fatal = err.fatal or (err.category == ErrorCategory.PROVIDER_BAD_REQUEST and not self.tally.usage.turns)
        return self._end(None, error=AgentError(err.category, err.message, fatal=fatal))

    def _handle_call(self, call: ToolCall, results: list[ToolResult]) -> AgentResult | None:
        """Run one tool call and append its result; an AgentResult means the model called finish."""
        usage = self.tally.usage
        signature = call.signature()
        if signature in self.tally.seen:
            usage.repeated_tool_calls += 1
        self.tally.seen.add(signature)

        def reply(content: str, category: str | None = None) -> None:
            if category is not None:
                self.tally.count_error(category)
            results.append(ToolResult(call.id, call.name, content, is_error=category is not None))
            if self.ctx.trajectory is not None:
                extra = {"error_category": category} if category is not None else None
                self.ctx.trajectory.observe(call.id, content, is_error=category is not None, extra=extra)

        spec = SPECS.get(call.name)
        if spec is None:
            reply(f"unknown tool {call.name!r}; available tools: {', '.join(TOOL_NAMES)}", "unknown_tool")
            return None
        usage.tool_counts[call.name] = usage.tool_counts.get(call.name, 0) + 1
        if call.arguments is None:
            reply(f"{call.name}: the arguments are not a valid JSON object", "invalid_tool_call")
            return None
        try:
            args = parse_arguments_for(spec, call.arguments)
        except InvalidArguments as exc:
            reply(str(exc), "invalid_tool_call")
            return None
        if isinstance(args, FinishArgs):
            return self._end(args.status == "success")
        outcome = self.tools.execute(call.name, args)
        usage.output_bytes += outcome.output_bytes
        reply(outcome.content, "tool_error" if outcome.is_error else None)
        return None

    def _end(
        self,
        claimed: bool | None,
        *,
        reason: str | None = None,
        error: AgentError | None = None,
        timed_out: bool = False,
    ) -> AgentResult:
        usage = self.tally.usage
        if self.ctx.trajectory is not None and claimed is None:
            said = error.message if error is not None else reason or ("deadline reached" if timed_out else "")
            self.ctx.trajectory.system(f"the agent stopped without finishing: {said}", extra={"error": True})
        if self.tally.unreported_calls:
            usage.notes.append(f"the provider reported no usage for {self.tally.unreported_calls} model call(s)")
            usage.cost_usd = None
        else:
            usage.cost_usd = cost_usd(usage.tokens, self.price)
        return AgentResult(claimed=claimed, usage=usage, error=error, timed_out=timed_out, reason=reason)
