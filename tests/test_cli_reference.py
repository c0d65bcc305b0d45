"""docs/cli.md's command reference is every command's --help as the code generates it: a flag added, renamed or
reworded without regenerating the reference fails here, with the command that regenerates it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from worktrial.cli import reference
from worktrial.cli.main import eval_cmd, main

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_the_checked_in_reference_is_the_generated_one() -> None:
    checked_in = reference.current(DOC.read_text(encoding="utf-8"))
    assert checked_in is not None, f"docs/cli.md has no generated reference; run: {reference.REGENERATE}"
    assert checked_in == reference.generate(), f"docs/cli.md's command reference is stale; run: {reference.REGENERATE}"


def test_every_command_has_its_help_in_the_reference() -> None:
    section = reference.generate()
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert f"### `worktrial {name}`" in section
        assert f"Usage: worktrial {name} " in section or isinstance(command, click.Group)


def test_a_flag_added_without_regenerating_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "cli.md"
    doc.write_text(DOC.read_text(encoding="utf-8"), encoding="utf-8")
    assert reference.command_line([str(doc)]) == 0
    monkeypatch.setattr(eval_cmd, "params", [*eval_cmd.params, click.Option(["--brand-new"], help="New.")])
    assert reference.command_line([str(doc)]) == 1
    assert f"differs from the code; run: {reference.REGENERATE}" in capsys.readouterr().err
    assert reference.command_line(["--write", str(doc)]) == 0
    assert reference.command_line([str(doc)]) == 0 and "--brand-new" in doc.read_text(encoding="utf-8")


def test_the_reference_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = reference.generate()
    for name, value in (("COLUMNS", "40"), ("LINES", "5"), ("FORCE_COLOR", "1"), ("TERM", "xterm-256color")):
        monkeypatch.setenv(name, value)
    assert reference.generate() == wide
    assert "\x1b" not in wide and max(len(line) for line in wide.splitlines() if not line.startswith("Every")) <= 100
