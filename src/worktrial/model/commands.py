"""The three command forms a suite may use, and how each becomes an argv.

A plain string is split on whitespace with no shell and no quote processing. That is deliberate
compatibility with existing suites: ``grep -qx {"a":1} f`` passes ``{"a":1}`` as one argument and
``grep -qx #Journal f`` passes ``#Journal``. ``{"argv": [...]}`` gives an exact argv and
``{"sh": "..."}`` runs through ``/bin/sh -c``.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

SHELL = "/bin/sh"


class ArgvCommand(BaseModel):
    """An exact argument vector, run without a shell."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    argv: list[Annotated[str, StringConstraints(min_length=0)]] = Field(min_length=1)


class ShCommand(BaseModel):
    """A shell command line, run by ``/bin/sh -c``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sh: Annotated[str, StringConstraints(min_length=1)]


NonBlankStr = Annotated[str, StringConstraints(pattern=r"\S")]
Command = Union[NonBlankStr, ArgvCommand, ShCommand]  # noqa: UP007 - pydantic needs a named union here


def to_argv(command: Command) -> list[str]:
    """The argv a command runs as."""
    if isinstance(command, str):
        return command.split()
    if isinstance(command, ArgvCommand):
        return list(command.argv)
    return [SHELL, "-c", command.sh]


def display(command: Command) -> str:
    """A one-line human form of a command, for reasons, prompts and lints."""
    if isinstance(command, str):
        return " ".join(command.split())
    if isinstance(command, ArgvCommand):
        return " ".join(_quote_for_display(a) for a in command.argv)
    return f"sh -c {_quote_for_display(command.sh)}"


def _quote_for_display(arg: str) -> str:
    if arg and all(ch.isalnum() or ch in '-_./=:,@%+{}#"' for ch in arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"
