"""Where worktrial keeps the user's own state: the config directory (config, trust, run keys) and the cache.

Its own module, below ``config`` and ``trust``, because reading the configuration needs the trust records (a
project's ``worktrial.toml`` counts only once trusted) and the trust records live in the config directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """``$WORKTRIAL_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/worktrial``, else ``~/.config/worktrial``."""
    if explicit := os.environ.get("WORKTRIAL_CONFIG_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "worktrial"


def cache_dir() -> Path:
    """``$WORKTRIAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/worktrial``, else ``~/.cache/worktrial``."""
    if explicit := os.environ.get("WORKTRIAL_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "worktrial"
