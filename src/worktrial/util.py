"""Small helpers with no better home."""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old content or the new, never a torn one.

    Only regular files are replaced that way: ``/dev/null``, a FIFO or a terminal is written in place,
    since renaming over it would replace the device itself.
    """
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    replace_file(path, text)


def replace_file(path: Path, text: str | bytes, *, durable: bool = True) -> None:
    """Write one of the harness's own files: always a new regular file renamed into place.

    Unlike ``atomic_write_text`` it never writes through whatever is at ``path``: a symlink, FIFO or device
    someone put there is replaced, not followed (a FIFO would hang the harness, a symlink redirect it).
    ``durable=False`` skips the fsync, for a file that only matters while the machine keeps running.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def utc_now() -> str:
    """RFC 3339 timestamp in UTC with second precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def public_url(url: str) -> str:
    """The URL without user info, query or fragment: those may hold credentials and must not be stored."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 attempt``, ``2 attempts`` (``many`` for irregular plurals: ``plural(n, "retry", "retries")``)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
