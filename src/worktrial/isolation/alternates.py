"""``objects/info/alternates``: the object stores a private repository borrows, one path a line.

A path with a newline (or another control character, a double quote or a backslash) would break that file, so such a
path is written the way git reads it back: C-quoted in double quotes (git unquotes a line that starts with ``"``).
Every reader and writer of the file goes through here, so a repository in ``/tmp/my\\nrepo`` works like any other.
"""

from __future__ import annotations

import os
from pathlib import Path

_NAMED = {0x07: b"a", 0x08: b"b", 0x09: b"t", 0x0A: b"n", 0x0B: b"v", 0x0C: b"f", 0x0D: b"r"}
_UNNAMED = {v: k for k, v in _NAMED.items()}


def _needs_quotes(raw: bytes) -> bool:
    return raw.startswith(b'"') or any(b < 0x20 or b in (0x22, 0x5C, 0x7F) for b in raw)


def quote_line(path: Path) -> bytes:
    """One alternates line for ``path`` (without the newline): as is, or C-quoted when it has to be."""
    raw = os.fsencode(path)
    if not _needs_quotes(raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in (0x22, 0x5C):
            out += b"\\" + bytes([b])
        elif b in _NAMED:
            out += b"\\" + _NAMED[b]
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')


def unquote_line(line: bytes) -> Path:
    """The path an alternates line names (the inverse of ``quote_line``, and of git's own quoting)."""
    if not (line.startswith(b'"') and line.endswith(b'"') and len(line) >= 2):
        return Path(os.fsdecode(line))
    body, out, i = line[1:-1], bytearray(), 0
    while i < len(body):
        b = body[i]
        if b != 0x5C:
            out.append(b)
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        octal = body[i + 1 : i + 4]
        if len(octal) == 3 and all(c in b"01234567" for c in octal):
            out.append(int(octal, 8) & 0xFF)
            i += 4
        else:
            out.append(_UNNAMED.get(nxt, nxt[0] if nxt else 0x5C))
            i += 2
    return Path(os.fsdecode(bytes(out)))


def _file(git_dir: Path) -> Path:
    return git_dir / "objects" / "info" / "alternates"


def read_alternates(git_dir: Path) -> list[Path]:
    """The object stores ``git_dir`` borrows, in order ([] without an alternates file)."""
    try:
        raw = _file(git_dir).read_bytes()
    except FileNotFoundError:
        return []
    return [unquote_line(line) for line in raw.split(b"\n") if line.strip() and not line.startswith(b"#")]


def write_alternates(git_dir: Path, stores: list[Path]) -> None:
    """Make ``git_dir`` borrow exactly ``stores`` (creating ``objects/info``)."""
    path = _file(git_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(quote_line(store) + b"\n" for store in stores))
