"""What the JSON input limits cost: ``loads_limited`` beside plain ``json.loads`` on the files worktrial reads.

Three inputs of realistic size: an envelope of 500 tasks x 20 attempts (as ``audit``/``compare``/``report`` read
it), the 10,000 signed lines of that run's ``attempts.jsonl`` (as every ``resume``/``report``/``runs`` reads them),
and a suite of 2,000 tasks. Prints the best of 5 timings of each, side by side, and the ratio.

    .venv/bin/python benchmarks/json_limits.py
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from worktrial.jsonlimits import loads_limited

TASKS, ATTEMPTS = 500, 20


def attempt(task: int, n: int) -> dict[str, object]:
    return {
        "task_id": f"task-{task}",
        "attempt": n,
        "outcome": "pass" if (task + n) % 3 else "fail",
        "claimed": True,
        "verified": bool((task + n) % 3),
        "reason": None if (task + n) % 3 else "verify_commands[0] (pytest -q) exited 1",
        "duration_secs": 12.5,
        "agent_secs": 11.9,
        "verify_secs": 0.6,
        "cost_usd": 0.0123,
        "tokens": {"input": 12000, "output": 800, "cached_input": 9000, "cache_creation": 0, "reasoning": 120},
        "turns": 9,
        "tool_calls": 14,
        "error_category": None,
        "trace": f".worktrial/eval/traces/run/task-{task}-{n}.json",
    }


def envelope() -> str:
    tasks = [
        {
            "task_id": f"task-{t}",
            "passed_runs": 13,
            "total_runs": ATTEMPTS,
            "pass_at_k": 1.0,
            "pass_power_k": 0.0,
            "curves": {
                "pass_at": {str(k): 0.5 for k in range(1, 21)},
                "pass_power": {str(k): 0.1 for k in range(1, 21)},
            },
            "attempts": [attempt(t, n) for n in range(1, ATTEMPTS + 1)],
        }
        for t in range(TASKS)
    ]
    return json.dumps({"schema_version": 1, "report": {"tasks": tasks}})


def attempt_lines() -> list[str]:
    sig = "0" * 64
    return [json.dumps({"sig": sig, "record": attempt(t, n)}) for t in range(TASKS) for n in range(1, ATTEMPTS + 1)]


def suite() -> str:
    tasks = [
        {"id": f"t{i}", "prompt": "Fix the bug described in ISSUE.md. " * 20, "verify_commands": [{"argv": ["pytest"]}]}
        for i in range(2000)
    ]
    return json.dumps({"id": "big", "tasks": tasks})


def best(fn: Callable[[], object], rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    env, lines, suite_text = envelope(), attempt_lines(), suite()
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (f"envelope ({len(env) / 1e6:.1f} MB)", lambda: json.loads(env), lambda: loads_limited(env)),
        (
            f"attempts.jsonl ({len(lines)} lines)",
            lambda: [json.loads(line) for line in lines],
            lambda: [loads_limited(line) for line in lines],
        ),
        (
            f"suite ({len(suite_text) / 1e6:.1f} MB)",
            lambda: json.loads(suite_text),
            lambda: loads_limited(suite_text, allow_nul=False),
        ),
    ]
    print(f"{'input':<32} {'json.loads':>12} {'loads_limited':>14} {'ratio':>7}")
    for name, plain, limited in cases:
        base, checked = best(plain), best(limited)
        print(f"{name:<32} {base * 1000:>10.1f}ms {checked * 1000:>12.1f}ms {checked / base:>6.2f}x")


if __name__ == "__main__":
    main()
