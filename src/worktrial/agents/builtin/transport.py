"""What the loop needs from a provider, and how provider failures become error categories.

The transports (``openai_chat``, ``anthropic_messages``) are thin: they translate the neutral conversation to the
SDK's request, the SDK's response back, and the SDK's exceptions to ``ProviderError``. Retries and backoff are the
SDK's own; every HTTP response the SDK sees (retried ones included) is reported through ``on_status`` so rate limits
and server errors that a retry absorbed are still counted in the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worktrial.agents.builtin.conversation import AssistantMessage, Conversation
from worktrial.agents.builtin.routes import Route
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.specs import ToolSpec
from worktrial.errors import BadInputError
from worktrial.model.records import ErrorCategory, Tokens

StatusHook = Callable[[int], None]
DETAIL_CHARS = 300
# Request timeout and conflict: the SDKs retry these like server errors, and so they count as such.
TRANSIENT_STATUSES = (408, 409)
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context size",
    "context window",
    "exceed_context_size",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)


@dataclass(frozen=True)
class ModelReply:
    message: AssistantMessage
    tokens: Tokens
    usage_reported: bool
    """False when the server sent no usage at all (then the attempt's cost is unknown)."""


class ProviderError(Exception):
    """A model call failed for good (after the SDK's retries). ``str()`` is safe to show: it never holds the key."""

    def __init__(
        self,
        category: ErrorCategory,
        message: str,
        *,
        fatal: bool = False,
        counted: bool = False,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.category = category
        self.message = message
        self.fatal = fatal
        self.counted = counted
        """True when ``on_status`` already counted this failure's HTTP response."""
        self.timed_out = timed_out

    @property
    def context_overflow(self) -> bool:
        return self.category == ErrorCategory.CONTEXT_OVERFLOW


class Transport(Protocol):
    def complete(self, conversation: Conversation, tools: Sequence[ToolSpec], timeout: float) -> ModelReply: ...

    def close(self) -> None: ...


def status_category(status: int) -> ErrorCategory | None:
    """The error category an HTTP status stands for, or None for statuses the loop does not count."""
    if status in (401, 403):
        return ErrorCategory.PROVIDER_AUTH
    if status == 404:
        return ErrorCategory.MODEL_NOT_FOUND
    if status == 429:
        return ErrorCategory.PROVIDER_RATE_LIMIT
    if status >= 500 or status in TRANSIENT_STATUSES:
        return ErrorCategory.PROVIDER_SERVER
    return None


def error_detail(body: Any) -> tuple[str, str]:
    """The ``message`` and ``code``/``type`` of an OpenAI- or Anthropic-style error body (either may be empty)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code") or error.get("type")
        return (message if isinstance(message, str) else "", code if isinstance(code, str) else "")
    if isinstance(error, str):
        return error, ""
    return "", ""


def _redact(text: str, route: Route) -> str:
    if route.has_key and route.api_key in text:
        text = text.replace(route.api_key, "***")
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 3] + "..."


def error_from_status(route: Route, status: int, message: str, code: str, retries: int) -> ProviderError:
    """Turn a final HTTP error into the category, message and fatality the loop acts on."""
    where = f"{route.route} at {route.public_base_url()}"
    detail = _redact(message or code, route)
    suffix = f": {detail}" if detail else ""
    if status in (401, 403):
        if route.has_key:
            hint = f"check {route.key_env}"
        else:
            hint = f"set {route.key_env}" if route.key_env else "this server needs a key"
        return ProviderError(
            ErrorCategory.PROVIDER_AUTH,
            f"{where}: the provider refused the credentials (HTTP {status}); {hint}",
            fatal=True,
            counted=True,
        )
    if status == 404:
        return ProviderError(
            ErrorCategory.MODEL_NOT_FOUND,
            f"{where}: model {route.model!r} not found (HTTP 404{suffix}); check the model name and --base-url",
            fatal=True,
            counted=True,
        )
    text = f"{message} {code}".lower()
    if status in (400, 413, 422) and any(marker in text for marker in _CONTEXT_MARKERS):
        return ProviderError(
            ErrorCategory.CONTEXT_OVERFLOW, f"{where}: the conversation exceeds the model's context window"
        )
    if status == 429:
        return ProviderError(
            ErrorCategory.PROVIDER_RATE_LIMIT,
            f"{where}: rate limited (HTTP 429) after {retries} retries{suffix}",
            counted=True,
        )
    if status >= 500 or status in TRANSIENT_STATUSES:
        return ProviderError(
            ErrorCategory.PROVIDER_SERVER,
            f"{where}: server error (HTTP {status}) after {retries} retries{suffix}",
            counted=True,
        )
    return ProviderError(ErrorCategory.PROVIDER_BAD_REQUEST, f"{where}: request rejected (HTTP {status}{suffix})")


def connection_error(route: Route, timed_out: bool, retries: int) -> ProviderError:
    what = "timed out" if timed_out else "cannot connect"
    return ProviderError(
        ErrorCategory.PROVIDER_SERVER,
        f"{route.route} at {route.public_base_url()}: {what} after {retries} retries",
        timed_out=timed_out,
    )


def make_transport(route: Route, settings: BuiltinSettings, on_status: StatusHook) -> Transport:
    """The SDK-backed transport for the route's API (the SDK is imported here, not at startup)."""
    try:
        if route.api == "anthropic":
            from worktrial.agents.builtin.anthropic_messages import AnthropicTransport

            return AnthropicTransport(route, settings, on_status)
        from worktrial.agents.builtin.openai_chat import OpenAIChatTransport

        return OpenAIChatTransport(route, settings, on_status)
    except ImportError as exc:
        package = "anthropic" if route.api == "anthropic" else "openai"
        raise BadInputError(f"the builtin agent needs the {package} package: pip install {package} ({exc})") from None
