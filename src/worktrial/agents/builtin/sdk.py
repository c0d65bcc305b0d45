"""What the two provider SDKs share: building a client and turning their exceptions into ``ProviderError``.

``openai`` and ``anthropic`` are generated from the same template (Stainless): the same client arguments, the same
``DefaultHttpxClient`` and the same exception names. The transports pass their SDK module here, so the setup and the
error mapping exist once and cannot drift apart between the two APIs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TypeVar

from worktrial.agents.builtin.routes import Route
from worktrial.agents.builtin.settings import BuiltinSettings
from worktrial.agents.builtin.transport import (
    ProviderError,
    StatusHook,
    connection_error,
    error_detail,
    error_from_status,
)
from worktrial.model.records import ErrorCategory

Client = TypeVar("Client")


def sdk_client(
    sdk: ModuleType, client: Callable[..., Client], route: Route, settings: BuiltinSettings, on_status: StatusHook
) -> Client:
    """One SDK client per attempt, so its response hook counts that attempt's HTTP statuses only."""
    http_client = sdk.DefaultHttpxClient(event_hooks={"response": [lambda r: on_status(r.status_code)]})
    return client(
        api_key=route.api_key,
        base_url=route.base_url,
        max_retries=settings.max_retries,
        timeout=settings.request_timeout_secs,
        http_client=http_client,
    )


@contextlib.contextmanager
def sdk_errors(sdk: ModuleType, base_error: type[Exception], route: Route, settings: BuiltinSettings) -> Iterator[None]:
    """Inside: the SDK's final failures (after its own retries) become ``ProviderError`` with a category.

    ``base_error`` is the SDK's root exception (``OpenAIError``, ``AnthropicError``): a response the SDK could not
    parse is a server problem, not a crash of the attempt.
    """
    try:
        yield
    except sdk.APIStatusError as exc:
        message, code = error_detail(exc.body)
        raise error_from_status(route, exc.status_code, message, code, settings.max_retries) from None
    except sdk.APIConnectionError as exc:
        timed_out = isinstance(exc, sdk.APITimeoutError)
        raise connection_error(route, timed_out, settings.max_retries) from None
    except base_error as exc:
        raise ProviderError(
            ErrorCategory.PROVIDER_SERVER, f"{route.route}: unusable response ({type(exc).__name__})"
        ) from None
