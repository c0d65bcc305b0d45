"""Text that came from an agent or a suite, made safe for the place it is shown.

Agent output, reasons, error notes, the model and tool names a usage file gives, file names in a patch, task
ids, prompts, labels and run ids are all input: whoever wrote the agent, the suite or an envelope someone sent
chose every byte. Each sink gets its own escaping, and every renderer goes through one of these functions:

- ``for_terminal``: control characters (ESC, CR, BEL, the other C0 and the C1 controls, DEL), the bidirectional
  overrides that reorder what a reader sees, line separators and lone surrogates are written visibly
  (``\\x1b``, ``\\u202e``), never raw. Newlines (and tabs) are kept only where the layout has room for them
  (``multiline=True``). Text given to rich must also be a ``rich.text.Text``, never a markup string, so that
  ``[bold]`` in agent output prints literally.
- ``for_markdown``: one line of inline markdown (also a table cell): the above, then HTML (``<``, ``>``, ``&``)
  as entities, markdown punctuation (backticks, ``|``, ``*``, ``[``, ...) backslash-escaped, a line-start
  marker (``#``, ``-``, ``1.``) defused, newlines turned into spaces, and ``@mentions`` broken with a zero-width
  joiner so GitHub neither renders HTML nor pings anyone.
- ``markdown_code``: a code span holding the text exactly (backticks cannot end it, ``|`` cannot split a table
  cell); code spans render no HTML and link no mentions.
- ``markdown_block``: a fenced block (agent output, a failing command's output) that the text cannot close.
- ``for_json``: a JSON text with the C1 controls, bidi overrides and line separators it may carry raw (JSON
  requires escaping only U+0000-U+001F) written as ``\\u`` escapes: the same value, safe on a terminal.

``for_terminal`` and ``for_json`` are idempotent (escaping twice changes nothing more), so a terminal sink may be
guarded both where a value is formatted and where the whole text is printed; the markdown functions are applied
once, where a value is put into markdown.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""Arabic letter mark, LRM/RLM, the embeddings and overrides, the isolates: they reorder what is displayed."""
_ALWAYS = f"\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff"
_MULTILINE = re.compile(f"[{_ALWAYS}]")
_ONE_LINE = re.compile(f"[{_ALWAYS}\t\n]")
_CRLF = re.compile(r"\r\n")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(code, f"\\x{code:02x}")
    return f"\\u{code:04x}"


def for_terminal(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control character written visibly; ``multiline`` keeps newlines and tabs.

    A Windows line ending (``\\r\\n``) in multi-line text is one newline; a lone ``\\r`` (which would let the
    rest of the line overwrite its start) is always shown as ``\\r``.
    """
    if multiline:
        return _MULTILINE.sub(_visible, _CRLF.sub("\n", text))
    return _ONE_LINE.sub(_visible, text)


def one_line(text: str) -> str:
    """Terminal-safe text on a single line: newlines become spaces (for a cell or a heading), the rest as above."""
    return for_terminal(_CRLF.sub(" ", text).replace("\n", " "))


def terminal_text(text: str, *, multiline: bool = False, style: str = "") -> Text:
    """The one way text from input reaches rich: a ``Text`` (never parsed as markup) with controls made visible."""
    from rich.text import Text  # imported here: plain-text callers (every error line) need no rich

    return Text(for_terminal(text, multiline=multiline), style=style)


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_SPECIAL = re.compile(r"[&<>]|[\\`*\[\]|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
"""HTML characters become entities; markdown punctuation is backslash-escaped (``_`` only where it could start
or end emphasis, not inside a word such as ``fix_the_bug``)."""
_BLOCK_START = re.compile(r"^(?:[-+=#]|\d{1,9}(?=[.)]))")
"""A list item, heading, setext underline or ordered-list marker, where the text starts a line."""
_MENTION = re.compile(r"(?<![A-Za-z0-9])@(?=[A-Za-z0-9])")
"""Where GitHub sees a mention: ``@`` not inside a word (an e-mail address is not one), before a name."""
ZWJ = "\u200d"
"""Zero-width joiner: after ``@`` it reads the same and no longer names a GitHub user or team."""


def for_markdown(text: str) -> str:
    """One line of inline markdown that shows ``text`` literally: safe in a table cell, a list item, a heading.

    Apply it once, where the value is put into markdown (escaping is not idempotent: ``\\`` doubles).
    """
    flat = one_line(text).strip()
    escaped = _SPECIAL.sub(lambda m: _HTML.get(m.group()) or "\\" + m.group(), flat)
    escaped = _BLOCK_START.sub(lambda m: m.group() + "\\" if m.group()[0].isdigit() else "\\" + m.group(), escaped)
    return _MENTION.sub("@" + ZWJ, escaped)


def markdown_code(text: str, *, table: bool = False) -> str:
    """A code span showing ``text`` on one line exactly; ``table`` for a span inside a table cell (``|`` escaped).

    The span is delimited by more backticks than the longest run inside it, and padded with a space when the
    text starts or ends with a backtick, as CommonMark specifies.
    """
    body = one_line(text)
    if table:
        body = body.replace("|", "\\|")
    if not body:
        return "` `"
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if body[0] == "`" or body[-1] == "`" or (body[0] == " " and body[-1] == " " and body.strip()):
        body = f" {body} "
    return f"{fence}{body}{fence}"


def markdown_block(text: str, info: str = "") -> list[str]:
    """The lines of a fenced code block holding ``text`` (control characters shown visibly) that it cannot close."""
    body = for_terminal(text, multiline=True).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *body.split("\n"), fence]


def for_markdown_listing(text: str) -> str:
    """A markdown table cell of worktrial's own listings (``agents``, ``prices``), whose commands are meant to be
    copied: kept as written but for what could break the table or open HTML (``|``, ``<``, control characters).

    Not for text from an agent, a suite or an envelope: that is ``for_markdown`` or ``markdown_code``.
    """
    return one_line(text).replace("|", "\\|").replace("<", "&lt;")


_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}]")


def for_json(text: str) -> str:
    """A JSON document with the characters a terminal may act on (but JSON lets through raw) as ``\\u`` escapes.

    Outside strings valid JSON holds only ASCII punctuation, digits, letters and whitespace, so every such
    character is inside a string, where ``\\uXXXX`` stands for the same character.
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
