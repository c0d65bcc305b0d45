"""Tool definitions as the model sees them, and argument validation against them.

Each tool's arguments are a pydantic model: the JSON Schema sent to the provider is generated from it (so the schema
and the validation cannot drift apart), and the handlers in ``tools.py`` get typed arguments. Models send malformed
or incomplete arguments often enough that validation is part of the loop: a bad call is answered with a clear error
so the model can correct itself, and counted as ``invalid_tool_call``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FINISH = "finish"
PATH_HELP = "Path relative to the repository root."


class ToolArgs(BaseModel):
    """Arguments of one tool call: strict JSON types (``"5"`` is not an integer), no unknown keys.

    Optional arguments may be omitted or sent as null (models often spell "not given" that way).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BashArgs(ToolArgs):
    command: str = Field(description="The command line to run.")
    timeout_secs: int | None = Field(None, ge=1, description="Optional limit for this command.")


class ReadFileArgs(ToolArgs):
    path: str = Field(description=PATH_HELP)
    start_line: int | None = Field(None, ge=1)
    end_line: int | None = Field(None, ge=1)


class WriteFileArgs(ToolArgs):
    path: str = Field(description=PATH_HELP)
    content: str


class EditFileArgs(ToolArgs):
    path: str = Field(description=PATH_HELP)
    old_string: str
    new_string: str


class ListFilesArgs(ToolArgs):
    path: str | None = Field(None, description="Directory relative to the repository root (default .).")
    depth: int | None = Field(None, ge=1, description="Levels to descend (default 2).")


class SearchArgs(ToolArgs):
    pattern: str = Field(description="Regular expression.")
    path: str | None = Field(None, description="File or directory to search (default .).")
    glob: str | None = Field(None, description="Only files whose path or name matches, e.g. *.py.")


class FinishArgs(ToolArgs):
    status: Literal["success", "failure"]
    summary: str = Field(description="One or two sentences on what you did.")


def _plain(schema: Any) -> Any:
    """Pydantic's schema without what providers do not need: titles, null defaults, ``anyOf [X, null]``.

    Optional arguments are simply not required; small local models follow a flat schema more reliably.
    """
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    options = schema.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
        inner = next(option for option in options if option != {"type": "null"})
        schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **inner}
    return {
        key: _plain(value)
        for key, value in schema.items()
        if key != "title" and not (key == "default" and value is None)
    }


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type[ToolArgs]

    @cached_property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, as sent to the provider (built once: it goes out with every request)."""
        schema: dict[str, Any] = _plain(self.arguments.model_json_schema())
        schema.setdefault("required", [])
        return schema


TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "bash",
        "Run a shell command (bash -c) in the repository root. stdout and stderr are combined; long output keeps its "
        "head and tail. There is no interactive input.",
        BashArgs,
    ),
    ToolSpec(
        "read_file",
        "Read a text file, with line numbers. Use start_line/end_line (1-based, inclusive) for large files.",
        ReadFileArgs,
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file with exactly the given content (parent directories are created).",
        WriteFileArgs,
    ),
    ToolSpec(
        "edit_file",
        "Replace one exact occurrence of old_string with new_string in a file. Fails if old_string occurs zero or "
        "several times; include enough surrounding text to make it unique.",
        EditFileArgs,
    ),
    ToolSpec(
        "list_files",
        "List files and directories (directories end with /), skipping .git.",
        ListFilesArgs,
    ),
    ToolSpec(
        "search",
        "Search file contents with a Python regular expression; prints path:line: text for each matching line.",
        SearchArgs,
    ),
    ToolSpec(
        FINISH,
        "End the task. status is success if the task is done and checked, failure if you cannot complete it.",
        FinishArgs,
    ),
)

TOOL_NAMES: tuple[str, ...] = tuple(spec.name for spec in TOOL_SPECS)
SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}


class InvalidArguments(Exception):
    """The arguments do not fit the tool; the message is for the model to read and correct."""


def parse_arguments_for(spec: ToolSpec, arguments: Mapping[str, Any]) -> ToolArgs:
    """The typed arguments of a call, or InvalidArguments saying what is wrong in the model's terms."""
    try:
        return spec.arguments.model_validate(dict(arguments))
    except ValidationError as exc:
        raise InvalidArguments(_describe(spec, exc)) from None


def validate_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with ``arguments`` for ``spec`` (for the model to read), or None if they are valid."""
    try:
        parse_arguments_for(spec, arguments)
    except InvalidArguments as exc:
        return str(exc)
    return None


def _problem(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "literal_error":
        return f"must be one of {str(ctx['expected']).replace(chr(39), '').replace(' or ', ', ')}"
    if kind == "int_type":
        return "must be an integer"
    if kind == "string_type":
        return "must be a string"
    return str(err["msg"]).replace("Input should be", "must be")


def _describe(spec: ToolSpec, exc: ValidationError) -> str:
    """The first kind of problem only, as the hand-written validator said it: missing, unknown, then wrong values."""
    errors = exc.errors()
    if any(not e["loc"] for e in errors):
        return f"{spec.name}: the arguments must be a JSON object"
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
    if missing:
        return f"{spec.name}: missing required argument(s): {', '.join(missing)}"
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if unknown:
        expected = ", ".join(spec.arguments.model_fields)
        return f"{spec.name}: unknown argument(s): {', '.join(unknown)}; expected: {expected}"
    first = errors[0]
    return f"{spec.name}: argument {first['loc'][0]} {_problem(first)}"
