"""Event streams for each preset's fake, written from the agents' published schemas.

Every preset has the same scenario names: ``normal`` (a successful run that does the work), ``failed``
(the agent reports failure), ``garbage`` (a successful run with log noise and malformed lines mixed in),
``crash`` (exits non-zero before printing anything) and ``partial`` (prints part of its stream, then hangs
mid-line until the task timeout kills it). ``EXPECTED`` holds the figures the normal run must produce.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.events import (
    CLAUDE_FAILED,
    CLAUDE_NORMAL,
    CODEX_FAILED,
    CODEX_NORMAL,
    COPILOT_FAILED,
    COPILOT_NORMAL,
    COPILOT_USAGE,
    CURSOR_FAILED,
    CURSOR_NORMAL,
    DROID_FAILED,
    DROID_NORMAL,
    GOOSE_FAILED,
    GOOSE_NORMAL,
    GPTME_FAILED,
    GPTME_NORMAL,
    GROK_FAILED,
    GROK_NORMAL,
    OPENCODE_FAILED,
    OPENCODE_NORMAL,
    VTCODE_FAILED,
    VTCODE_NORMAL,
)

NOISE = ["Loading configuration...", "{not json at all", '["a", "list", "not", "an", "object"]', ""]


def _scenarios(
    normal: list[Any],
    failed: list[Any],
    *,
    failed_exit: int = 1,
    touch_env: tuple[str, ...] = (),
    flag_files: dict[str, dict[str, str]] | None = None,
) -> dict[str, dict[str, Any]]:
    flag_files = flag_files or {}
    base = {"touch_env": list(touch_env), "record_env": [*touch_env, "HOME"]}
    half = json.dumps(normal[-1])[: len(json.dumps(normal[-1])) // 2]
    return {
        "normal": {**base, "stdout": normal, "flag_files": flag_files.get("normal", {})},
        "failed": {
            **base,
            "stdout": failed,
            "exit": failed_exit,
            "write_done": False,
            "flag_files": flag_files.get("failed", {}),
        },
        "garbage": {
            **base,
            "stdout": [NOISE[0], *normal[:1], *NOISE[1:], *normal[1:]],
            "flag_files": flag_files.get("normal", {}),
        },
        "crash": {**base, "stdout": [], "exit": 2, "write_done": False},
        "partial": {**base, "stdout": normal[:-1], "partial": half, "hang": True, "write_done": False},
    }


# --- continue (one JSON object at the end; an error is a JSON line on stderr) ------------------------------------


def continue_scenarios() -> dict[str, dict[str, Any]]:
    done = {"response": "Created done.txt", "status": "success"}
    scenarios = _scenarios([done], [], touch_env=("CONTINUE_GLOBAL_DIR",))
    scenarios["failed"]["stderr"] = [json.dumps({"status": "error", "message": "Error: the tool call failed"})]
    return scenarios


# --- gemini-cli (one JSON document) ----------------------------------------------------------------

GEMINI_NORMAL_DOC = {
    "session_id": "g1",
    "response": "Created done.txt",
    "stats": {
        "models": {
            "gemini-2.5-pro": {
                "api": {"totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 5053},
                "tokens": {
                    "input": 3676,
                    "prompt": 24939,
                    "candidates": 20,
                    "total": 25113,
                    "cached": 21263,
                    "thoughts": 154,
                    "tool": 0,
                },
            },
            "gemini-2.5-flash": {
                "api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 900},
                "tokens": {
                    "input": 100,
                    "prompt": 100,
                    "candidates": 10,
                    "total": 110,
                    "cached": 0,
                    "thoughts": 0,
                    "tool": 0,
                },
            },
        },
        "tools": {
            "totalCalls": 3,
            "totalSuccess": 3,
            "totalFail": 0,
            "byName": {
                "write_file": {"count": 1, "success": 1, "fail": 0, "durationMs": 5},
                "run_shell_command": {"count": 2, "success": 2, "fail": 0, "durationMs": 50},
            },
        },
        "files": {"totalLinesAdded": 1, "totalLinesRemoved": 0},
    },
}
GEMINI_FAILED_DOC = {
    "session_id": "g2",
    "error": {"type": "FatalTurnLimitedError", "message": "Reached max session turns", "code": 53},
    "stats": {"models": {}, "tools": {"totalCalls": 0, "byName": {}}},
}


def gemini_scenarios() -> dict[str, dict[str, Any]]:
    base = {"touch_env": ["GEMINI_CLI_HOME"], "record_env": ["GEMINI_CLI_HOME", "HOME"]}
    pretty = json.dumps(GEMINI_NORMAL_DOC, indent=2).splitlines()
    return {
        "normal": {**base, "stdout": pretty},
        "failed": {
            **base,
            "stdout": json.dumps(GEMINI_FAILED_DOC, indent=2).splitlines(),
            "exit": 53,
            "write_done": False,
        },
        "garbage": {**base, "stdout": ["Loaded cached credentials.", *pretty]},
        "crash": {**base, "stdout": [], "exit": 1, "write_done": False},
        "partial": {
            **base,
            "stdout": pretty[: len(pretty) // 2],
            "partial": '  "resp',
            "hang": True,
            "write_done": False,
        },
    }


# --- aider (analytics log file) ----------------------------------------------------------------------


def _aider_event(name: str, **props: Any) -> str:
    return json.dumps({"event": name, "properties": props, "user_id": "u", "time": 1})


AIDER_LOG = "\n".join(
    [
        _aider_event("launched"),
        _aider_event("cli session", main_model="gpt-4o", edit_format="diff"),
        _aider_event(
            "message_send",
            main_model="gpt-4o",
            prompt_tokens=2000,
            completion_tokens=150,
            total_tokens=2150,
            cost=0.0065,
            total_cost=0.0065,
        ),
        "garbage line",
        _aider_event(
            "message_send",
            main_model="gpt-4o",
            prompt_tokens=2500,
            completion_tokens=50,
            total_tokens=2550,
            cost=0.0068,
            total_cost=0.0133,
        ),
        _aider_event("exit", reason="Completed --message"),
    ]
)


def aider_scenarios() -> dict[str, dict[str, Any]]:
    base = {"touch_env": ["HOME"], "record_env": ["HOME"]}
    log = {"--analytics-log": AIDER_LOG + "\n"}
    return {
        "normal": {**base, "stdout": ["Aider v0.86.0", "Applied edit to done.txt"], "flag_files": log},
        "failed": {**base, "stdout": ["litellm.AuthenticationError"], "exit": 1, "write_done": False},
        "garbage": {**base, "stdout": NOISE, "flag_files": log},
        "crash": {**base, "stdout": [], "exit": 2, "write_done": False},
        "partial": {**base, "stdout": ["Aider v0.86.0"], "partial": "Thinking", "hang": True, "write_done": False},
    }


# --- mini-swe-agent (trajectory file) ------------------------------------------------------------------


def _trajectory(status: str | None, cost: float, calls: int) -> str:
    info: dict[str, Any] = {
        "submission": "",
        "model_stats": {"instance_cost": cost, "api_calls": calls},
        "mini_version": "2.2.0",
    }
    if status is not None:
        info["exit_status"] = status
    return json.dumps({"info": info, "messages": [], "trajectory_format": "mini-swe-agent-1"})


def mini_scenarios() -> dict[str, dict[str, Any]]:
    base = {
        "touch_env": ["MSWEA_GLOBAL_CONFIG_DIR"],
        "record_env": ["MSWEA_GLOBAL_CONFIG_DIR", "MSWEA_CONFIGURED", "HOME"],
    }
    return {
        "normal": {
            **base,
            "stdout": ["mini-swe-agent 2.2.0"],
            "flag_files": {"-o": _trajectory("Submitted", 0.0421, 7)},
        },
        "failed": {
            **base,
            "stdout": [],
            "exit": 0,
            "write_done": False,
            "flag_files": {"-o": _trajectory("LimitsExceeded", 3.0, 250)},
        },
        "garbage": {**base, "stdout": NOISE, "flag_files": {"-o": "{truncated json"}},
        "crash": {**base, "stdout": [], "exit": 1, "write_done": False},
        "partial": {**base, "stdout": ["step 1"], "partial": "step", "hang": True, "write_done": False},
    }


SCENARIOS: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "claude-code": (
        "claude",
        _scenarios(CLAUDE_NORMAL, CLAUDE_FAILED, failed_exit=0, touch_env=("CLAUDE_CONFIG_DIR",)),
    ),
    "codex": ("codex", _scenarios(CODEX_NORMAL, CODEX_FAILED, touch_env=("CODEX_HOME",))),
    "gemini-cli": ("gemini", gemini_scenarios()),
    "opencode": ("opencode", _scenarios(OPENCODE_NORMAL, OPENCODE_FAILED, touch_env=("XDG_DATA_HOME",))),
    # Qwen Code prints Claude Code's stream shape (with OpenAI's usage convention: input includes cached).
    "qwen-code": ("qwen", _scenarios(CLAUDE_NORMAL, CLAUDE_FAILED, failed_exit=0, touch_env=("QWEN_RUNTIME_DIR",))),
    "goose": ("goose", _scenarios(GOOSE_NORMAL, GOOSE_FAILED, touch_env=("GOOSE_PATH_ROOT",))),
    "cursor": ("cursor-agent", _scenarios(CURSOR_NORMAL, CURSOR_FAILED, touch_env=("CURSOR_CONFIG_DIR",))),
    "aider": ("aider", aider_scenarios()),
    "mini-swe-agent": ("mini", mini_scenarios()),
    "vtcode": ("vtcode", _scenarios(VTCODE_NORMAL, VTCODE_FAILED, failed_exit=0, touch_env=("VTCODE_HOME",))),
    "copilot": (
        "copilot",
        _scenarios(
            COPILOT_NORMAL,
            COPILOT_FAILED,
            touch_env=("COPILOT_HOME",),
            flag_files={"normal": {"--usage-output-file": json.dumps(COPILOT_USAGE)}},
        ),
    ),
    "continue": ("cn", continue_scenarios()),
    # Kilo's CLI is a fork of OpenCode and prints OpenCode's events.
    "kilo": ("kilo", _scenarios(OPENCODE_NORMAL, OPENCODE_FAILED, touch_env=("XDG_DATA_HOME",))),
    "gptme": ("gptme", _scenarios(GPTME_NORMAL, GPTME_FAILED, touch_env=("XDG_DATA_HOME",))),
    "droid": ("droid", _scenarios(DROID_NORMAL, DROID_FAILED, touch_env=("FACTORY_HOME_OVERRIDE",))),
    "grok-cli": ("grok", _scenarios(GROK_NORMAL, GROK_FAILED, failed_exit=0, touch_env=("HOME",))),
}
"""preset name -> (binary, scenarios)."""

EXPECTED: dict[str, dict[str, Any]] = {
    "claude-code": {
        # Claude reports input without its cache reads and writes; worktrial's input counts every prompt token.
        "tokens": {"input": 22492, "output": 340, "cached_input": 13368, "cache_creation": 7924, "reasoning": None},
        "cost_usd": 0.1046,
        "turns": 4,
        "tool_counts": {"Write": 1, "Bash": 2},
    },
    "codex": {
        "tokens": {"input": 24763, "output": 122, "cached_input": 24448, "cache_creation": None, "reasoning": None},
        "cost_usd": None,
        "turns": None,  # model calls come from Codex's session file, which the fake does not write
        "tool_counts": {"command_execution": 1, "file_change": 1, "mcp:search": 1},
    },
    "gemini-cli": {
        # Gemini's candidates (30) exclude its thoughts (154); worktrial's output counts every generated token.
        "tokens": {"input": 25039, "output": 184, "cached_input": 21263, "cache_creation": None, "reasoning": 154},
        "cost_usd": None,
        "turns": 3,
        "tool_counts": {"write_file": 1, "run_shell_command": 2},
    },
    "opencode": {
        # OpenCode's input excludes cache reads/writes and its output excludes reasoning: both added back.
        "tokens": {"input": 10800, "output": 350, "cached_input": 9000, "cache_creation": 300, "reasoning": 50},
        "cost_usd": 0.02,
        "turns": 2,
        "tool_counts": {"write": 1, "bash": 1},
    },
    "goose": {
        "tokens": {"input": 5000, "output": 300, "cached_input": 1200, "cache_creation": 40, "reasoning": None},
        "cost_usd": 0.031,
        "turns": None,
        "tool_counts": {"developer__shell": 1, "developer__text_editor": 1},
    },
    "cursor": {
        "tokens": {"input": 2100, "output": 90, "cached_input": 800, "cache_creation": 12, "reasoning": None},
        "cost_usd": None,
        "turns": None,
        "tool_counts": {"read": 1, "write": 1, "shell": 1},
    },
    "aider": {
        "tokens": {"input": 4500, "output": 200, "cached_input": None, "cache_creation": None, "reasoning": None},
        "cost_usd": 0.0133,
        "turns": 2,
        "tool_counts": {},
    },
    "mini-swe-agent": {
        "tokens": {"input": None, "output": None, "cached_input": None, "cache_creation": None, "reasoning": None},
        "cost_usd": 0.0421,
        "turns": 7,
        "tool_counts": {},
    },
    "qwen-code": {
        "tokens": {"input": 1200, "output": 340, "cached_input": 13368, "cache_creation": 7924, "reasoning": None},
        "cost_usd": 0.1046,
        "turns": 4,
        "tool_counts": {"Write": 1, "Bash": 2},
    },
    "vtcode": {
        "tokens": {"input": 2000, "output": 120, "cached_input": 800, "cache_creation": 10, "reasoning": None},
        "cost_usd": 0.0042,
        "turns": 2,
        "tool_counts": {"write_file": 1, "run_pty_cmd": 1},
    },
    "copilot": {
        # The tokens come from the --usage-output-file document; its input counts the cached part.
        "tokens": {"input": 2300, "output": 59, "cached_input": 1300, "cache_creation": 0, "reasoning": 12},
        "cost_usd": None,
        "turns": 2,
        "tool_counts": {"bash": 1, "create": 1},
    },
    "continue": {
        # Continue's usage is in its session file, which the fake does not write (the real-CLI test reads one).
        "tokens": {"input": None, "output": None, "cached_input": None, "cache_creation": None, "reasoning": None},
        "cost_usd": None,
        "turns": None,
        "tool_counts": {},
    },
    "gptme": {
        # gptme's input excludes cache reads and writes: added back.
        "tokens": {"input": 2320, "output": 59, "cached_input": 1300, "cache_creation": 20, "reasoning": 10},
        "cost_usd": 0.0042,
        "turns": 2,
        "tool_counts": {"shell": 1, "complete": 1},
    },
    "grok-cli": {
        # Grok CLI reports no usage: its tokens are the model gateway's count, when it is routed.
        "tokens": {"input": None, "output": None, "cached_input": None, "cache_creation": None, "reasoning": None},
        "cost_usd": None,
        "turns": 2,
        "tool_counts": {"bash": 1},
    },
}
EXPECTED["kilo"] = EXPECTED["opencode"]
# Droid's input excludes cache reads and writes: added back.
EXPECTED["droid"] = {
    "tokens": {"input": 2340, "output": 59, "cached_input": 1300, "cache_creation": 40, "reasoning": None},
    "cost_usd": None,
    "turns": 3,
    "tool_counts": {"Execute": 1, "Create": 1},
}

CONFIG_ENV: dict[str, str] = {
    "claude-code": "CLAUDE_CONFIG_DIR",
    "codex": "CODEX_HOME",
    "gemini-cli": "GEMINI_CLI_HOME",
    "opencode": "XDG_DATA_HOME",
    "goose": "GOOSE_PATH_ROOT",
    "cursor": "CURSOR_CONFIG_DIR",
    "aider": "HOME",
    "mini-swe-agent": "MSWEA_GLOBAL_CONFIG_DIR",
    "vtcode": "VTCODE_HOME",
    "qwen-code": "QWEN_RUNTIME_DIR",
    "copilot": "COPILOT_HOME",
    "continue": "CONTINUE_GLOBAL_DIR",
    "kilo": "XDG_DATA_HOME",
    "gptme": "XDG_DATA_HOME",
    "droid": "FACTORY_HOME_OVERRIDE",
    "grok-cli": "HOME",
}
"""The config-directory variable each preset must point into the attempt's scratch directory."""
