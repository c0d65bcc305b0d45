"""Running part of a suite: ``--task`` (glob patterns over ids), ``--category`` and ``--limit``.

The suite file and its digest stay whole (the selection is recorded beside them in the envelope), so a run over
a selection is still tied to the exact suite it came from, and ``compare`` can tell runs over different
selections apart.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence

from worktrial.errors import BadInputError
from worktrial.model.envelope import Selection
from worktrial.model.suite import CATEGORIES, LoadedSuite


def select(
    loaded: LoadedSuite, patterns: Sequence[str] = (), categories: Sequence[str] = (), limit: int | None = None
) -> tuple[LoadedSuite, Selection | None]:
    """The suite narrowed to the chosen tasks (in suite order) and the selection to record; None = every task."""
    if not patterns and not categories and limit is None:
        return loaded, None
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise BadInputError(f"--category {unknown[0]!r} is not a category; use one of: {', '.join(CATEGORIES)}")
    if limit is not None and limit < 1:
        raise BadInputError(f"--limit must be at least 1 (got {limit})")
    tasks = list(loaded.suite.tasks)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(t.id, pattern) for t in tasks):
            known = ", ".join(t.id for t in tasks[:12]) + (", ..." if len(tasks) > 12 else "")
            raise BadInputError(f"--task {pattern!r} matches no task id in {loaded.path} (tasks: {known})")
    chosen = [
        t
        for t in tasks
        if (not patterns or any(fnmatch.fnmatchcase(t.id, p) for p in patterns))
        and (not categories or t.category in categories)
    ]
    if limit is not None:
        chosen = chosen[:limit]
    if not chosen:
        raise BadInputError(
            f"the selection leaves no task to run (--category {', '.join(categories)} with the --task patterns given)"
        )
    narrowed = dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"tasks": chosen}))
    selection = Selection(
        tasks=list(patterns),
        categories=list(categories),
        limit=limit,
        task_ids=[t.id for t in chosen],
        suite_tasks=len(tasks),
    )
    return narrowed, selection


def reselect(loaded: LoadedSuite, selection: Selection | None) -> LoadedSuite:
    """The suite narrowed again to a stored selection's task ids (resume runs exactly what the run chose)."""
    if selection is None:
        return loaded
    wanted = set(selection.task_ids)
    chosen = [t for t in loaded.suite.tasks if t.id in wanted]
    return dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"tasks": chosen}))
