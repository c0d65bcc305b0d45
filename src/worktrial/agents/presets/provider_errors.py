"""Provider failures as agent CLIs report them, sorted into the built-in agent's error categories.

A CLI that cannot reach its model still exits and prints a final result, so without this step a rejected
key or a misspelt model looks like an agent that tried and failed: the attempt is scored ``fail`` and the
leaderboard ranks it. Each preset's parser extracts what its CLI says (an HTTP status where it gives one,
otherwise the error text) and asks ``classify``; authentication and unknown-model errors are fatal, because
they would repeat on every attempt, so the run stops with exit 2 like the built-in agent's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from worktrial.agents.builtin.transport import status_category
from worktrial.model.records import FATAL_ERRORS, ErrorCategory

DETAIL_CHARS = 160

_AUTH = (
    r"\b(401|403)\b|unauthori[sz]ed|invalid[ _-]?(x-)?api[ _-]?key|incorrect api key|authentication|"
    r"not logged in|permission[ _]denied|forbidden"
)
_MODEL = r"model_not_found|\b404\b|model .{0,80}(does not exist|not found)|unknown model"
_RATE = r"\b429\b|rate[ _-]?limit|too many requests|quota"
_SERVER = r"\b5\d\d\b|overloaded|internal server error|bad gateway|service unavailable"
_NETWORK = r"connection refused|error sending request|could not resolve|dns error|network is unreachable"
_TEXT_RULES: tuple[tuple[ErrorCategory, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern, re.I))
    for category, pattern in (
        (ErrorCategory.PROVIDER_AUTH, _AUTH),
        (ErrorCategory.MODEL_NOT_FOUND, _MODEL),
        (ErrorCategory.PROVIDER_RATE_LIMIT, _RATE),
        (ErrorCategory.PROVIDER_SERVER, _SERVER),
        (ErrorCategory.PROVIDER_UNREACHABLE, _NETWORK),
    )
)


LITELLM_EXCEPTIONS: dict[str, ErrorCategory] = {
    "AuthenticationError": ErrorCategory.PROVIDER_AUTH,
    "PermissionDeniedError": ErrorCategory.PROVIDER_AUTH,
    "NotFoundError": ErrorCategory.MODEL_NOT_FOUND,
    "RateLimitError": ErrorCategory.PROVIDER_RATE_LIMIT,
    "InternalServerError": ErrorCategory.PROVIDER_SERVER,
    "ServiceUnavailableError": ErrorCategory.PROVIDER_SERVER,
    "BadGatewayError": ErrorCategory.PROVIDER_SERVER,
    "APIError": ErrorCategory.PROVIDER_SERVER,
    "Timeout": ErrorCategory.PROVIDER_UNREACHABLE,
    "APIConnectionError": ErrorCategory.PROVIDER_UNREACHABLE,
    "BadRequestError": ErrorCategory.PROVIDER_BAD_REQUEST,
    "UnprocessableEntityError": ErrorCategory.PROVIDER_BAD_REQUEST,
    "ContextWindowExceededError": ErrorCategory.PROVIDER_BAD_REQUEST,
    "UnsupportedParamsError": ErrorCategory.PROVIDER_BAD_REQUEST,
}
"""litellm's exception classes (aider and mini-swe-agent name them in their output) and what each stands for."""


@dataclass(frozen=True)
class ProviderFailure:
    category: ErrorCategory
    message: str

    @property
    def fatal(self) -> bool:
        return self.category in FATAL_ERRORS


def classify(status: int | None, text: str | None) -> ErrorCategory | None:
    """The error category for an HTTP status (preferred) or, failing that, for the CLI's error text."""
    if status is not None:
        category = status_category(status)
        if category is not None:
            return category
    for category, pattern in _TEXT_RULES:
        if text and pattern.search(text):
            return category
    return None


def classify_litellm(exception: str, text: str | None) -> ErrorCategory | None:
    """The category of a litellm exception by class name; a bad request is read closer from its text, because
    litellm reports e.g. an unknown provider or model as ``BadRequestError``."""
    category = LITELLM_EXCEPTIONS.get(exception)
    if category == ErrorCategory.PROVIDER_BAD_REQUEST:
        return classify(None, text) or category
    return category or classify(None, text)


def short(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= DETAIL_CHARS else flat[: DETAIL_CHARS - 3] + "..."


def failure(
    cli: str, category: ErrorCategory, status: int | None, detail: str | None, key_hint: str
) -> ProviderFailure:
    """One line naming the CLI, what the provider said and the fix."""
    where = f"{cli}: " + (f"HTTP {status}" if status is not None else "provider error")
    said = f" ({short(detail)})" if detail else ""
    if category == ErrorCategory.PROVIDER_AUTH:
        return ProviderFailure(category, f"{where}: the provider refused the credentials{said}; {key_hint}")
    if category == ErrorCategory.MODEL_NOT_FOUND:
        return ProviderFailure(
            category, f"{where}: the provider does not know this model{said}; check --model (and --base-url)"
        )
    if category == ErrorCategory.PROVIDER_RATE_LIMIT:
        return ProviderFailure(category, f"{where}: rate limited after the CLI's own retries{said}")
    if category == ErrorCategory.PROVIDER_BAD_REQUEST:
        return ProviderFailure(category, f"{where}: the provider rejected the request{said}; check --model")
    if category == ErrorCategory.PROVIDER_UNREACHABLE:
        return ProviderFailure(category, f"{where}: the provider could not be reached{said}; check --base-url")
    return ProviderFailure(category, f"{where}: the provider failed after the CLI's own retries{said}")
