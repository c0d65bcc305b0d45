"""Renderers of a finished (or partial) run: markdown and the JSON envelope."""

from worktrial.report.json import render_json
from worktrial.report.markdown import render_markdown

__all__ = ["render_json", "render_markdown"]
