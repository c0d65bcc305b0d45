"""The typed configuration: what ``config.toml`` and ``worktrial.toml`` may contain.

One pydantic model per table, all strict (TOML already has types: ``"1.5"`` is not a price) and closed (an unknown
key is a typo the user wants to hear about). The models live in ``model/`` because both ``state/`` (which reads the
files) and ``agents/`` (which consumes the tables) need them, and those two layers may not import each other.

To add a key, add a field to the table's model: validation, error messages and ``worktrial schema``-style
introspection all follow from the annotation.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from worktrial.errors import BadInputError

Api = Literal["openai", "anthropic"]
BUILTIN_KEY = "agents.builtin"
"""Where ``[agents.builtin]`` goes during validation (a key TOML cannot produce at the top level unquoted)."""


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


NonEmptyStr = Annotated[str, AfterValidator(_not_blank)]
Dollars = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Table(BaseModel):
    """Base of every config table: strict types, no unknown keys, immutable once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    HINT: ClassVar[str] = ""
    """Said after the list of known keys when an unknown one is found."""


class ProviderConfig(Table):
    """``[providers.NAME]``: override a preset provider's URL or key variable, or declare a new provider."""

    HINT: ClassVar[str] = "keys themselves belong in the environment, never in a config file"

    base_url: NonEmptyStr | None = None
    api_key_env: NonEmptyStr | None = None
    """The name of the environment variable holding the key (never the key)."""
    api: Api | None = None
    """Which wire API the provider speaks; a new provider defaults to openai."""


class Price(Table):
    """USD per million tokens. Missing cache prices fall back to the input price (the conservative choice).

    Used both for ``[pricing."provider/model"]`` tables and for the entries of the shipped price table.
    """

    input: Dollars
    output: Dollars
    cached_input: Dollars | None = None
    cache_write: Dollars | None = None


class BuiltinSettings(Table):
    """``[agents.builtin]``: budgets and knobs of the builtin agent (recorded in the envelope, so no secrets)."""

    max_turns: int = Field(50, ge=1)
    """Model calls per attempt; reaching it ends the attempt with no claim."""
    max_tokens: int | None = Field(None, ge=1)
    """Total tokens (input + output, summed over calls) per attempt; None means no token budget."""
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    """Sampling temperature; None leaves the provider's default."""
    max_output_tokens: int | None = Field(None, ge=1)
    """Tokens per model response; None leaves the provider's default (Anthropic requires one: 8192)."""
    context_window: int | None = Field(None, ge=1024)
    """The model's context size in tokens; None uses the preset's default (128k cloud, 32k local)."""
    bash_timeout_secs: float = Field(120.0, gt=0)
    """Per bash call; also bounded by the attempt's deadline."""
    tool_output_bytes: int = Field(16_000, ge=1_000)
    """A tool result larger than this keeps its head and tail."""
    request_timeout_secs: float = Field(600.0, gt=0)
    """Per HTTP request to the provider; also bounded by the attempt's deadline."""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries the SDK makes on 408/409/429/5xx and connection errors, with its own backoff."""


class AgentConfig(Table):
    """``[agents.NAME]`` for every agent but the builtin: a custom agent (it has a ``command``) or overrides of a
    preset CLI (``env``, ``args``, ``binary``). Which keys fit which kind is checked where the agent is built,
    because only the agent registry knows which names are presets."""

    command: NonEmptyStr | None = None
    """Custom agents: the shell command; ``{prompt}`` is replaced shell-quoted, without it the prompt goes on stdin."""
    parser: NonEmptyStr | None = None
    """Custom agents: a preset's output parser, or ``usage-file`` (the default)."""
    model_flag: NonEmptyStr | None = None
    """Custom agents: how ``--model`` reaches the command (e.g. ``--model``)."""
    description: str | None = None
    """Custom agents: the summary ``worktrial agents`` shows."""
    price_model: NonEmptyStr | None = None
    """Custom agents: the ``provider/model`` route whose price turns reported tokens into a cost when the agent
    reports none (see ``worktrial prices``)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Added to the agent's environment (values may be secrets: only the names are recorded)."""
    args: list[str] = Field(default_factory=list)
    """Presets: extra arguments placed before the prompt."""
    binary: NonEmptyStr | None = None
    """Presets: a different executable name or path."""
    pass_env: list[NonEmptyStr] = Field(default_factory=list)
    """Credential-like variables of the caller's environment this agent receives (names, or ``PREFIX_*``); see
    docs/security.md. Presets receive their own provider's without it; this adds more."""
    config_dir: bool | NonEmptyStr = True
    """Presets: ``true`` a fresh config directory per attempt with the user's settings copied in; ``false`` the
    user's own config directory; a path: copy the settings from there."""
    carry_login: bool = False
    """Presets: copy the CLI's login (its credential files and keys in its settings) into each attempt when the CLI
    is not routed through the model gateway, where the agent can read it; by default the run refuses instead."""

    CUSTOM_ONLY: ClassVar[tuple[str, ...]] = ("command", "parser", "model_flag", "description", "price_model")
    PRESET_ONLY: ClassVar[tuple[str, ...]] = ("args", "binary", "config_dir", "carry_login")


class SandboxConfig(Table):
    """``[sandbox]``, in the user's config only: defaults for the sandbox flags and paths shared with attempts."""

    HINT: ClassVar[str] = "see docs/security.md"

    mode: Literal["auto", "on", "off"] | None = None
    """--sandbox: auto (default), on or off."""
    network: Literal["on", "off", "host"] | None = None
    """--network: on (default: an attempt's own network), off (loopback only) or host."""
    max_memory: NonEmptyStr | int | None = None
    """--max-memory: a size such as ``2G``."""
    max_procs: int | None = Field(None, ge=1)
    """--max-procs: processes per attempt."""
    readable: list[NonEmptyStr] = Field(default_factory=list)
    """Absolute host paths every attempt may read (nothing else of the host beyond what it needs is shown)."""
    show: list[NonEmptyStr] = Field(default_factory=list)
    """The same as ``readable`` (the name ``--sandbox-show`` uses)."""
    writable: list[NonEmptyStr] = Field(default_factory=list)
    """Absolute host directories every attempt may write (e.g. a shared package cache)."""


def _sha256_hex(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("must be a file's sha256 as 64 lowercase hex digits (`sha256sum worktrial.toml`)")
    return value


class RunTable(Table):
    """``[run]``: defaults for how runs are recorded (the flag of the same name wins)."""

    trajectories: bool = False
    """--trajectories: store each attempt's conversation with its model as a redacted ATIF trajectory."""


class TrustConfig(Table):
    """``[trust]``, in the user's config only: project files the user reviewed, pinned by digest."""

    HINT: ClassVar[str] = "a project file cannot trust itself; this table counts only in your own config.toml"

    project_sha256: list[Annotated[str, AfterValidator(_sha256_hex)]] = Field(default_factory=list)
    """Digests of ``worktrial.toml`` files whose settings that run programs or route credentials count, in any
    workspace (a CI checkout's path changes every run; the bytes the user reviewed do not)."""


class Config(Table):
    """The whole configuration: the user's ``config.toml`` overlaid by the project's ``worktrial.toml``."""

    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """``[agents.NAME]`` except ``[agents.builtin]``, which is ``builtin`` below."""
    builtin: BuiltinSettings | None = Field(None, validation_alias=BUILTIN_KEY)
    """``[agents.builtin]`` as written (unset keys stay unset, so command-line flags can overlay it)."""
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    pricing: dict[str, Price] = Field(default_factory=dict)
    """``[pricing."provider/model"]`` or ``[pricing."provider/*"]``."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """``[sandbox]`` (user config only: a project cannot loosen its own containment)."""
    trust: TrustConfig = Field(default_factory=TrustConfig)
    """``[trust]`` (user config only: a project file cannot vouch for itself)."""
    run: RunTable = Field(default_factory=RunTable)
    """``[run]``: defaults for how runs are recorded."""

    @model_validator(mode="before")
    @classmethod
    def _split_builtin(cls, data: Any) -> Any:
        """``[agents.builtin]`` has its own model; TOML nests it under ``agents`` like every other agent."""
        if isinstance(data, dict) and isinstance(data.get("agents"), dict) and "builtin" in data["agents"]:
            agents = dict(data["agents"])
            data = {**data, "agents": agents, BUILTIN_KEY: agents.pop("builtin")}
        return data

    def custom_agents(self) -> dict[str, AgentConfig]:
        """``[agents.NAME]`` tables that define a command (preset override tables have none)."""
        return {name: table for name, table in self.agents.items() if table.command is not None}


def parse_config(data: Any, source: str = "config") -> Config:
    """Validate raw TOML data; every problem names ``source`` (the file), the table and the key, on one line."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(describe_errors(exc, source, Config)) from None


# -- error messages ---------------------------------------------------------------------------------------------


def _key(part: str | int) -> str:
    text = str(part)
    return text if text.replace("-", "").replace("_", "").isalnum() else f'"{text}"'


def _place(loc: tuple[str | int, ...]) -> str:
    """``("providers", "ollama", "api")`` -> ``[providers.ollama].api``."""
    parts = list(loc)
    if parts and parts[0] == BUILTIN_KEY:
        parts = ["agents", "builtin", *parts[1:]]
    if parts[0] in ("agents", "providers", "pricing") and len(parts) >= 2:
        table, rest = parts[:2], parts[2:]
    else:
        table, rest = [], parts
    head = f"[{'.'.join(_key(p) for p in table)}]" if table else ""
    tail = ".".join(_key(p) for p in rest)
    if head and tail:
        return f"{head}.{tail}"
    return head or tail


def _model_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the last key of ``loc`` (to list the keys it knows)."""
    current: Any = root
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get("builtin" if part == BUILTIN_KEY else str(part))
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
        while typing.get_origin(current) in (Union, types.UnionType):
            current = next(a for a in typing.get_args(current) if a is not type(None))
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _message(err: Any) -> str:
    kind = err["type"]
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"must be one of {expected.replace(chr(39), '').replace(' or ', ', ')} (got {err['input']!r})"
    if kind == "missing":
        return "is required"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    for prefix, replacement in (("Input should be", "must be"), ("String should have", "must have")):
        if msg.startswith(prefix):
            msg = replacement + msg[len(prefix) :]
    return msg if msg.startswith("must") else f"must be valid: {msg}"


def describe_errors(exc: ValidationError, source: str, root: type[BaseModel]) -> str:
    """One line for all of a validation error's problems, unknown keys grouped per table with the known ones."""
    problems: list[str] = []
    unknown: dict[tuple[str | int, ...], list[str]] = {}
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(str(loc[-1]))
            continue
        problems.append(f"{_place(loc)}: {_message(err)}")
    for where, keys in unknown.items():
        model = _model_at(root, where)
        known = [name for name in model.model_fields if not (model is Config and name == "builtin")] if model else []
        hint = getattr(model, "HINT", "") if model else ""
        label = "unknown table(s)" if not where else "unknown key(s)"
        place = f"{_place(where)}: " if where else ""
        text = f"{place}{label} {', '.join(sorted(keys))}; known: {', '.join(known)}"
        problems.append(text + (f" ({hint})" if hint else ""))
    return f"{source}: " + "; ".join(problems)
