"""Envelopes for publishing: no local absolute path of the machine that ran them.

An envelope names where a run happened: the workspace (``run.workspace.path``), the state root its trace paths are
relative to (``run.trace_root``), kept worktrees, and whatever paths reasons and an agent's own settings quote.
Published, those say who ran it and how their disk is laid out. ``redact_paths`` makes every path under the
state root relative to it (``.`` for the root itself; trace paths stay resolvable from a checkout of the same
repository), and every other local absolute path a salted hash (``redacted:<16 hex>``, the salt random per
envelope: the same path is the same hash within one envelope, and cannot be guessed back from a list of likely
paths). Absolute paths in free text (reasons, the agent's settings such as a command agent's program, sandbox
descriptions) get the same treatment, but for system directories (``/usr/bin/python3``). Nothing the metrics are
computed from changes, so ``audit`` checks a redacted envelope as it checks the original (its trace files are
looked up from the current directory or ``--workspace``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import PurePosixPath
from typing import Any

from worktrial.model.envelope import Envelope

REDACTED = "redacted:"


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/dev", "/proc", "/sys", "/run")
"""Where an absolute path in free text says nothing about the machine's owner: kept as it is, with what is below
(``/usr/bin/python3``, ``/etc (read-only)``)."""
BARE_DIRS = frozenset({"/", "/tmp", "/var", "/var/tmp", "/home", "/root", "/opt", "/srv", "/mnt", "/media"})
"""Directories kept when named alone (``/tmp, /var/tmp, /run (private)``); what is below them is hashed."""
_PATH = re.compile(r"(?<![\w.:/~$\-])/[\w.+@%~\-]*(?:/[\w.+@%~\-]*)*")


class PathRedactor:
    """Paths and free text of one envelope, redacted against its state root (``root``)."""

    def __init__(self, root: str | None, *, salt: bytes) -> None:
        self.root = _normal(root) if root and _absolute(root) else None
        self.salt = salt

    def path(self, value: str | None) -> str | None:
        """A relative path (under the root) or a salted hash (anywhere else); relative values stay as they are."""
        if value is None or not _absolute(value):
            return value
        path = _normal(value)
        if self.root is not None and (path == self.root or path.startswith(self.root.rstrip("/") + "/")):
            return str(PurePosixPath(path).relative_to(self.root))
        digest = hmac.new(self.salt, path.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
        return REDACTED + digest[:16]

    def text(self, value: str) -> str:
        """Free text with every absolute path in it redacted as ``path`` does, but system directories."""

        def one(match: re.Match[str]) -> str:
            found = match.group(0)
            if found in BARE_DIRS or found in SYSTEM_DIRS or found.startswith(SYSTEM_DIRS_BELOW):
                return found
            return self.path(found) or found

        return _PATH.sub(one, value)

    def walk(self, value: Any) -> Any:
        """Every string inside ``value`` (dicts, lists) through ``text``."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.walk(v) for v in value]
        if isinstance(value, dict):
            return {k: self.walk(v) for k, v in value.items()}
        return value


SYSTEM_DIRS_BELOW = tuple(f"{d}/" for d in SYSTEM_DIRS)


def redact_paths(envelope: Envelope, *, salt: bytes | None = None) -> Envelope:
    """``envelope`` for publishing (``report --redact-paths``; the default of any export): local absolute paths made
    relative to the run's state root or salted hashes, ``run.paths_redacted`` set. Ids, digests and every number
    stay as they are."""
    data = envelope.model_dump(mode="json")
    run = data["run"]
    root = run.get("trace_root") or run["workspace"]["path"]
    redactor = PathRedactor(root, salt=salt if salt is not None else secrets.token_bytes(16))
    run["workspace"]["path"] = redactor.path(run["workspace"]["path"])
    run["trace_root"] = redactor.path(run.get("trace_root"))
    data["suite_path"] = redactor.path(data["suite_path"])
    attempts = [a for t in data["report"]["tasks"] for a in t["attempts"]]
    for attempt in attempts:
        attempt["trace"] = redactor.path(attempt.get("trace"))
        attempt["worktree"] = redactor.path(attempt.get("worktree"))
        attempt["reason"] = redactor.walk(attempt.get("reason"))
        attempt["retry_reasons"] = redactor.walk(attempt.get("retry_reasons", []))
    data["agent"] = redactor.walk(data["agent"])
    for key in ("sandbox", "sandboxes", "budget", "label"):
        run[key] = redactor.walk(run.get(key))
    run["paths_redacted"] = True
    return Envelope.model_validate(data)


def _absolute(path: str) -> bool:
    return path.startswith("/")


def _normal(path: str) -> str:
    return os.path.normpath(path) if path != "/" else path
