"""Renderers of a finished (or partial) run: markdown and the JSON envelope."""

from worktrial.render.json import render_json
from worktrial.render.markdown import render_markdown

__all__ = ["render_json", "render_markdown"]
