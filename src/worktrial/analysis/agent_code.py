"""Verify commands that run code the agent controls: a pass the agent can forge measures nothing.

The rule ``worktrial check`` states: when a verdict is the exit status of a process that runs files the agent can
change, that code can end the process with status 0 and pass. Verification runs on the agent's files (in the
verifier's room, with the harness's git metadata), so every runner of the code under test runs the agent's code:
``pytest`` (also ``python3 -I -m pytest``), ``npm test``, ``make``, ``cargo test``, ``go test``, ``node --test``,
``uv run`` and the like, and so does a hidden test run by its own interpreter (``python3 -I
"$WORKTRIAL_SUITE_DIR/hidden/test.py"`` imports the module under test, whose ``os._exit(0)`` passes it). Some forms
are worse on top: ``python3 -m``/``-c`` without ``-I``/``-P`` (or with ``PYTHONPATH`` naming the worktree) import
an agent's ``json.py``, ``pytest.py`` or ``sitecustomize.py`` before the real ones; ``npx``, ``bunx`` and
``./node_modules/.bin/jest`` run whatever the agent put in ``node_modules``; ``./run-tests``, ``.venv/bin/python``
and ``sh tests/check.sh`` are files the agent can rewrite.

What a command line shows is found here (``findings``: pure functions of the parsed suite, each a ``Finding`` of
one ``Rule``); what only running shows (a hidden test that imports the module under test) is found by ``check``'s
forging probe (``engine/check_rebuild.py``), which plants exits like an agent would. The words a reader sees are
kept apart from the rules (``_PHRASES``, ``RULE``, ``SAFE_FORMS`` and the ``*_message`` functions), so they can be
reworded without touching what is found. ``worktrial check`` shows them as warnings (they do not fail the check: the
suite may hide its tests, or trust its agents).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from worktrial.model.commands import ArgvCommand, Command, ShCommand

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
# Programs that run the command that follows them (their own options skipped, see _unwrap).
_WRAPPERS = frozenset({"env", "exec", "command", "nice", "nohup", "time", "timeout", "stdbuf", "xvfb-run"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "{", "}", "!", "then", "do", "else", "elif", "if"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Python options that take a value (``-W error``, ``-X dev``); ``-c`` and ``-m`` end the options.
_PY_VALUE_OPTIONS = frozenset("WXQ")
_MAX_SHELL_NESTING = 4
_RUNNERS = frozenset(
    {"pytest", "py.test", "tox", "nox", "make", "gmake", "ctest", "jest", "vitest", "mocha", "ava", "tap"}
    | {"rspec", "rake", "phpunit", "mvn", "gradle", "gradlew", "sbt", "lein", "ant", "meson", "ninja", "bazel"}
)
"""Programs that build or test the code they are pointed at: the agent's."""
_SUBCOMMANDS = {
    "npm": frozenset({"test", "t", "tst", "run", "run-script", "exec", "start", "ci"}),
    "yarn": frozenset({"test", "run", "exec", "start"}),
    "pnpm": frozenset({"test", "t", "run", "exec", "start"}),
    "bun": frozenset({"test", "run", "x"}),
    "deno": frozenset({"test", "run", "task"}),
    "cargo": frozenset({"test", "t", "run", "r", "bench", "build", "b"}),
    "go": frozenset({"test", "run", "build", "generate"}),
    "dotnet": frozenset({"test", "run", "build"}),
    "swift": frozenset({"test", "run", "build"}),
    "mix": frozenset({"test", "run"}),
    "bundle": frozenset({"exec"}),
}
"""Tools that run the code under test only with some subcommands (``npm test``, ``cargo test``)."""
_INTERPRETERS = frozenset({"node", "ruby", "perl", "php", "Rscript", "julia", "lua", "bash", "sh", "dash", "zsh"})
"""Interpreters that, given a relative script, run a file of the worktree."""


def _basename(program: str) -> str:
    return program.rsplit("/", 1)[-1]


def _python_finding(argv: list[str]) -> str | None:
    """``-c``/``-m`` without ``-I``/``-P``: the worktree (cwd) comes first on ``sys.path``."""
    isolated = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            return None  # a script path (or stdin): not -c/-m
        if arg.startswith("--"):
            i += 1
            continue
        for j, flag in enumerate(arg[1:], start=1):
            if flag in "IP":
                isolated = True
            elif flag in "cm":
                if isolated:
                    return None
                return f"-{flag}"
            elif flag in _PY_VALUE_OPTIONS:
                if j == len(arg) - 1:
                    i += 1  # the value is the next argument
                break
        i += 1
    return None


def _option_letters(argv: list[str]) -> str:
    """The single-letter options before the first operand (``-IBm`` gives ``IBm``), up to ``-c``/``-m``."""
    letters = ""
    for arg in argv[1:]:
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--"):
            break
        letters += arg[1:]
        if "c" in arg or "m" in arg:
            break
    return letters


def _first_operand(argv: list[str]) -> str | None:
    """The first argument that is not an option (a script); None when the options end in ``-c``/``-m`` (the code
    or module follows) or there is none. A Python option that takes a value (``-W error``) takes the next one."""
    args = iter(argv[1:])
    for arg in args:
        if arg.startswith("--") or arg == "-":
            continue
        if arg.startswith("-"):
            letters = arg[1:]
            if "c" in letters or "m" in letters:
                return None
            if letters[-1:] in _PY_VALUE_OPTIONS:
                next(args, None)
            continue
        return arg
    return None


def _in_worktree(path: str) -> bool:
    """A relative path (the verify command's directory is the worktree), not the suite's or the system's."""
    return not path.startswith(("/", "$", "~", "-"))


def _unwrap(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command a line really runs, with the variables it is given: leading ``VAR=value`` words and wrappers
    like ``env``/``timeout`` dropped."""
    assigned: dict[str, str] = {}
    while argv:
        head = argv[0]
        if _ASSIGNMENT.match(head):
            name, _, value = head.partition("=")
            assigned[name] = value
            argv = argv[1:]
        elif _basename(head) in _WRAPPERS:
            rest = argv[1:]
            while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
                if _ASSIGNMENT.match(rest[0]):
                    name, _, value = rest[0].partition("=")
                    assigned[name] = value
                rest = rest[1:]
            if _basename(head) == "timeout" and rest:
                rest = rest[1:]  # the duration
            argv = rest
        else:
            return argv, assigned
    return argv, assigned


def _shell_lines(script: str) -> Iterator[list[str]]:
    """Simple commands of a shell script, split on operators and newlines (quotes honoured, nothing expanded)."""
    for raw_line in script.splitlines():
        lexer = shlex.shlex(raw_line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: the shell would refuse it too
            continue
        words: list[str] = []
        for token in tokens:
            if token in _SEPARATORS or (token and set(token) <= set(";&|()<>")):
                if words:
                    yield words
                words = []
            else:
                words.append(token)
        if words:
            yield words


class Rule(StrEnum):
    """Why a command line runs code the agent controls (one finding, one rule)."""

    SHADOWED_IMPORTS = "shadowed-imports"
    """Python puts the worktree first on ``sys.path`` (``-m``/``-c`` without ``-I``/``-P``, ``PYTHONPATH``)."""
    RUNS_MODULE = "runs-module"
    """``python -m``: a module that imports the code under test."""
    SCRIPT_IN_TREE = "script-in-tree"
    PROGRAM_IN_TREE = "program-in-tree"
    """The program itself is a file of the worktree (``./run-tests``, ``.venv/bin/python``)."""
    NODE_MODULES = "node-modules"
    """``npx``/``bunx`` or ``node_modules/.bin``: whatever the agent put in ``node_modules``."""
    RUNNER = "runner"
    SUBCOMMAND = "subcommand"
    PROJECT_ENV = "project-env"
    """``uv run``, ``poetry run`` and the like: an environment built from the worktree's project files."""
    TESTS_IN_TREE = "tests-in-tree"
    """``node --test`` with no file named: the test files it finds in the worktree."""
    CLASS_PATH = "class-path"
    INSTALLS_TREE = "installs-tree"


@dataclass(frozen=True)
class Finding:
    rule: Rule
    shown: str
    """The words of the command the finding is about."""
    detail: str = ""


_PROJECT_RUNNERS = {
    "uv": "run",
    "poetry": "run",
    "pipenv": "run",
    "pdm": "run",
    "hatch": "run",
    "rye": "run",
    "pixi": "run",
}
"""Tools whose subcommand runs a command in the project's environment, which they build from the worktree."""
_PROJECT_RUN_VALUE_OPTIONS = frozenset(
    {"--with", "--with-editable", "--with-requirements", "--python", "-p", "--extra", "--group", "--only-group"}
    | {"--project", "--directory", "--env-file", "--index", "--index-url", "--extra-index-url", "--package", "-e"}
    | {"--from", "--spec"}
)
_TOOL_RUNNERS = frozenset({"uvx", "pipx"})
"""Tools that fetch a program (not the worktree's) and run it: what it runs on is what counts."""
_CLASS_PATH_OPTIONS = frozenset({"-cp", "-classpath", "--class-path"})


def _after_options(argv: list[str], value_options: frozenset[str]) -> list[str]:
    """``argv`` from its first word that is not an option (a value option's value skipped)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in value_options else 1
    return argv[i:]


def _python_findings(argv: list[str], assigned: dict[str, str]) -> list[Finding]:
    found = []
    shown = shlex.join(argv[:4])
    flag = _python_finding(argv)
    isolated = any(letter in "IE" for letter in _option_letters(argv))
    if flag:
        found.append(Finding(Rule.SHADOWED_IMPORTS, shown, flag))
    elif not isolated and any(_in_worktree(p) or p in ("", ".") for p in assigned.get("PYTHONPATH", "/").split(":")):
        found.append(Finding(Rule.SHADOWED_IMPORTS, shown, "PYTHONPATH"))
    script = _first_operand(argv)
    if "m" in _option_letters(argv):
        found.append(Finding(Rule.RUNS_MODULE, shown))
    elif script is not None and _in_worktree(script):
        found.append(Finding(Rule.SCRIPT_IN_TREE, shlex.join(argv[:2])))
    return found


def _java_findings(argv: list[str]) -> list[Finding]:
    for i, arg in enumerate(argv[1:-1], start=1):
        value = argv[i + 1]
        if arg in _CLASS_PATH_OPTIONS and any(_in_worktree(p) or p in ("", ".") for p in value.split(":")):
            return [Finding(Rule.CLASS_PATH, shlex.join(argv[: i + 2]), value)]
        if arg == "-jar" and _in_worktree(value):
            return [Finding(Rule.CLASS_PATH, shlex.join(argv[: i + 2]), value)]
    return []


def _pip_installs_tree(argv: list[str]) -> bool:
    """``pip install .``, ``-e .``, ``-r requirements.txt``: what it installs comes from the worktree."""
    if "install" not in argv[1:3]:
        return False
    rest = argv[argv.index("install") + 1 :]
    for i, arg in enumerate(rest):
        if arg in ("-e", "--editable", "-r", "--requirement", "-c", "--constraint") and i + 1 < len(rest):
            if _in_worktree(rest[i + 1]):
                return True
        elif not arg.startswith("-") and (arg == "." or arg.startswith("./") or "/" in arg) and _in_worktree(arg):
            return True
    return False


def rule_findings(argv: list[str], depth: int = 0) -> list[Finding]:
    """What in one argv runs agent-controlled code (empty: nothing found)."""
    argv, assigned = _unwrap(argv)
    if not argv:
        return []
    program = argv[0]
    name = _basename(program)
    in_tree = "/" in program and not program.startswith(("/", "$", "~"))
    if name in _SHELLS and depth < _MAX_SHELL_NESTING:
        for i, arg in enumerate(argv[1:-1], start=1):
            if arg.startswith("-") and not arg.startswith("--") and "c" in arg:
                return [found for line in _shell_lines(argv[i + 1]) for found in rule_findings(line, depth + 1)]
    found: list[Finding] = []
    if "node_modules/.bin/" in program and in_tree:
        return [Finding(Rule.NODE_MODULES, program)]
    if in_tree:
        found.append(Finding(Rule.PROGRAM_IN_TREE, program))
    if _PYTHON.match(name):
        return found + _python_findings(argv, assigned)
    if name in _PROJECT_RUNNERS and len(argv) > 1 and argv[1] == _PROJECT_RUNNERS[name]:
        found.append(Finding(Rule.PROJECT_ENV, shlex.join(argv[:2])))
        return found + rule_findings(_after_options(argv[2:], _PROJECT_RUN_VALUE_OPTIONS), depth + 1)
    if name in _TOOL_RUNNERS:
        rest = argv[2:] if name == "pipx" and argv[1:2] == ["run"] else argv[1:]
        return found + rule_findings(_after_options(rest, _PROJECT_RUN_VALUE_OPTIONS), depth + 1)
    if name in ("pip", "pip3") and _pip_installs_tree(argv):
        return [*found, Finding(Rule.INSTALLS_TREE, shlex.join(argv[:3]))]
    if name in _RUNNERS:
        return [*found, Finding(Rule.RUNNER, shlex.join(argv[:3]))]
    if name in _SUBCOMMANDS and len(argv) > 1 and argv[1] in _SUBCOMMANDS[name]:
        return [*found, Finding(Rule.SUBCOMMAND, shlex.join(argv[:2]))]
    if name == "node" and "--test" in argv:
        operands = [a for a in argv[1:] if not a.startswith("-")]
        if not operands or any(_in_worktree(a) for a in operands):
            return [*found, Finding(Rule.TESTS_IN_TREE, shlex.join(argv[:3]))]
    if name in ("java",):
        return found + _java_findings(argv)
    if name in _INTERPRETERS and (script := _first_operand(argv)) is not None and _in_worktree(script):
        return [*found, Finding(Rule.SCRIPT_IN_TREE, shlex.join(argv[:2]))]
    if name in ("npx", "bunx"):
        return [*found, Finding(Rule.NODE_MODULES, shlex.join(argv[:3]), name)]
    return found


def _argv_of(command: Command) -> list[str]:
    if isinstance(command, str):
        return command.split()
    if isinstance(command, ArgvCommand):
        return list(command.argv)
    assert isinstance(command, ShCommand)
    return ["sh", "-c", command.sh]


def command_findings(command: Command) -> list[Finding]:
    """Every distinct finding of one verify command."""
    return list(dict.fromkeys(rule_findings(_argv_of(command))))


# -- wording: what a reader sees (kept apart from the rules above) -----------------------------------------------

RULE = (
    "The rule: when the verdict is the exit status of a process that runs files the agent can change (the code "
    "under test, a conftest.py, a sitecustomize.py or .pth file in the worktree or its .venv, a node_modules shim, "
    "a json.py that shadows the standard library, the program itself), that code can end the process with status "
    "0 before any test runs, and pass."
)
NO_FLAG = (
    "No flag on the command line of a test runner removes that (-I or -P would also keep the tests from importing "
    "the agent's code, which they exist to test); it matters for agents that might game their verifier."
)
SAFE_FORMS = (
    "Forms the agent's edits cannot turn into a pass: a judge from $WORKTRIAL_SUITE_DIR or the system, run by an "
    "interpreter outside the worktree (python3 -I, never .venv/bin/python), that imports what it needs before it "
    "appends the worktree to sys.path (never first), runs the code under test in a child process and passes only "
    "when the child's output matches expected data, never on an exit status alone (worktrial init's starter shows "
    "one; docs/security.md)."
)
NOTE = f"{RULE} {NO_FLAG} {SAFE_FORMS}"
"""Said once under the lints that run code the agent controls (``Lint.note``), not on each of their lines."""
_PHRASES: dict[Rule, str] = {
    Rule.SHADOWED_IMPORTS: (
        "'{shown}' puts the worktree first on sys.path ({detail}), where a json.py, pytest.py or sitecustomize.py "
        "the agent leaves is imported before the real one"
    ),
    Rule.RUNS_MODULE: "'{shown}' runs a module, which imports the code under test: the agent's",
    Rule.SCRIPT_IN_TREE: "'{shown}' runs a script in the worktree, which the agent can rewrite",
    Rule.PROGRAM_IN_TREE: "'{shown}' is a program in the worktree (a relative path), which the agent can rewrite",
    Rule.NODE_MODULES: "'{shown}' runs what the worktree's node_modules holds, which the agent can replace",
    Rule.RUNNER: "'{shown}' builds or tests the code under test, which the agent wrote",
    Rule.SUBCOMMAND: "'{shown}' builds or runs the code under test, which the agent wrote",
    Rule.PROJECT_ENV: (
        "'{shown}' runs in the project's environment, built from files in the worktree (pyproject.toml, lock "
        "files) that the agent can change"
    ),
    Rule.TESTS_IN_TREE: "'{shown}' runs the test files it finds in the worktree, which the agent can rewrite",
    Rule.CLASS_PATH: "'{shown}' loads classes from the worktree ({detail}), which the agent can rewrite",
    Rule.INSTALLS_TREE: "'{shown}' installs from the worktree, which runs build code the agent can change",
}


def describe(finding: Finding) -> str:
    detail = finding.detail
    if finding.rule is Rule.NODE_MODULES and detail in ("npx", "bunx"):
        return f"'{finding.shown}' runs {detail}, which prefers the worktree's ./node_modules/.bin copy"
    if finding.rule is Rule.SHADOWED_IMPORTS and detail == "PYTHONPATH":
        detail = "PYTHONPATH naming the worktree"
    return _PHRASES[finding.rule].format(shown=finding.shown, detail=detail)


_FIRST = (Rule.RUNS_MODULE, Rule.RUNNER, Rule.SUBCOMMAND, Rule.PROJECT_ENV, Rule.TESTS_IN_TREE)
"""What runs the code under test: said first, since that alone decides the risk."""


def _ordered(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: 0 if f.rule in _FIRST else 1)


def findings(argv: list[str]) -> list[str]:
    """What in one argv runs agent-controlled code, as short phrases (empty: nothing found)."""
    return [describe(found) for found in dict.fromkeys(rule_findings(argv))]


def agent_code_warning(command: Command) -> str | None:
    """Why a verify command runs something the agent could have planted or rewritten (None: nothing found); what
    that risks and the forms that avoid it are ``NOTE``, said once for all such lines."""
    found = [describe(f) for f in _ordered(command_findings(command))]
    return f"its verdict is the exit status of code the agent controls: {'; '.join(found)}" if found else None


def forged_by_code_message(files: list[str]) -> str:
    """``check``'s probe passed with the solution's files replaced by an exit at load."""
    return (
        f"the verifier passes when the code under test does nothing but exit 0 as it loads (worktrial check put "
        f"an exit in {_named(files)}): an agent can pass it without solving the task"
    )


def forged_by_plants_message(names: list[str]) -> str:
    """``check``'s probe passed with modules planted next to the code under test."""
    return (
        f"the verifier passes when a {' or '.join(names)} the agent leaves in the worktree exits 0 as it loads "
        "(worktrial check planted them): it imports files of the worktree before its own"
    )


def _named(paths: list[str], limit: int = 3) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more
