"""The docs stay true: every ``worktrial`` command shown in README.md and docs/*.md names real commands and flags
(and, unless it is a synopsis, parses as click would run it), the flag table of docs/cli.md matches ``eval``'s real
options, and the commands that can run offline do run.

Commands are taken from fenced shell blocks (```sh, ```bash, ```console or unlabeled), one per line, ``$ `` prompts
and ``# comments`` removed. A command that needs something only the reader has (``RUN_ID``, ``SUITE.json``, an
agent program, a model provider) is checked against the CLI's options but not run; so is one that another test
already runs for real (``RUN_ELSEWHERE``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import Result

from worktrial.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
# Words that stand for something of the reader's: a run id (named or an example one), a file to supply, an ellipsis.
PLACEHOLDER = re.compile(
    r"^(\.\.\.|[A-Z][A-Z0-9_]*([.-][A-Za-z0-9_]+)*|[a-z]\.json|.*\.\.\..*|\d{8}T\d{6}Z-[0-9a-f]{6})$"
)
# What cannot run here: agents and model routes that reach outside the machine, programs the reader installs.
NEEDS_THE_READER = ("--model", "--agent-cmd", "--base-url", "--from", "--resume")
OFFLINE_AGENTS = {"oracle", "nop"}
# Commands whose exit code 1 reports findings about the input (not a failure of the command).
FINDINGS_EXIT_1 = {"check", "audit"}
# Runnable commands the docs show that another test already runs for real on the same file (give or take output
# flags such as -q or --format json, or fewer --repeats or --attempts): running them again here took over a minute.
# They are parsed instead (every command, flag, value and argument count, as click would before running them), and
# the test named beside each must still exist and run that command.
RUN_ELSEWHERE: dict[tuple[str, ...], tuple[str, str]] = {
    # README.md, step 1 of the tour (the `checkout` fixture below runs it too, with -q)
    ("eval", "--suite", "suites/smoke-workspace-basics.json", "--agent", "oracle", "--trust"): (
        "tests.test_smoke_cli",
        "test_oracle_passes_bundled_suite",
    ),
    # README.md, step 5 of the tour
    ("check", "suites/smoke-workspace-basics.json", "--trust"): (
        "tests.test_check",
        "test_check_passes_the_bundled_suite",
    ),
    # docs/environments.md: the Harbor example dataset in containers (needs podman and the base image)
    ("check", "examples/harbor", "--trust", "--workspace", "/tmp/ws"): (
        "tests.test_containers",
        "test_check_passes_on_the_example_dataset",
    ),
    ("eval", "--suite", "examples/harbor", "--agent", "oracle", "--trust", "--workspace", "/tmp/ws"): (
        "tests.test_containers",
        "test_oracle_passes_nop_fails_and_the_envelope_pins_each_image",
    ),
    (
        "eval",
        "--suite",
        "examples/harbor",
        "--agent",
        "oracle",
        "--trust",
        "--runtime",
        "podman",
        "--workspace",
        "/tmp/ws",
    ): (
        "tests.test_containers",
        "test_oracle_passes_nop_fails_and_the_envelope_pins_each_image",
    ),
    ("init", "--container", "--base-image", "debian:bookworm-slim"): (
        "tests.test_containers",
        "test_init_container_writes_a_suite_check_passes",
    ),
    # docs/suite-format.md, the example suite for a real library
    ("check", "examples/inflection/suite.json", "--trust"): (
        "tests.test_example_suite",
        "test_example_suite_checks_clean",
    ),
}


@dataclass(frozen=True)
class Shown:
    doc: str
    line: int
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: worktrial {shlex.join(self.argv)}"


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced shell block."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = stripped[3:].strip() if fence is None else None
            continue
        if fence is not None and fence in SHELL_BLOCKS:
            lines.append((number, line))
    return lines


def shown_commands() -> list[Shown]:
    found: list[Shown] = []
    for doc in DOCS:
        pending = ""
        start = 0
        for number, line in _blocks(doc.read_text(encoding="utf-8")):
            text = line.strip().removeprefix("$ ")
            if pending:
                text = pending + " " + text
            elif not text.startswith("worktrial "):
                continue
            else:
                start = number
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            pending = ""
            words = shlex.split(text, comments=True)
            found.append(Shown(str(doc.relative_to(ROOT)), start, tuple(words[1:])))
    return found


SHOWN = shown_commands()


def _option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def resolve(argv: tuple[str, ...]) -> tuple[list[str], click.Command, list[str]]:
    """(command path, the command, the words after it), past the global options and command groups."""
    command: click.Command = main
    path: list[str] = []
    words = list(argv)
    while words:
        word = words[0]
        if isinstance(command, click.Group) and not word.startswith("-"):
            sub = command.get_command(click.Context(command), word)
            assert sub is not None, f"no such command: worktrial {' '.join([*path, word])}"
            command, path, words = sub, [*path, word], words[1:]
        elif isinstance(command, click.Group) and word.startswith("-"):
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"-v+", flag):
                flag = "-v"
            assert flag in _option_names(command), f"{word} is not a global option of worktrial"
            words = words[1:]
        else:
            break
    return path, command, words


def flags_in(words: list[str]) -> list[str]:
    """The flags among a command's words, synopsis brackets and alternatives removed."""
    flags = []
    for word in words:
        word = word.strip("[]()|,")
        if word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d.*", word):
            flags.append(word.split("=", 1)[0])
    return flags


def test_the_docs_show_commands() -> None:
    assert len(SHOWN) >= 20, "the command extraction found almost nothing: did the docs' code fences change?"
    assert {s.doc for s in SHOWN} >= {"README.md", "docs/cli.md", "docs/statistics.md"}


def is_synopsis(argv: tuple[str, ...]) -> bool:
    """A usage line (``[--repeats 15]``, ``--agent NAME | --agent-cmd CMD``, ``...``), not a command to type."""
    return any(set(word) & set("[]|") or word.endswith("...") for word in argv)


def parse(argv: tuple[str, ...]) -> click.Context:
    """Parse ``worktrial ARGV`` as click does before running it, running nothing: an unknown command or flag, a bad
    value (a choice, a number), a missing required option or a wrong number of arguments raises click.UsageError."""
    path, command, words = resolve(argv)
    try:
        # Parsed under worktrial's own context, as when it runs: click caches each command's help option from the
        # first context it sees (``-h, --help`` here), which the generated reference then shows.
        parent = click.Context(main, info_name="worktrial", **main.context_settings) if command is not main else None
        return command.make_context(" ".join(["worktrial", *path]), list(words), parent=parent)
    except click.exceptions.Exit as done:  # --help, --version: parsed, and nothing left to run
        assert done.exit_code == 0, f"worktrial {shlex.join(argv)} exited {done.exit_code} while parsing"
        return click.Context(command)


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_every_shown_command_and_flag_exists(shown: Shown) -> None:
    path, command, words = resolve(shown.argv)
    assert path, f"{shown}: names no command"
    known = _option_names(command)
    unknown = [flag for flag in flags_in(words) if flag not in known]
    assert not unknown, f"{shown}: {', '.join(unknown)} not options of `worktrial {' '.join(path)}`"
    if not is_synopsis(shown.argv):
        try:
            parse(shown.argv)
        except click.UsageError as bad:
            pytest.fail(f"{shown}: {bad.format_message()}")


def _table_flags(doc: Path) -> list[tuple[str, bool]]:
    """Flags in the first cell of each table row of ``doc``, and whether the row says "before the command"."""
    rows: list[tuple[str, bool]] = []
    for line in doc.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `-"):
            continue
        cell = line.split(" | ", 1)[0]
        for code in re.findall(r"`([^`]+)`", cell):
            words = [re.sub(r"^-v+$", "-v", word) for word in flags_in(code.split())]
            rows.extend((word, "before the command" in cell) for word in words)
    return rows


def test_the_cli_flag_table_and_the_real_eval_options_agree() -> None:
    doc = ROOT / "docs" / "cli.md"
    rows = _table_flags(doc)
    assert rows, "docs/cli.md has no flag table"
    _, eval_cmd, _ = resolve(("eval",))
    global_names, eval_names = _option_names(main), _option_names(eval_cmd)
    for flag, before in rows:
        assert flag in (global_names if before else eval_names), f"docs/cli.md documents {flag}, which does not exist"
    documented = "\n".join(d.read_text(encoding="utf-8") for d in DOCS)
    for param in eval_cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            mentioned = [o for o in param.opts if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", documented)]
            assert mentioned, f"eval {param.opts[0]} is documented nowhere in README.md or docs/"


def _runnable(shown: Shown) -> bool:
    path, _, words = resolve(shown.argv)
    if not path or path[0] in ("exec",) or is_synopsis(shown.argv) or any(PLACEHOLDER.match(w) for w in shown.argv):
        return False
    if any(word.split("=", 1)[0] in NEEDS_THE_READER for word in words):
        return False
    agents = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--agent"]
    return all(agent in OFFLINE_AGENTS for agent in agents)


RUNNABLE = [shown for shown in SHOWN if _runnable(shown)]


def test_some_shown_commands_run_offline() -> None:
    """The quick start's oracle run and the power calculations at least must stay runnable examples."""
    assert any(s.argv[:1] == ("eval",) for s in RUNNABLE) and any(s.argv[:1] == ("power",) for s in RUNNABLE)


@pytest.mark.parametrize("argv", RUN_ELSEWHERE, ids=shlex.join)
def test_a_command_run_elsewhere_is_shown_parses_and_still_runs_there(argv: tuple[str, ...]) -> None:
    """Each entry of RUN_ELSEWHERE stands for a runnable command the docs show (a stale entry fails here), parses
    in full, and the test it names still runs that command on that file."""
    assert argv in {s.argv for s in RUNNABLE}, f"worktrial {shlex.join(argv)} is no longer a runnable docs command"
    parse(argv)
    module, name = RUN_ELSEWHERE[argv]
    elsewhere = getattr(importlib.import_module(module), name, None)
    assert callable(elsewhere), f"{module}.{name}, which runs worktrial {shlex.join(argv)}, is gone"
    assert f'"{argv[0]}"' in inspect.getsource(elsewhere), f"{module}.{name} no longer runs `{argv[0]}`"
    source = inspect.getsource(importlib.import_module(module))
    for file in (Path(word) for word in argv if word.endswith(".json")):
        assert file.parent.name in source and file.name in source, f"{module} no longer runs it on {file}"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A git repository holding the project's suites and examples, as a reader's checkout would, after the quick
    start's oracle run (so ``runs``, ``show`` and ``report`` have a run to show); and the config dir of that run."""
    copy = tmp_path_factory.mktemp("docs") / "checkout"
    copy.mkdir()
    for name in ("suites", "examples"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, copy / name)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "docs examples"]):
        subprocess.run(["git", *args], cwd=copy, check=True, capture_output=True)
    state = tmp_path_factory.mktemp("docs-state")
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_CONFIG_DIR": str(state), "TMPDIR": str(state)}
    # This checkout's code, as every test's own subprocesses get it (conftest), not the venv's editable install:
    # a module fixture runs before the autouse fixture that sets PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    # One attempt a task, not the suite's three: the commands below need a stored run, not its error bars.
    suite = "suites/smoke-workspace-basics.json"
    quick_start = ["eval", "--suite", suite, "--agent", "oracle", "--attempts", "1", "-q"]
    done = subprocess.run([sys.executable, "-m", "worktrial", *quick_start], cwd=copy, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return copy, state


@pytest.fixture
def project_copy(checkout: tuple[Path, Path], tmp_path: Path) -> Path:
    """A private copy of the checkout, so one command's runs and files never reach the next; with the user state
    (run signing keys) of the quick-start run, as the reader who ran it has."""
    repo, state = checkout
    shutil.copytree(state, os.environ["WORKTRIAL_CONFIG_DIR"], dirs_exist_ok=True)
    return Path(shutil.copytree(repo, tmp_path / "checkout", symlinks=True))


@pytest.mark.slow
@pytest.mark.parametrize("shown", [s for s in RUNNABLE if s.argv not in RUN_ELSEWHERE], ids=str)
def test_shown_offline_commands_run(
    shown: Shown, project_copy: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKTRIAL_TRUST", "1")  # a reader answers the trust prompt; a test cannot
    result = cli(list(shown.argv), cwd=project_copy)
    path, _, _ = resolve(shown.argv)
    allowed = (0, 1) if path[0] in FINDINGS_EXIT_1 else (0,)
    assert result.exit_code in allowed, f"{shown} exited {result.exit_code}:\n{result.output}"
    assert "Traceback" not in result.output
