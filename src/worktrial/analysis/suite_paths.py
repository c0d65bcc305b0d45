"""Static lints of where a suite's commands look: absolute paths outside the worktree and the suite directory,
and files under ``$WORKTRIAL_SUITE_DIR`` that the suite does not declare.

Both make a result depend on something the suite's digest does not cover: a file on this machine
(``cp /tmp/hidden/test_x.py .``, ``/home/me/venv/bin/pytest`` with an editable install of another checkout), or a
suite file left out of ``files`` (it is not even copied into the directory the commands see).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

from worktrial.analysis.lint import Lint, lint_suite
from worktrial.model.commands import Command, display
from worktrial.model.suite import SUITE_DIR_ENV, LoadedSuite

# Where tools live, not data: reading these does not make a result machine-specific in a way a suite can fix.
SYSTEM_PREFIXES = (
    "/bin/",
    "/sbin/",
    "/usr/",
    "/lib/",
    "/lib64/",
    "/etc/",
    "/dev/",
    "/proc/",
    "/sys/",
    "/opt/",
    "/nix/",
    "/snap/",
    "/run/",
)
_ABSOLUTE = re.compile(r"""(?:^|[\s=:'"(<>|;&])(/[A-Za-z0-9_.+@%-][^\s'"`;|&<>(),]*)""")
_SUITE_REF = re.compile(r"\$\{?" + SUITE_DIR_ENV + r"\}?/([^\s'\"`;|&<>()$]+)")


def _commands(loaded: LoadedSuite) -> Iterator[tuple[str | None, str, Command]]:
    suite = loaded.suite
    if suite.environment is not None:
        for i, c in enumerate(suite.environment.setup):
            yield None, f"$.environment.setup[{i}]", c
    for t, task in enumerate(suite.tasks):
        if (env := suite.environment_for(task)) is not None and env.container:
            continue  # its commands run in its image: absolute paths are the image's, pinned by its digest
        groups = [("setup_commands", task.setup_commands), ("verify_commands", task.verify_commands)]
        if task.environment is not None:
            groups.append(("environment.setup", task.environment.setup))
        for name, commands in groups:
            for i, c in enumerate(commands):
                yield task.id, f"$.tasks[{t}].{name}[{i}]", c


def _declared(loaded: LoadedSuite, rel: str) -> bool:
    rel = rel.rstrip("/")
    names = [f.name for f in loaded.files]
    return any(n == rel or n.startswith(rel + "/") or fnmatch.fnmatchcase(n, rel) for n in names)


def lint_locations(loaded: LoadedSuite) -> list[Lint]:
    """Absolute paths outside the system's tool directories, and undeclared suite-directory files."""
    out: list[Lint] = []
    for task_id, where, command in _commands(loaded):
        text = display(command)
        outside = list(dict.fromkeys(p for p in _ABSOLUTE.findall(text) if not p.startswith(SYSTEM_PREFIXES)))
        if outside:
            out.append(
                Lint(
                    task_id=task_id,
                    where=where,
                    message=f"depends on {', '.join(outside[:3])}, outside the worktree and the suite directory: "
                    "the result depends on this machine and the suite's digest does not cover it",
                    suggestion=f'ship the file with the suite (`files`) and use "${SUITE_DIR_ENV}/...", or install '
                    "tools into the base with `environment.setup`",
                )
            )
        for rel in _SUITE_REF.findall(text):
            if not _declared(loaded, rel):
                out.append(
                    Lint(
                        task_id=task_id,
                        where=where,
                        message=f"reads ${SUITE_DIR_ENV}/{rel}, which the suite does not declare in `files` "
                        "(it is not copied into the suite directory commands see, nor covered by the digest)",
                        suggestion=f'add "{rel}" (or a glob matching it) to the suite\'s `files`',
                    )
                )
    return out


def static_lints(loaded: LoadedSuite) -> list[Lint]:
    """Every lint that needs no run (``validate`` and ``check`` both report them): the commands, the timeouts,
    the prompts, and where the commands look."""
    return lint_suite(loaded.suite) + lint_locations(loaded)
