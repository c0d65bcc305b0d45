"""The command reference in docs/cli.md, generated from every command's ``--help`` so it cannot drift.

``python -m worktrial.cli.reference`` exits 1 when the checked-in section differs from what the code generates;
``--write`` regenerates it in place. The text is the same on every machine: a fixed width, no colour, no default
that depends on this machine (``tests/test_cli_reference.py`` checks it on every test run).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from worktrial.cli.main import main

WIDTH = 100
BEGIN = "<!-- BEGIN GENERATED: worktrial --help (python -m worktrial.cli.reference --write) -->"
END = "<!-- END GENERATED: worktrial --help -->"
REGENERATE = "python -m worktrial.cli.reference --write"
DEFAULT_DOC = Path("docs") / "cli.md"


def _contexts(command: click.Command, parent: click.Context | None, name: str) -> Iterator[click.Context]:
    """A help context for the command and each of its subcommands, depth first, subcommands by name."""
    settings = {"terminal_width": WIDTH, "max_content_width": WIDTH, **command.context_settings}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    yield ctx
    if isinstance(command, click.Group):
        for sub_name in sorted(command.list_commands(ctx)):  # lazy commands too (imported here)
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from _contexts(sub, ctx, sub_name)


def generate(root: click.Group = main) -> str:
    """The generated section, markers included: one heading and one ``--help`` text per command."""
    parts = [BEGIN, "", "## Command reference", ""]
    parts.append(
        "Every command's `--help`, generated from the code (do not edit; after changing an option run "
        f"`{REGENERATE}`). Options before the command (`worktrial -v eval ...`) are the group's."
    )
    shown: dict[int, str] = {}
    for ctx in _contexts(root, None, "worktrial"):
        path = ctx.command_path
        parts += ["", f"### `{path}`", ""]
        if id(ctx.command) in shown:
            parts.append(f"The same command as [`{shown[id(ctx.command)]}`](#{_anchor(shown[id(ctx.command)])}).")
            continue
        shown[id(ctx.command)] = path
        parts += ["```text", ctx.command.get_help(ctx).rstrip(), "```"]
    return "\n".join([*parts, "", END])


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading made of one code span."""
    return heading.lower().replace(" ", "-")


def current(text: str) -> str | None:
    """The generated section of ``text`` as checked in (markers included), or None when it has none."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start : end + len(END)]


def regenerated(text: str, root: click.Group = main) -> str:
    """``text`` with its generated section replaced (appended when it has none)."""
    section = current(text)
    if section is None:
        return text.rstrip("\n") + "\n\n" + generate(root) + "\n"
    return text.replace(section, generate(root))


def command_line(argv: list[str]) -> int:
    """`python -m worktrial.cli.reference [--write] [DOC]`: check (exit 1 when stale) or regenerate DOC."""
    write = "--write" in argv
    paths = [Path(a) for a in argv if a != "--write"]
    doc = paths[0] if paths else DEFAULT_DOC
    text = doc.read_text(encoding="utf-8")
    if write:
        doc.write_text(regenerated(text), encoding="utf-8")
        print(f"{doc}: command reference regenerated")
        return 0
    if current(text) != generate():
        print(f"{doc}: the command reference differs from the code; run: {REGENERATE}", file=sys.stderr)
        return 1
    print(f"{doc}: the command reference is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(command_line(sys.argv[1:]))
