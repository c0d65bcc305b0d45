"""Tool definitions as the model sees them (JSON Schema), and argument validation against them.

Models send malformed or incomplete arguments often enough that validation is part of the loop: a bad call is
answered with a clear error so the model can correct itself, and counted as ``invalid_tool_call``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FINISH = "finish"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = {"type": "string", "description": "Path relative to the repository root."}

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "bash",
        "Run a shell command (bash -c) in the repository root. stdout and stderr are combined; long output keeps its "
        "head and tail. There is no interactive input.",
        _schema(
            {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout_secs": {"type": "integer", "minimum": 1, "description": "Optional limit for this command."},
            },
            ["command"],
        ),
    ),
    ToolSpec(
        "read_file",
        "Read a text file, with line numbers. Use start_line/end_line (1-based, inclusive) for large files.",
        _schema(
            {
                "path": _PATH,
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            ["path"],
        ),
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file with exactly the given content (parent directories are created).",
        _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    ),
    ToolSpec(
        "edit_file",
        "Replace one exact occurrence of old_string with new_string in a file. Fails if old_string occurs zero or "
        "several times; include enough surrounding text to make it unique.",
        _schema(
            {"path": _PATH, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            ["path", "old_string", "new_string"],
        ),
    ),
    ToolSpec(
        "list_files",
        "List files and directories (directories end with /), skipping .git.",
        _schema(
            {
                "path": {"type": "string", "description": "Directory relative to the repository root (default .)."},
                "depth": {"type": "integer", "minimum": 1, "description": "Levels to descend (default 2)."},
            },
            [],
        ),
    ),
    ToolSpec(
        "search",
        "Search file contents with a Python regular expression; prints path:line: text for each matching line.",
        _schema(
            {
                "pattern": {"type": "string", "description": "Regular expression."},
                "path": {"type": "string", "description": "File or directory to search (default .)."},
                "glob": {"type": "string", "description": "Only files whose path or name matches, e.g. *.py."},
            },
            ["pattern"],
        ),
    ),
    ToolSpec(
        FINISH,
        "End the task. status is success if the task is done and checked, failure if you cannot complete it.",
        _schema(
            {
                "status": {"type": "string", "enum": ["success", "failure"]},
                "summary": {"type": "string", "description": "One or two sentences on what you did."},
            },
            ["status", "summary"],
        ),
    ),
)

TOOL_NAMES: tuple[str, ...] = tuple(spec.name for spec in TOOL_SPECS)
SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}

_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "object": (dict,)}


def validate_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """What is wrong with ``arguments`` for ``spec`` (for the model to read), or None if they are valid."""
    properties: dict[str, Any] = spec.parameters["properties"]
    missing = [name for name in spec.parameters["required"] if name not in arguments]
    if missing:
        return f"{spec.name}: missing required argument(s): {', '.join(missing)}"
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        return f"{spec.name}: unknown argument(s): {', '.join(unknown)}; expected: {', '.join(properties)}"
    for name, value in arguments.items():
        if value is None and name not in spec.parameters["required"]:
            continue  # models often spell "not given" as null
        schema = properties[name]
        expected = _TYPES[schema["type"]]
        # JSON has no int/bool distinction problem, Python does: True is an int.
        if isinstance(value, bool) or not isinstance(value, expected):
            return f"{spec.name}: argument {name} must be a {schema['type']}"
        if "enum" in schema and value not in schema["enum"]:
            return f"{spec.name}: argument {name} must be one of {', '.join(schema['enum'])}"
        if "minimum" in schema and value < schema["minimum"]:
            return f"{spec.name}: argument {name} must be at least {schema['minimum']}"
    return None
