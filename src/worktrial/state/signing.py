"""Per-run signing keys: a record in the run store counts only if the harness wrote it.

The run store lives in the workspace, which an agent can find (its private clone borrows the workspace's
objects, so the path is in its git dir). Each run therefore gets a random 256-bit key, held in the harness's
memory and in ``<config dir>/run-keys/<run id>.key`` (mode 0600, directory 0700), never in the workspace and
never in any environment an agent sees. Every attempt record and every version of ``run.json`` carries an
HMAC-SHA256 under that key; a line an agent appended, or a ``run.json`` it edited, does not verify.

Without a sandbox an agent running as the same user could still read the key file if it went looking for it;
the sandbox (``--sandbox``) hides the config directory. See docs/security.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from worktrial.isolation.safefs import read_regular
from worktrial.state.config import config_dir

KEY_DIR = "run-keys"
_KEY_BYTES = 32
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def key_dir() -> Path:
    """Where this user's run keys live: a run stored under another HOME or user has its key elsewhere."""
    return config_dir() / KEY_DIR


def key_path(run_id: str) -> Path:
    if not _SAFE_ID.match(run_id) or run_id.startswith("."):
        raise ValueError(f"not a run id: {run_id!r}")
    return key_dir() / f"{run_id}.key"


def create_key(run_id: str) -> bytes:
    """A new key for a new run, stored so that only this user can read it; never overwrites one."""
    path = key_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        os.chmod(path.parent, 0o700)
    key = secrets.token_bytes(_KEY_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return key


def load_key(run_id: str) -> bytes | None:
    """The run's key, or None for a run stored before records were signed (or whose key is gone)."""
    try:
        text = read_regular(key_path(run_id), 4096).decode("ascii").strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError):
        return None
    return key if len(key) == _KEY_BYTES else None


def sign(key: bytes, run_id: str, kind: str, payload: bytes) -> str:
    """HMAC-SHA256 of ``payload``, bound to the run and to what kind of thing it is (a record, run.json)."""
    mac = hmac.new(key, f"worktrial/{kind}/{run_id}\0".encode(), hashlib.sha256)
    mac.update(payload)
    return mac.hexdigest()


def verify(key: bytes, run_id: str, kind: str, payload: bytes, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(sign(key, run_id, kind, payload), signature)
