"""Options that several commands take, defined once: one name, one help text, one meaning everywhere.

A command that needs one applies the decorator (``@workspace_option()``, ``@report_format_option``); the
generated reference in docs/cli.md shows the same text under every command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class RenamedOption(click.Option):
    """An option listed in --help under its current names only; its ``old`` spellings still work."""

    def __init__(self, *args: Any, old: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old = tuple(old)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = [name for name in opts if name not in self.old]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts


def apply(*options: Callable[[F], F]) -> Callable[[F], F]:
    """Several options as one decorator, shown in --help in the order given."""

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def workspace_option(default: str = "the one containing the current directory") -> Callable[[F], F]:
    """``--workspace DIR``: the git repository worktrial works in. Only where the default differs does it say so."""
    return click.option(
        "--workspace",
        type=click.Path(path_type=Path, file_okay=False),
        metavar="DIR",
        help="The git repository worktrial works in: eval evaluates it, its .worktrial/ holds the runs, its "
        f"worktrial.toml is read (default: {default}).",
    )


SUITE_HELP = "The suite file, or a Harbor task directory or a directory of them (docs/environments.md)."
suite_option = click.option(
    "--suite", "suite_path", required=True, type=click.Path(path_type=Path), metavar="PATH", help=SUITE_HELP
)


optional_suite_option = click.option(
    "--suite", "suite_path", type=click.Path(path_type=Path), metavar="PATH", help=SUITE_HELP
)
"""``--suite`` of a command with a suite to fall back on (``regrade``: the run's; its docstring says so)."""


REPORT_FORMAT_HELP = "auto: tables on a terminal, markdown when piped; markdown; json."
report_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "markdown", "json"]),
    default="auto",
    show_default=True,
    help=REPORT_FORMAT_HELP,
)
"""``--format`` of commands that print a report (eval, resume, report, compare, check)."""

text_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: for reading; json: for programs.",
)
"""``--format`` of commands that print a short plain-text result (power, audit)."""

table_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="table: a terminal table (markdown when piped); markdown; json.",
)
"""``--format`` of listing commands (agents, prices): rows, not a report."""

output_option = click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="Write the report to FILE (atomically) instead of stdout.",
)
junit_option = click.option(
    "--junit", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE", help="Also write JUnit XML (for CI)."
)
quiet_option = click.option("-q", "--quiet", is_flag=True, help="Print only the report.")
reasons_option = click.option(
    "--reasons",
    "-v",
    "--verbose",
    "verbose",
    is_flag=True,
    cls=RenamedOption,
    old=("-v", "--verbose"),
    help="Show every attempt's reason in the progress lines (formerly -v, which is the log level before the command).",
)
"""Formerly ``eval -v``; ``-v`` and ``--verbose`` still work here, unlisted (``worktrial -v`` is the log level)."""

trust_option = click.option(
    "--trust", is_flag=True, help="Trust the suite to run its commands (remembered per workspace and suite digest)."
)
trust_project_option = click.option(
    "--trust-project",
    is_flag=True,
    help="Also trust the repository's own worktrial.toml: its agent binaries, commands and provider URLs "
    "(remembered; --trust never does).",
)


class JobsType(click.ParamType["int | str", Any]):
    """``--jobs``: a whole number of at least 1, or ``auto``."""

    name = "jobs"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value == "auto":
            return value if isinstance(value, int) else "auto"
        try:
            number = int(str(value))
        except ValueError:
            self.fail(f"{value!r} is neither a whole number nor 'auto'", param, ctx)
        if number < 1:
            self.fail(f"{number} is not at least 1", param, ctx)
        return number


def jobs_option(default: str = "min(4, CPU cores)") -> Callable[[F], F]:
    """``--jobs N|auto``; never this machine's CPU count in the help, which the generated reference would then show."""
    return click.option(
        "--jobs",
        "-j",
        type=JobsType(),
        metavar="N|auto",
        help="Attempts to run at once; auto: as many as CPU, memory and the provider's 429s allow, within "
        f"--max-jobs (default: {default}).",
    )


max_jobs_option = click.option(
    "--max-jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="With --jobs auto (implied when given alone): the most attempts at once (default: 4 per CPU core).",
)


retry_errors_option = click.option(
    "--retry-errors",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="Run an attempt that ended in an infrastructure error again, up to N times (never failures, timeouts or "
    "other errors; docs/results.md lists which).",
)

runtime_option = click.option(
    "--runtime",
    "container_runtime",
    type=click.Choice(["auto", "docker", "podman"]),
    default="auto",
    show_default=True,
    help="The container CLI for tasks with a container environment (auto: podman, then docker; docs/environments.md).",
)


def _multiplier(flag: str, what: str) -> Callable[[F], F]:
    return click.option(
        flag, type=click.FloatRange(0, min_open=True), metavar="X", help=f"Multiply {what} by X (Harbor's flag)."
    )


harbor_run_options = apply(
    click.option(
        "--force-build",
        is_flag=True,
        help="Build a container task's image from its Dockerfile even where it names an image to pull (Harbor's).",
    ),
    click.option(
        "--verifier-room",
        type=click.Choice(["task", "fresh"]),
        default="task",
        show_default=True,
        help="Where container tasks verify: where each says (a Harbor task's environment_mode, 'shared' by default: "
        "in the agent's own container), or worktrial's fresh room for every one (docs/environments.md).",
    ),
    _multiplier("--timeout-multiplier", "every task's agent, verifier and image-build limits"),
    _multiplier("--agent-timeout-multiplier", "the agent's limit (over --timeout-multiplier)"),
    _multiplier("--verifier-timeout-multiplier", "the verifier's limit (over --timeout-multiplier)"),
    _multiplier("--environment-build-timeout-multiplier", "the image build's limit (over --timeout-multiplier)"),
)

selection_options = apply(
    click.option(
        "--task",
        "task_patterns",
        multiple=True,
        metavar="ID",
        help="Only tasks whose id matches (glob patterns like 'parse-*'); repeatable.",
    ),
    click.option(
        "--category",
        "categories",
        multiple=True,
        type=click.Choice(["capability", "regression"]),
        help="Only tasks of this category; repeatable.",
    ),
    click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Only the first N selected tasks."),
)
"""--task, --category and --limit: which tasks of the suite a command runs (eval, check)."""

sandbox_option = click.option(
    "--sandbox",
    type=click.Choice(["auto", "on", "off"]),
    help="Contain every attempt (default auto: when this machine can; on: refuse to run without).",
)
sandbox_options = apply(
    sandbox_option,
    click.option(
        "--network",
        type=click.Choice(["on", "off", "host"]),
        help="on (default): each attempt on a network of its own with outbound access (slirp4netns), no host "
        "loopback; off: loopback only; host: the host's network (e.g. a model server on localhost).",
    ),
    click.option("--max-memory", metavar="SIZE", help="Memory per attempt, e.g. 2G; hitting it ends the attempt."),
    click.option(
        "--max-procs",
        type=click.IntRange(min=1),
        metavar="N",
        help="Processes per attempt; hitting it ends the attempt.",
    ),
    click.option(
        "--sandbox-show",
        "sandbox_show",
        multiple=True,
        metavar="PATH",
        help="Also show this host path to every attempt, read-only (repeatable; e.g. a toolchain outside PATH).",
    ),
)
"""--sandbox, --network, --max-memory, --max-procs, --sandbox-show (unset: the user's [sandbox] config, then the
defaults)."""

budget_options = apply(
    click.option(
        "--max-cost",
        type=click.FloatRange(0, min_open=True),
        metavar="USD",
        help="Budget for the run (or matrix): no attempt starts once it would likely be passed; the run stops (exit "
        "3) and resume continues it with a higher one.",
    ),
    click.option("--allow-unpriced", is_flag=True, help="Let a budget count unknown costs as $0 instead of refusing."),
)
"""--max-cost and --allow-unpriced: how much a run may spend (eval, resume: they may change on resume)."""
