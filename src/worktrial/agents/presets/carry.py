"""A preset CLI's own configuration, carried into each attempt without a credential in it (docs/security.md).

Attempts must not share sessions, history or caches, so the CLI's config-dir variable points into the attempt's
scratch directory; the files that say which provider, model and endpoint to use are copied there from the user's
own directory (copied, never linked, the user's file never changed), so a setup that works for the user works under
worktrial. What grants access never goes in as it is:

- a file that holds only a login or a key (``ConfigCarry.logins``: Codex's ``auth.json``, Claude Code's
  ``.credentials.json``, Gemini CLI's ``oauth_creds.json``, OpenCode's ``auth.json``) is left out; an API key in one
  is read by the preset (``Configured.key``) and routed through the model gateway like the key variable;
- a secret inside a settings file (a value under a key-like name such as ``apiKey`` or ``OPENAI_API_KEY``, or a
  value of a known key shape) is replaced by the attempt's gateway token where it is the routed key, else removed;
- the endpoint the CLI is configured for is replaced by the gateway's URL, so a proxy on the host's loopback is
  reached from inside any sandbox, and the gateway forwards to it, never to the vendor's default host.

A CLI that is not routed (it has no key worktrial can stand in for: an OAuth subscription, a vendor login) would need
its login inside the sandbox, where the agent can read it: the run refuses with one line, unless the user accepts it
with ``carry_login = true`` under ``[agents.NAME]``.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worktrial.isolation.safefs import read_regular

MAX_CONFIG_BYTES = 1024 * 1024
MIN_SECRET_CHARS = 8
"""Shorter values under a key-like name are not taken for secrets (``"key": "none"``)."""

_SECRET_NAME = re.compile(r"(?:^|[_.-])(?:key|apikey|token|secret|password|passwd|credentials?)$")
"""A setting whose name (camelCase split, lower-cased: ``primary_api_key``) ends in one of these words holds a
secret (``apiKey``, ``OPENAI_API_KEY``, ``auth_token``, ``experimental_bearer_token``), not ``max_tokens``,
``tokenizer``, ``monkey`` or ``keybindings``."""
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:sk-[A-Za-z0-9_-]{16,}|sk_[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_-]{30,}|gh[opsur]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xai-[A-Za-z0-9]{20,}|gsk_[A-Za-z0-9]{20,}|ya29\.[A-Za-z0-9_.-]{20,})"
)
"""Values that are keys whatever they are called: OpenAI/Anthropic/OpenRouter ``sk-``, Google ``AIza`` and OAuth
``ya29.``, GitHub, xAI, Groq."""
_ASSIGNMENT = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[:=]\s*(?P<quote>["']?)(?P<value>[^"'\s,;}\]#]+)(?P=quote)"""
)
"""``name = value``, ``name: value``, ``"name": "value"``: how a setting looks in TOML, YAML, JSON and dotenv files."""
_LOOPBACK_URL = re.compile(
    r"https?://(?:localhost|127(?:\.\d{1,3}){3}|\[::1\]|0\.0\.0\.0)(?::\d+)?(?:/[^\s\"'<>,;}\]]*)?", re.I
)
_REFERENCE = re.compile(r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{env:[^}]*\}|\$\{\{.*\}\}|[A-Z][A-Z0-9_]*)$")
"""A value that names where a secret is rather than holding one: ``$VAR``, ``${VAR}``, ``{env:VAR}``, ``${{ secrets.X
}}``, or a variable's name (``envKey = "DASHSCOPE_API_KEY"``)."""


@dataclass(frozen=True)
class ConfigCarry:
    """The CLI's own config directory: redirected per attempt, with the user's setup copied in (see the module)."""

    env_var: str
    """The variable the CLI reads its config directory from (set per attempt)."""
    subdir: str
    """Where under the attempt's scratch directory the fresh config directory goes."""
    default: str
    """The user's config directory relative to $HOME (``""``: $HOME itself), used when the variable is not set."""
    files: tuple[str, ...]
    """The files copied (names in that directory): settings, never history or sessions."""
    logins: tuple[str, ...] = ()
    """Files that hold a login or a key and nothing else the CLI needs once it is routed: never copied (unless the
    CLI is not routed and the user set ``carry_login``). Read for an API key by the preset's ``setup``."""
    env_files: tuple[str, ...] = ()
    """Files (among ``files``) whose variables the CLI loads into its environment: a dotenv file, or a JSON or TOML
    file's ``env`` table (Claude Code's and Qwen Code's settings.json, gptme's config.toml)."""


@dataclass(frozen=True)
class UserFile:
    """One of the user's configuration files for the CLI, as read (bounded) before it is carried."""

    carry: ConfigCarry
    name: str
    path: Path
    text: str
    shown: str
    """How messages name it: ``~/.codex/auth.json``."""

    @property
    def login(self) -> bool:
        return self.name in self.carry.logins

    def data(self) -> Any:
        """The file parsed (JSON, JSON with comments, TOML, dotenv), or None when it is not."""
        return parse(self.name, self.text)

    def env(self) -> dict[str, str]:
        """The variables the CLI loads from this file (an ``env_files`` entry), else none."""
        if self.name not in self.carry.env_files:
            return {}
        data = self.data()
        table = data.get("env") if isinstance(data, dict) and not _is_dotenv(self.name) else data
        if not isinstance(table, dict):
            return {}
        return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class UserSetup:
    """The user's configuration of one CLI: the files its carries name that exist (bounded reads)."""

    files: tuple[UserFile, ...] = ()

    def file(self, name: str) -> UserFile | None:
        return next((f for f in self.files if f.name == name), None)

    def env(self) -> dict[str, str]:
        """Every variable the CLI's settings load into its environment (later files win)."""
        merged: dict[str, str] = {}
        for file in self.files:
            merged.update(file.env())
        return merged

    def logins(self) -> list[UserFile]:
        return [f for f in self.files if f.login]

    def loopback_endpoints(self) -> list[str]:
        """The URLs on this host's loopback the settings files name (a local proxy, a local model server)."""
        found = [m.group(0).rstrip("/.,") for f in self.files if not f.login for m in _LOOPBACK_URL.finditer(f.text)]
        return list(dict.fromkeys(found))

    def secrets(self) -> dict[str, str]:
        """Every secret value in the settings files (logins aside) -> where it is (``~/.qwen/settings.json``)."""
        found: dict[str, str] = {}
        for file in self.files:
            if not file.login:
                for value in secrets_in(file):
                    found.setdefault(value, file.shown)
        return found


@dataclass(frozen=True)
class Rewrite:
    """How the carried copies differ from the user's files."""

    replace: Mapping[str, str] = field(default_factory=dict)
    """Text -> what the copy holds instead (the routed key -> the attempt's token, the configured endpoint -> the
    gateway's URL); every other secret is removed."""
    remove: frozenset[str] = frozenset()
    """More secrets to take out wherever they are written: the values of the caller's credential variables."""
    keep_logins: bool = False
    """Copy login files and secrets as they are: a CLI that is not routed, with ``carry_login`` set."""

    @property
    def withheld(self) -> frozenset[str]:
        """What the CLI may hold nowhere, not in a variable either: the keys and the endpoint the gateway took."""
        return self.remove | frozenset(self.replace)


class CarryRefused(Exception):
    """A credential would enter the sandbox and cannot be taken out of the copy; the message says which and what to
    do."""


def dig(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]...``, or None where a step is missing or not a table."""
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def text_of(value: Any) -> str | None:
    """A non-empty string setting, else None."""
    return value if isinstance(value, str) and value else None


def named_variable(value: str | None) -> str | None:
    """The variable a setting names instead of holding a secret: ``{env:NAME}``, ``${NAME}``, ``$NAME``."""
    match = re.fullmatch(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}|\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value or "")
    return (match.group(1) or match.group(2)) if match else None


def user_config_dir(carry: ConfigCarry, parent: Mapping[str, str], config_dir: bool | Path) -> Path | None:
    """Where the user's own settings for this CLI live: ``config_dir = PATH``, the CLI's variable, or $HOME."""
    if isinstance(config_dir, Path):
        return config_dir
    if parent.get(carry.env_var):
        return Path(parent[carry.env_var])
    home = parent.get("HOME") or os.environ.get("HOME")
    if not home:
        return None
    return Path(home) / carry.default if carry.default else Path(home)


def read_setup(carries: Iterable[ConfigCarry], parent: Mapping[str, str], config_dir: bool | Path) -> UserSetup:
    """The user's files for the CLI (a file too big, unreadable or not a regular file is not carried)."""
    home = parent.get("HOME") or os.environ.get("HOME") or ""
    files = []
    for carry in carries:
        source = user_config_dir(carry, parent, config_dir)
        if source is None or not source.is_dir():
            continue
        for name in (*carry.files, *carry.logins):
            path = source / name
            try:
                text = read_regular(path, MAX_CONFIG_BYTES).decode("utf-8", "replace")
            except (OSError, ValueError):
                continue
            shown = "~/" + str(path.relative_to(home)) if home and path.is_relative_to(home) else str(path)
            files.append(UserFile(carry, name, path, text, shown))
    return UserSetup(tuple(files))


def carry(setup: UserSetup, target_of: Callable[[ConfigCarry], Path | None], rewrite: Rewrite) -> None:
    """Write the copies into the attempt's config directories (``target_of`` a carry: None, not carried).

    Raises ``CarryRefused`` when a secret is still in a copy after the rewrite (written in a form the text
    replacement cannot find, such as a JSON escape), before anything of that file is written."""
    secrets = {} if rewrite.keep_logins else {**dict.fromkeys(rewrite.remove, "the environment"), **setup.secrets()}
    for file in setup.files:
        target = target_of(file.carry)
        if target is None or (file.login and not rewrite.keep_logins):
            continue
        if file.path.resolve() == (target / file.name).resolve():
            continue  # config_dir = false: the CLI reads the user's own directory
        text = file.text if rewrite.keep_logins else rewritten(file.text, rewrite.replace, secrets)
        if not rewrite.keep_logins and (left := still_secret(file, text, secrets, rewrite.replace)) is not None:
            raise CarryRefused(
                f"{file.shown} holds a credential ({left}) that worktrial cannot take out of the copy it puts in "
                "each attempt; move it to an environment variable (or the CLI's key variable) and run again"
            )
        destination = target / file.name
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)


def rewritten(text: str, replace: Mapping[str, str], secrets: Iterable[str]) -> str:
    """``text`` with each ``replace`` key (longest first) put in its place, then every other secret removed."""
    for old in sorted(replace, key=len, reverse=True):
        text = text.replace(old, replace[old])
    for secret in sorted(set(secrets) - set(replace), key=len, reverse=True):
        text = text.replace(secret, "")
    return text


def still_secret(file: UserFile, text: str, secrets: Mapping[str, str], replace: Mapping[str, str]) -> str | None:
    """Where a secret survived the rewrite (its setting's name, else "a key"), or None."""
    kept = set(replace.values())
    for name, value in (*_named_strings(parse(file.name, text)), *_settings(text)):
        if value not in kept and (value in secrets or _KEY_SHAPES.fullmatch(value)):
            return name or "a key"
    if any(secret in text for secret in secrets if secret not in kept) or _KEY_SHAPES.search(text):
        return "a key"
    return None


def secrets_in(file: UserFile) -> set[str]:
    """The secret values a settings file holds: under a key-like name, or of a known key shape."""
    found = {value for name, value in _settings(file.text) if _is_secret(name, value)}
    found |= {value for name, value in _named_strings(file.data()) if _is_secret(name, value)}
    found |= set(_KEY_SHAPES.findall(file.text))
    return found


def _is_secret(name: str, value: str) -> bool:
    if (
        len(value) < MIN_SECRET_CHARS
        or _REFERENCE.match(value)
        or not _SECRET_NAME.search(_CAMEL.sub("_", name).lower())
    ):
        return False
    return not value.startswith(("/", "~", "http://", "https://"))  # a path or URL names where, it is not a key


def _settings(text: str) -> Iterator[tuple[str, str]]:
    """Every ``name = value`` of the text, whatever the format (JSON's escapes aside: ``_named_strings``)."""
    for match in _ASSIGNMENT.finditer(text):
        yield match.group("name"), match.group("value")


def _named_strings(data: Any, name: str = "") -> Iterator[tuple[str, str]]:
    """(the setting's name, its string value) of every string in parsed data, nested tables included."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _named_strings(value, str(key))
    elif isinstance(data, list):
        for value in data:
            yield from _named_strings(value, name)
    elif isinstance(data, str):
        yield name, data


def _decoded_strings(data: Any) -> Iterator[str]:
    for _name, value in _named_strings(data):
        yield value


def _is_dotenv(name: str) -> bool:
    return Path(name).name == ".env" or name.endswith(".env")


def parse(name: str, text: str) -> Any:
    """A configuration file's content by its name: JSON (comments allowed), TOML, dotenv; None when it is none of
    them or does not parse (YAML is read as text only)."""
    try:
        if name.endswith((".json", ".jsonc")):
            return json.loads(_without_comments(text))
        if name.endswith(".toml"):
            return tomllib.loads(text)
    except (ValueError, RecursionError):
        return None
    if _is_dotenv(name):
        return _dotenv(text)
    return None


def _dotenv(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def _without_comments(text: str) -> str:
    """JSON with ``//`` and ``/* */`` comments and trailing commas (Qwen Code's and OpenCode's settings) as JSON."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))
