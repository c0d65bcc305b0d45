"""JSON that a user or an agent hands to worktrial, parsed within limits that keep every error one line.

Python's ``json`` accepts what worktrial cannot use: nesting deep enough to raise ``RecursionError`` (in the
parser, or later in whatever walks the result), integers of any length (``10**400`` crashes the first
conversion to float: a timeout, a mean), ``NaN``/``Infinity`` and floats that overflow to ``inf``, and NUL
characters (``\\u0000``) that no argv, environment variable or path can carry. ``loads_limited`` refuses all of
them with a ``JsonLimitError`` (a ``ValueError``) that names the JSON path, so each loader turns it into its
usual one-line message. Suites, envelopes given to ``audit``/``compare``/``report`` and the run store's own
files all go through it.
"""

from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from typing import Any

MAX_JSON_DEPTH = 64
"""Nesting of arrays and objects: a suite needs about 7 levels, an envelope about 8."""
MAX_INT_DIGITS = 400
"""Longer integer literals are refused before Python converts them (its own limit, 4300 digits, raises)."""
_FLOAT_MAX = sys.float_info.max

# How much of each input file is read at most (``worktrial.safe_read.read_input``): a larger one is refused.
MAX_SUITE_BYTES = 16 * 1024 * 1024
"""A suite file: prompts included, far beyond any real suite."""
MAX_ENVELOPE_BYTES = 256 * 1024 * 1024
"""An envelope given to audit, compare, report, show or view (about 1 KiB per attempt)."""
MAX_TRACE_BYTES = 16 * 1024 * 1024
"""A trace file an envelope names (aggregates only, a few KiB)."""
MAX_CONFIG_BYTES = 1024 * 1024
"""The user's config.toml, as the project's worktrial.toml; also trust.json's records."""


class JsonLimitError(ValueError):
    """A JSON text outside worktrial's limits; ``str()`` is ``<json path>: <what is wrong>``."""


def _refuse_constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a valid JSON number (numbers must be finite)")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = {code: None for code in range(128) if chr(code) not in "[]{}"}


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text, found at C speed (strings dropped first)."""
    brackets = _STRING.sub("", text).translate(_NOT_BRACKETS)  # valid JSON is ASCII outside its strings
    return max(accumulate(1 if ch in "[{" else -1 for ch in brackets), default=0)


def loads_limited(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, allow_nul: bool = True) -> Any:
    """``json.loads`` within limits: depth, finite numbers within the float range, and (optionally) no NUL.

    The common case costs one parse plus a scan of the text; only a text that may break a limit is walked, to
    name the JSON path of the first problem.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    suspect = False

    def parse_int(literal: str) -> int | float:
        nonlocal suspect
        if len(literal.lstrip("-")) > MAX_INT_DIGITS:  # before Python's own limit (4300 digits) raises
            suspect = True
            return float("inf")  # the walk reports it with its path
        value = int(literal)
        suspect = suspect or abs(value) > _FLOAT_MAX
        return value

    def parse_float(literal: str) -> float:
        nonlocal suspect
        value = float(literal)
        suspect = suspect or not -_FLOAT_MAX <= value <= _FLOAT_MAX
        return value

    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=parse_int, parse_float=parse_float)
    except RecursionError:
        raise JsonLimitError(f"$: nested deeper than {max_depth} levels of arrays and objects") from None
    if suspect or _depth(text) > max_depth or (not allow_nul and "\\u0000" in text):
        check_limits(value, max_depth=max_depth, allow_nul=allow_nul)
    return value


def check_limits(value: Any, *, max_depth: int = MAX_JSON_DEPTH, allow_nul: bool = True) -> None:
    """Walk an already-parsed value (iteratively: its depth is what is being checked) and raise on the first problem."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                raise JsonLimitError(f"{path}: nested deeper than {max_depth} levels of arrays and objects")
            if isinstance(item, dict):
                for key, child in reversed(item.items()):
                    if not allow_nul and "\0" in key:
                        raise JsonLimitError(f"{path}: a key contains a NUL character (\\u0000)")
                    stack.append((child, f"{path}.{key}", depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in reversed(list(enumerate(item))))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, float):
            if not -_FLOAT_MAX <= item <= _FLOAT_MAX:
                raise JsonLimitError(f"{path}: number out of range (beyond what a 64-bit float holds)")
        elif isinstance(item, int):
            if abs(item) > _FLOAT_MAX:
                raise JsonLimitError(f"{path}: number out of range (beyond what a 64-bit float holds)")
        elif isinstance(item, str) and not allow_nul and "\0" in item:
            raise JsonLimitError(f"{path}: contains a NUL character (\\u0000), which no argument or path can hold")
