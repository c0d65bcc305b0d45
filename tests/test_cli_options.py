"""One option, one meaning: an option several commands take has one help text everywhere, and eval's old ``-v``
(now ``--reasons``) still works without being listed next to the global ``-v`` (the log level)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import click

from tests.conftest import task
from worktrial.cli.main import main

# Options whose name is shared but whose meaning is the command's own, on purpose.
OWN_MEANING = {
    ("--attempts", "power"),  # the attempts of a planned comparison, not of a run
    ("--base-url", "resume"),  # the stored URL again, when it held credentials
    ("--output", "view"),  # the HTML page, not a report
    ("--output", "export"),  # a directory in another tool's layout, not a report
    ("--trust", "agents"),  # hidden: the old spelling of --trust-project, refused with the new name
}


def commands(command: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from commands(sub, (*path, name))


def test_an_option_several_commands_take_has_one_help_text() -> None:
    helps: dict[str, dict[str, str]] = defaultdict(dict)
    for path, command in commands():
        for param in command.params:
            if not isinstance(param, click.Option) or (param.opts[0], path) in OWN_MEANING:
                continue
            kind = param.opts[0] + (str(list(param.type.choices)) if isinstance(param.type, click.Choice) else "")
            # Only the default may differ (--workspace of audit, --jobs of resume): it is the command's.
            helps[kind][path] = re.sub(r"\(default: .*\)", "(default: ...)", param.help or "")
    differing = {kind: by for kind, by in helps.items() if len(set(by.values())) > 1}
    assert differing == {}
    assert len(helps["--workspace"]) >= 10  # every command that reads a repository takes the one option


def test_reasons_is_listed_and_the_old_v_still_works(cli, repo: Path, write_suite) -> None:
    listed = cli(["eval", "--help"]).output
    assert re.search(r"^  --reasons ", listed, re.M)
    assert not re.search(r"^  (-v|--verbose)\b", listed, re.M) and "-v, --" not in listed
    suite = str(write_suite([task()]))
    for flag in ("--reasons", "-v", "--verbose"):
        result = cli(["eval", "--suite", suite, "--agent", "oracle", "--trust", "--format", "json", flag], cwd=repo)
        assert result.exit_code == 0, (flag, result.output)
    assert re.search(r"^  -v, --verbose ", cli(["--help"]).output, re.M)  # the global one: the log level
