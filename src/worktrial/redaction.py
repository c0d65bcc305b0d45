"""Secret redaction for anything that stores text an agent or a command produced (artifacts, logs).

Two kinds of secrets are replaced: the values of environment variables whose names say they are secret
(``*_KEY``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ...) and strings shaped like well-known credentials
(``sk-...``, ``ghp_...``, ``AKIA...``, ``Bearer ...``). Like ``util.py`` this imports nothing of worktrial, so every
layer can use it. (Written for issue 14's artifacts; the hardening work may extend it.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PLACEHOLDER = "[REDACTED]"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.IGNORECASE)
_MIN_SECRET_LEN = 8
_SHAPES = re.compile(
    r"(sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}"
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]{16,})"
)


# Which variables are credential-like (docs/security.md): a name with one of these words (split at ``_``, any case),
# anything under ``AWS_``, and a few well-known names that carry no such word. The harness strips them from every
# child's environment unless that child needs them (an agent's own provider, --pass-env).
CREDENTIAL_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
        "PAT",
    }
)
CREDENTIAL_PREFIXES = ("AWS_",)
CREDENTIAL_NAMES = frozenset({"PGPASSWORD", "MYSQL_PWD", "GPG_AGENT_INFO"})


def is_credential_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (``OPENAI_API_KEY``, ``AWS_REGION``,
    ``SSH_AUTH_SOCK``, ``GITHUB_TOKEN``, ``GOOGLE_APPLICATION_CREDENTIALS``...)."""
    upper = name.upper()
    if upper in CREDENTIAL_NAMES or upper.startswith(CREDENTIAL_PREFIXES):
        return True
    return any(word in CREDENTIAL_WORDS for word in upper.split("_"))


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values and credential-shaped strings; ``redact`` returns the text and a count."""

    values: tuple[str, ...]

    @classmethod
    def from_environment(
        cls, *envs: Mapping[str, str], extra: Iterable[str] = (), names: Iterable[str] = ()
    ) -> Redactor:
        """Secret values from the given environments (default: this process's) plus ``extra`` values.

        A variable counts when its name looks secret, is credential-like (``is_credential_name``) or is one of
        ``names`` (the ``--pass-env`` variables, whatever they are called).
        """
        chosen = set(names)
        found: set[str] = {v for v in extra if len(v) >= _MIN_SECRET_LEN}
        for env in envs or (os.environ,):
            for name, value in env.items():
                secret = name in chosen or _SECRET_NAME.search(name) or is_credential_name(name)
                if secret and len(value) >= _MIN_SECRET_LEN:
                    found.add(value)
        # Longest first, so a secret that contains another is replaced whole.
        return cls(tuple(sorted(found, key=len, reverse=True)))

    def holds_value(self, data: bytes) -> bool:
        """Whether ``data`` holds one of the secret values (the shapes aside): bytes kept exactly must not."""
        return any(value.encode("utf-8", "surrogateescape") in data for value in self.values)

    def redact(self, text: str) -> tuple[str, int]:
        count = 0
        for value in self.values:
            if value in text:
                count += text.count(value)
                text = text.replace(value, PLACEHOLDER)
        text, shaped = _SHAPES.subn(PLACEHOLDER, text)
        return text, count + shaped
