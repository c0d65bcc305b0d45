"""Verify commands that run code the agent controls: a pass the agent can forge measures nothing.

Verification runs on the agent's files (in the verifier's room, with the harness's git metadata), so whatever code
the agent wrote is what a verify command executes when it runs the code under test. Every test runner does:
``pytest`` (also ``python3 -I -m pytest``), ``npm test``, ``make``, ``cargo test``, ``go test`` import or build the
agent's code, and that code can end the process with status 0 (``os._exit(0)`` at import) or write what the check
reads. Worse forms come on top: ``python3 -m``/``-c`` without ``-I``/``-P`` import the agent's ``pytest.py`` (or
``json.py``) before the real one; ``npx jest`` and ``./node_modules/.bin/jest`` run whatever the agent put in
``node_modules``; ``./run-tests`` and ``sh tests/check.sh`` are files the agent can rewrite to ``exit 0``. The
room limits what agent code reaches, never what it does. Pure functions of the parsed suite: ``worktrial check``
shows them as warnings (they do not fail the check: the suite may hide its tests, or trust its agents).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

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
_ADVICE = (
    "A pass from code the agent wrote measures the work only when the agent does not cheat: keep the verdict out of "
    "its exit paths (compare the files its tests write with expected data from $WORKTRIAL_SUITE_DIR, using a "
    "program from the system or the suite), run Python with -I, and never run programs from the worktree"
)
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


def _unwrap(argv: list[str]) -> list[str]:
    """The command a line really runs: leading ``VAR=value`` words and wrappers like ``env``/``timeout`` dropped."""
    while argv:
        head = argv[0]
        if _ASSIGNMENT.match(head):
            argv = argv[1:]
        elif _basename(head) in _WRAPPERS:
            rest = argv[1:]
            while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
                rest = rest[1:]
            if _basename(head) == "timeout" and rest:
                rest = rest[1:]  # the duration
            argv = rest
        else:
            return argv
    return argv


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


def findings(argv: list[str], depth: int = 0) -> list[str]:
    """What in one argv runs agent-controlled code, as short phrases (empty: nothing found)."""
    argv = _unwrap(argv)
    if not argv:
        return []
    program = argv[0]
    name = _basename(program)
    if name in _SHELLS and depth < _MAX_SHELL_NESTING:
        for i, arg in enumerate(argv[1:-1], start=1):
            if arg.startswith("-") and not arg.startswith("--") and "c" in arg:
                return [found for line in _shell_lines(argv[i + 1]) for found in findings(line, depth + 1)]
    if _PYTHON.match(name):
        found = []
        flag = _python_finding(argv)
        if flag:
            found.append(
                f"`{shlex.join(argv[:4])}` runs Python with {flag} but without -I or -P, so modules the agent "
                "leaves in the worktree (a json.py, a pytest.py) are imported before the real ones"
            )
        script = _first_operand(argv)
        if "m" in _option_letters(argv):
            found.append(f"`{shlex.join(argv[:4])}` runs a module, which imports the code under test: the agent's")
        elif script is not None and _in_worktree(script):
            found.append(f"`{shlex.join(argv[:2])}` runs a script in the worktree, which the agent can rewrite")
        return found
    if name in _RUNNERS:
        return [f"`{shlex.join(argv[:3])}` builds or tests the code under test, which the agent wrote"]
    if name in _SUBCOMMANDS and len(argv) > 1 and argv[1] in _SUBCOMMANDS[name]:
        return [f"`{shlex.join(argv[:2])}` builds or runs the code under test, which the agent wrote"]
    if name in _INTERPRETERS and (script := _first_operand(argv)) is not None and _in_worktree(script):
        return [f"`{shlex.join(argv[:2])}` runs a script in the worktree, which the agent can rewrite"]
    if name == "npx":
        return [f"`{shlex.join(argv[:3])}` runs npx, which prefers the worktree's ./node_modules/.bin copy"]
    if "node_modules/.bin/" in program and not program.startswith("/"):
        return [f"`{program}` is in the worktree's node_modules, which the agent can replace"]
    if "/" in program and not program.startswith(("/", "$", "~")):
        return [f"`{program}` is a program in the worktree (a relative path), which the agent can rewrite"]
    return []


def _argv_of(command: Command) -> list[str]:
    if isinstance(command, str):
        return command.split()
    if isinstance(command, ArgvCommand):
        return list(command.argv)
    assert isinstance(command, ShCommand)
    return ["sh", "-c", command.sh]


def agent_code_warning(command: Command) -> str | None:
    """Why a verify command runs something the agent could have planted or rewritten (None: nothing found)."""
    found = list(dict.fromkeys(findings(_argv_of(command))))
    return f"runs code the agent controls: {'; '.join(found)}. {_ADVICE}" if found else None
