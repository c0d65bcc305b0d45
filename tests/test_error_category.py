"""``error_category`` is closed: every value worktrial produces is an ``ErrorCategory`` member, every member is
documented in docs/results.md with whether it is retried and whether it stops the run, and old records still load."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from worktrial.agents.base import AgentError
from worktrial.model.records import FATAL_ERRORS, RETRYABLE_ERRORS, AttemptRecord, ErrorCategory

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "worktrial"
# Calls whose first argument is an error category, and the keywords that carry one.
CATEGORY_CALLS = {"AgentError", "ProviderError", "ProviderFailure", "failure", "error_result"}
CATEGORY_NAMES = {"category", "error_category"}


def _documented() -> dict[str, tuple[str, str]]:
    """category -> (retried, stops the run), from the table under "### Error categories" in docs/results.md."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    section = text.split("### Error categories", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := re.match(r"\| `([a-z_]+)` \| .* \| (yes|no) \| ([^|]+) \|$", line):
            rows[match.group(1)] = (match.group(2), match.group(3).strip())
    return rows


def test_every_member_is_documented_with_its_retry_and_stop() -> None:
    rows = _documented()
    assert set(rows) == {member.value for member in ErrorCategory}, "docs/results.md and ErrorCategory differ"
    for member in ErrorCategory:
        retried, stops = rows[member.value]
        assert (retried == "yes") == (member in RETRYABLE_ERRORS), f"{member}: retried column"
        assert (stops == "always") == (member in FATAL_ERRORS), f"{member}: stops-the-run column"


# Members whose value is also an ordinary word of the code (a phase, a suite field, a directory): checked only where a
# category is produced. Every other member's value must not appear as a string literal anywhere but its definition.
ORDINARY_WORDS = {"worktree", "environment", "setup", "limit"}


def _literals() -> list[tuple[str, int, ast.Constant, list[ast.AST]]]:
    """(file, line, literal, its ancestors) of every string constant in src naming a category, outside records.py."""
    values = {member.value for member in ErrorCategory}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "model" / "records.py":
            continue

        def visit(node: ast.AST, ancestors: list[ast.AST], path: Path = path) -> None:
            if isinstance(node, ast.Constant) and node.value in values:
                found.append((str(path.relative_to(ROOT)), node.lineno, node, ancestors))
            for child in ast.iter_child_nodes(node):
                visit(child, [*ancestors, node])

        visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return found


def _produces_a_category(literal: ast.Constant, ancestors: list[ast.AST]) -> bool:
    """Whether the literal is a category argument, keyword, assigned category or compared category."""
    for node in reversed(ancestors):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            keyword = any(kw.value is literal and kw.arg in CATEGORY_NAMES for kw in node.keywords)
            return keyword or (name in CATEGORY_CALLS and literal in node.args)
        if isinstance(node, ast.Assign | ast.Compare):
            names = [n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(node)]
            return bool(CATEGORY_NAMES & set(names))
    return False


def test_producers_use_the_enum_not_strings() -> None:
    """Every category worktrial produces is written ``ErrorCategory.X``, so mypy and the enum check it."""
    offenders = [
        f"{file}:{line}: {literal.value!r}"
        for file, line, literal, ancestors in _literals()
        if literal.value not in ORDINARY_WORDS or _produces_a_category(literal, ancestors)
    ]
    assert offenders == [], "use ErrorCategory members: " + ", ".join(offenders)


def test_an_unknown_category_is_refused_where_it_is_produced() -> None:
    assert AgentError("worktree", "x").category is ErrorCategory.WORKTREE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid ErrorCategory"):
        AgentError("bogus", "a plugin's own word")  # type: ignore[arg-type]


def test_records_store_the_plain_string_and_old_values_still_load() -> None:
    base = {"task_id": "t", "attempt": 1, "outcome": "error", "claimed": None, "verified": None}
    times = {"duration_secs": 0.0, "agent_secs": 0.0, "verify_secs": 0.0}
    record = AttemptRecord(**base, **times, error_category=ErrorCategory.PROVIDER_SERVER)
    assert '"error_category":"provider_server"' in record.model_dump_json()
    old = AttemptRecord.model_validate({**base, **times, "error_category": "auth"})
    assert old.error_category == "auth"
    assert AttemptRecord.model_validate_json(record.model_dump_json()).error_category in RETRYABLE_ERRORS
