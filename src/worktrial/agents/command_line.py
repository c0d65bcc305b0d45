"""Which program an ``--agent-cmd`` line starts, when that can be known for certain without running it.

The preflight refuses a command whose program is missing, so this must never name a word that is not the program:
it reads only the first simple command, and answers None (no check) for anything it does not fully understand:
command substitution, subshells, groups, functions, lists (``;``, ``||``, ``&``), a PATH assignment, a variable or
glob in the command word, a shell keyword or builtin. A missed typo costs one run that ends in error; a refused
valid command costs the user their evaluation.
"""

from __future__ import annotations

import re
import shlex

_WORD_SEP = re.compile(r"\s+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)

# Keywords and builtins of POSIX sh, dash and bash: the shell runs these itself, whatever PATH holds.
SHELL_WORDS = frozenset(
    _WORD_SEP.split(
        """
    ! { } ( ) [ [[ ]] . : alias bg break builtin case cd command continue declare do done echo elif else esac eval
    exec exit export false fc fg fi for function getopts hash if in jobs kill let local printf pwd read readonly
    return select set shift source test then time times trap true type typeset ulimit umask unalias unset until
    wait while
    """.strip()
    )
)

# Operators after which the first command still runs and its program is needed: `a && b`, `a | b`, redirections.
_CONTINUES = frozenset({"&&", "|", "<", ">", ">>", "<<", "<&", ">&", "<>", ">|", "<<-", "&>", "&>>", "|&"})
_PUNCTUATION = frozenset(";&|<>()")


def _is_operator(token: str) -> bool:
    return bool(token) and all(ch in _PUNCTUATION for ch in token)


def command_program(cmd: str) -> str | None:
    """The program the first simple command of ``cmd`` starts, or None when the shell decides or it is unclear."""
    if "$(" in cmd or "`" in cmd or "\n" in cmd or "\\" in cmd:
        return None  # command substitution runs first; line continuations and escapes change word boundaries
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # `a#b` is one word to the shell; a word starting with `#` is handled below
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: the shell will say what is wrong
        return None
    words: list[str] = []
    for token in tokens:
        if _is_operator(token):
            # `;`, `||`, `&`, a subshell: not one command. (Quoted punctuation looks the same here: also skipped.)
            if not words or any(t not in _CONTINUES for t in tokens if _is_operator(t)):
                return None
            break
        if token.startswith("#"):
            break  # a comment
        words.append(token)
    while words and _ASSIGNMENT.fullmatch(words[0]):
        if words[0].startswith("PATH="):
            return None  # `PATH=/opt/bin agent` looks the program up in that PATH
        words = words[1:]
    if not words:
        return None
    first = words[0]
    if (
        first in SHELL_WORDS
        or first.isdigit()
        or first.startswith(("~", "-"))
        or any(ch in first for ch in "$*?[]{}='\"")
    ):
        return None  # the shell's own word, a redirection's fd (`2>err agent`), an expansion or a quote
    return first
