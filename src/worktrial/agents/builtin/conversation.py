"""A provider-neutral conversation, and how it is kept inside the model's context window.

Each transport translates this one shape to its wire format, so the loop, the tools and the context management are
written once. When the conversation approaches the context window, the oldest tool outputs (and the bulky string
arguments of old tool calls, such as whole files written) are replaced by a short marker: the model keeps the shape of
what it did and can re-run a tool if it needs the output again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ELIDED_OUTPUT = "[tool output elided to fit the context window ({n} bytes); run the tool again if you need it]"
ELIDED_ARGUMENT = "[elided to fit the context window]"
# Outputs and argument strings shorter than this are not worth eliding.
MIN_ELIDE_CHARS = 200
DEFAULT_TOKENS_PER_CHAR = 0.25


@dataclass
class ToolCall:
    """One tool call as the model made it. ``arguments`` is None when ``raw_arguments`` is not a JSON object."""

    id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None

    def signature(self) -> str:
        """Identity of the call for counting repeats: name plus canonical arguments."""
        args = self.raw_arguments if self.arguments is None else json.dumps(self.arguments, sort_keys=True)
        return f"{self.name}\0{args}"


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """The JSON object the model meant, or None (an empty string counts as no arguments)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@dataclass
class UserMessage:
    text: str


@dataclass
class AssistantMessage:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class ToolResult:
    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass
class ToolResults:
    """The results of every tool call of the preceding assistant message, in order."""

    results: list[ToolResult]


Message = UserMessage | AssistantMessage | ToolResults


@dataclass
class Conversation:
    system: str
    messages: list[Message] = field(default_factory=list)

    def chars(self) -> int:
        """Size of everything sent to the model, in characters (the basis of token estimates)."""
        total = len(self.system)
        for message in self.messages:
            if isinstance(message, UserMessage):
                total += len(message.text)
            elif isinstance(message, AssistantMessage):
                total += len(message.text) + sum(len(c.name) + len(c.raw_arguments) for c in message.tool_calls)
            else:
                total += sum(len(r.content) for r in message.results)
        return total


def _elide_arguments(call: ToolCall) -> int:
    if call.arguments is None:
        return 0
    freed = 0
    slim: dict[str, Any] = {}
    for key, value in call.arguments.items():
        if isinstance(value, str) and len(value) >= MIN_ELIDE_CHARS:
            freed += len(value) - len(ELIDED_ARGUMENT)
            value = ELIDED_ARGUMENT
        slim[key] = value
    if freed:
        call.arguments = slim
        call.raw_arguments = json.dumps(slim)
    return freed


def elide_old_outputs(conversation: Conversation, chars_to_free: int, keep_recent: int) -> int:
    """Elide the oldest tool outputs and bulky arguments until ``chars_to_free`` are freed; return chars freed.

    The last ``keep_recent`` rounds of tool calls and results are left alone: the model is working with them.
    """
    rounds = [i for i, m in enumerate(conversation.messages) if isinstance(m, ToolResults)]
    protected = rounds[-keep_recent:] if keep_recent > 0 else []
    # The assistant message right before the oldest protected round made those calls: keep it whole too.
    cutoff = protected[0] - 1 if protected else len(conversation.messages)
    freed = 0
    for message in conversation.messages[:cutoff]:
        if freed >= chars_to_free:
            break
        if isinstance(message, ToolResults):
            for result in message.results:
                if len(result.content) >= MIN_ELIDE_CHARS:
                    marker = ELIDED_OUTPUT.format(n=len(result.content.encode("utf-8")))
                    freed += len(result.content) - len(marker)
                    result.content = marker
        elif isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                freed += _elide_arguments(call)
    return freed


@dataclass
class ContextBudget:
    """Keeps the conversation under the context window, using the provider's own token counts where it gives them.

    The ratio of reported prompt tokens to characters sent is learnt from each call, so estimates track the real
    tokenizer. Compaction starts at ``high`` of the usable window and frees down to ``low``.
    """

    window_tokens: int
    output_reserve: int
    high: float = 0.8
    low: float = 0.5
    keep_recent: int = 2
    tokens_per_char: float = DEFAULT_TOKENS_PER_CHAR

    @property
    def usable(self) -> int:
        return max(256, self.window_tokens - self.output_reserve)

    def observe(self, prompt_tokens: int | None, chars_sent: int) -> None:
        """Learn from a call: ``prompt_tokens`` the provider counted for ``chars_sent`` characters."""
        if prompt_tokens and chars_sent > 0:
            self.tokens_per_char = prompt_tokens / chars_sent

    def estimate(self, conversation: Conversation, overhead_chars: int) -> int:
        return int((conversation.chars() + overhead_chars) * self.tokens_per_char)

    def fit(self, conversation: Conversation, overhead_chars: int) -> bool:
        """Compact if the next request would come close to the window; True if anything was elided."""
        estimate = self.estimate(conversation, overhead_chars)
        if estimate <= self.high * self.usable:
            return False
        excess_tokens = estimate - self.low * self.usable
        return elide_old_outputs(conversation, int(excess_tokens / self.tokens_per_char), self.keep_recent) > 0

    def shrink_after_overflow(self, conversation: Conversation) -> bool:
        """The provider said the prompt is too long: assume our estimate was low and elide all but the last round.

        If only the last round is left to elide, elide it too: the model learns its output was too big to keep.
        """
        self.tokens_per_char *= 1.5
        for keep_recent in (1, 0):
            if elide_old_outputs(conversation, conversation.chars(), keep_recent=keep_recent) > 0:
                return True
        return False
