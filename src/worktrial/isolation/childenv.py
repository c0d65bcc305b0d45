"""What environment each kind of child process gets (docs/security.md, "Environment").

The caller's environment holds their API keys, cloud credentials and agent sockets; a child gets only what its
job needs, so a verify command that imports the agent's code, or an agent told to "print your environment",
finds nothing to steal.

- **Harness commands** (environment setup, a task's setup and verify commands) get an allow-list: ``PATH``,
  ``LANG``, ``LANGUAGE``, ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR``, ``USER``, ``LOGNAME``, the proxy and CA-bundle
  variables (so ``pip``/``npm`` work behind a corporate proxy), the git identity variables (``GIT_AUTHOR_*``,
  ``GIT_COMMITTER_*``: ``~/.gitconfig`` is not in the fresh home), ``HOME`` pointed at the attempt's scratch home,
  and the suite's own variables (``$WORKTRIAL_SUITE_DIR``). Nothing else of the caller's.
- **Agents** get an allow-list too (``AGENT_NAMES``: ``PATH``, ``HOME``, the locale, ``TERM``, ``TZ``, ``TMPDIR``,
  ``USER``, ``LOGNAME``, the CA-bundle and git identity variables) plus the ``WORKTRIAL_*`` contract variables.
  Everything else of the caller's is held back (``withheld``), whatever its name: ``DB_PASS``, ``DATABASE_URL``,
  credentials in ``HTTPS_PROXY``, CI job tokens, webhook URLs. An agent adds back exactly what it needs: a preset
  its own providers' variables and the proxies it reaches them through, a command agent those named with
  ``--pass-env`` or ``pass_env``. ``NEVER`` (the session bus, the runtime directory, ssh and gpg agents) is given to
  no child at all.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from worktrial.errors import BadInputError

COMMAND_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    }
)
"""The caller's variables a harness command keeps (plus every ``LC_*``)."""
PROXY_NAMES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"}
)
"""How a preset CLI reaches its provider behind a proxy; a proxy URL may carry a password, so a command agent gets
these only through ``--pass-env``."""
AGENT_NAMES = (COMMAND_NAMES - PROXY_NAMES) | {"HOME", "COLORTERM", "NO_COLOR", "CURL_CA_BUNDLE"}
"""The caller's variables every agent keeps (plus every ``LC_*``): what a program needs to run, nothing that names
or carries a secret."""
NEVER = frozenset({"DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "SSH_AGENT_PID"})
"""Ways out of any sandbox (the session bus runs programs as the user; agents sign and log in as the user): never
passed to a child, not even with ``--pass-env``."""
_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def _kept(name: str, allowed: frozenset[str]) -> bool:
    return name in allowed or name.startswith("LC_")


def command_env(caller: Mapping[str, str], home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The minimal environment of environment setup, setup and verify commands (never the caller's secrets).

    ``home`` (created here) is the attempt's scratch home: caches and dotfiles a command writes stay with the
    attempt. ``extra`` is the suite's own variables, added last.
    """
    env = {name: value for name, value in caller.items() if _kept(name, COMMAND_NAMES)}
    env.setdefault("PATH", os.defpath)
    env.setdefault("TMPDIR", tempfile.gettempdir())
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env.update(extra or {})
    return env


def agent_env(caller: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-list of the caller's environment (``AGENT_NAMES``) plus ``extra``: what every agent starts from."""
    env = {name: value for name, value in caller.items() if _kept(name, AGENT_NAMES)}
    env.update(extra or {})
    return env


def withheld(caller: Mapping[str, str]) -> dict[str, str]:
    """Every variable of the caller's that ``agent_env`` held back (less ``NEVER``), for agents to pick from."""
    return {name: value for name, value in caller.items() if not _kept(name, AGENT_NAMES) and name not in NEVER}


def matches(name: str, patterns: Iterable[str]) -> bool:
    """``NAME`` matches itself; ``PREFIX_*`` matches every name starting with ``PREFIX_``."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def selected(source: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """The variables of ``source`` the patterns name."""
    chosen = tuple(patterns)
    return {name: value for name, value in source.items() if matches(name, chosen)} if chosen else {}


def check_patterns(patterns: Iterable[str], where: str) -> tuple[str, ...]:
    """``--pass-env`` / ``pass_env`` values: variable names, or a prefix ending in ``*``; anything else is refused."""
    checked = tuple(patterns)
    for pattern in checked:
        if not _PATTERN.match(pattern) or pattern == "*":
            raise BadInputError(
                f"{where} {pattern!r} is not a variable name; give a name like MY_API_KEY or a prefix like MYCO_*"
            )
    return checked
