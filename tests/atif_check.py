"""Validate a trajectory file against ATIF: the JSON schema written from the spec (tests/data/atif), plus what a
JSON schema cannot say (step ids in order, tool results naming a call of their own step, unique subagent ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA = json.loads((Path(__file__).parent / "data" / "atif" / "atif-v1.8.schema.json").read_text())


def atif_problems(document: Any, where: str = "$") -> list[str]:
    """Every way ``document`` breaks ATIF (empty: it is valid)."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    problems = [
        f"{where}{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)
    ]
    if problems:
        return problems
    for index, step in enumerate(document["steps"], start=1):
        if step["step_id"] != index:
            problems.append(f"{where}.steps[{index - 1}]: step_id {step['step_id']}, expected {index}")
        calls = {c["tool_call_id"] for c in step.get("tool_calls") or []}
        for result in (step.get("observation") or {}).get("results", []):
            source = result.get("source_call_id")
            if source is not None and source not in calls:
                problems.append(f"{where}.steps[{index - 1}]: result for {source!r}, not a call of this step")
    subs = document.get("subagent_trajectories") or []
    ids = [s.get("trajectory_id") for s in subs]
    if None in ids or len(set(ids)) != len(ids):
        problems.append(f"{where}.subagent_trajectories: trajectory_id missing or repeated ({ids})")
    for i, sub in enumerate(subs):
        problems += atif_problems(sub, f"{where}.subagent_trajectories[{i}]")
    return problems


def assert_atif(document: Any) -> None:
    problems = atif_problems(document)
    assert not problems, "\n".join(problems)
