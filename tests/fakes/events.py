"""JSON-lines event streams of the streaming presets, written from each agent's published schema.

Claude Code and Cursor (``stream-json``), Codex and VT Code (``thread``/``turn``/``item`` events), OpenCode
(``--format json``) and Goose (``stream-json``): a normal run and a run the agent reports as failed.
"""

from __future__ import annotations

from typing import Any

# --- claude-code ---------------------------------------------------------------------------------------

CLAUDE_NORMAL = [
    {"type": "system", "subtype": "init", "session_id": "s1", "model": "claude-sonnet-4-5", "tools": ["Bash"]},
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll create the file."},
                {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"file_path": "done.txt"}},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 5},
        },
        "session_id": "s1",
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}},
    {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "cat done.txt"}},
                {"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": {"command": "ls"}},
            ]
        },
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 3952,
        "num_turns": 4,
        "result": "Created done.txt",
        "session_id": "s1",
        "total_cost_usd": 0.1046,
        "usage": {
            "input_tokens": 1200,
            "output_tokens": 340,
            "cache_creation_input_tokens": 7924,
            "cache_read_input_tokens": 13368,
        },
    },
]
CLAUDE_FAILED = [
    CLAUDE_NORMAL[0],
    {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "num_turns": 1,
        "result": "API Error: 401 invalid x-api-key",
        "total_cost_usd": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    },
]

# --- codex -------------------------------------------------------------------------------------------

CODEX_NORMAL = [
    {"type": "thread.started", "thread_id": "th_1"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "thinking"}},
    {
        "type": "item.completed",
        "item": {
            "id": "i1",
            "type": "command_execution",
            "command": "bash -lc 'echo done > done.txt'",
            "aggregated_output": "",
            "exit_code": 0,
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "i2",
            "type": "file_change",
            "changes": [{"path": "a.py", "kind": "add"}],
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {"id": "i3", "type": "mcp_tool_call", "server": "docs", "tool": "search", "status": "completed"},
    },
    {"type": "item.completed", "item": {"id": "i4", "type": "agent_message", "text": "Done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}},
]
CODEX_FAILED = [
    {"type": "thread.started", "thread_id": "th_2"},
    {"type": "turn.started"},
    {"type": "error", "message": "stream disconnected before completion"},
    {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}},
]

# --- opencode ------------------------------------------------------------------------------------------


def _oc(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "timestamp": 1767036059338, "sessionID": "ses_1", "part": part}


OPENCODE_NORMAL = [
    _oc("step_start", {"id": "prt_1", "type": "step-start", "snapshot": "abc"}),
    _oc("tool_use", {"id": "prt_2", "type": "tool", "tool": "write", "callID": "c1", "state": {"status": "completed"}}),
    _oc("tool_use", {"id": "prt_3", "type": "tool", "tool": "bash", "callID": "c2", "state": {"status": "completed"}}),
    _oc(
        "step_finish",
        {
            "id": "prt_4",
            "type": "step-finish",
            "reason": "tool-calls",
            "cost": 0.0123,
            "tokens": {"input": 1000, "output": 200, "reasoning": 50, "cache": {"read": 4000, "write": 300}},
        },
    ),
    _oc("step_start", {"id": "prt_5", "type": "step-start"}),
    _oc("text", {"id": "prt_6", "type": "text", "text": "Done.", "time": {"start": 1, "end": 2}}),
    _oc(
        "step_finish",
        {
            "id": "prt_7",
            "type": "step-finish",
            "reason": "stop",
            "cost": 0.0077,
            "tokens": {"input": 500, "output": 100, "reasoning": 0, "cache": {"read": 5000, "write": 0}},
        },
    ),
]
OPENCODE_FAILED = [
    _oc("step_start", {"id": "prt_1", "type": "step-start"}),
    {
        "type": "error",
        "timestamp": 1,
        "sessionID": "ses_1",
        "error": {"name": "ProviderAuthError", "data": {"message": "bad key"}},
    },
]

# --- goose ---------------------------------------------------------------------------------------------


def _goose_message(msg_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "message": {"id": msg_id, "role": "assistant", "created": 1, "content": content}}


GOOSE_TOOL = {
    "type": "toolRequest",
    "id": "call_1",
    "toolCall": {"status": "success", "value": {"name": "developer__shell", "arguments": {"command": "echo"}}},
}
GOOSE_NORMAL = [
    _goose_message("m1", [{"type": "text", "text": "Working"}]),
    _goose_message("m1", [{"type": "text", "text": " on it"}, GOOSE_TOOL]),
    _goose_message("m1", [GOOSE_TOOL]),  # a resent chunk: still one tool call
    _goose_message(
        "m2",
        [
            {
                "type": "toolRequest",
                "id": "call_2",
                "toolCall": {"status": "success", "value": {"name": "developer__text_editor", "arguments": {}}},
            }
        ],
    ),
    {"type": "notification", "extension_id": "developer", "log": {"message": "ran"}},
    {
        "type": "complete",
        "total_tokens": 5300,
        "input_tokens": 5000,
        "output_tokens": 300,
        "cache_read_input_tokens": 1200,
        "cache_write_input_tokens": 40,
        "cost_usd": 0.031,
    },
]
GOOSE_FAILED = [_goose_message("m1", [{"type": "text", "text": "Hi"}]), {"type": "error", "error": "Rate limited"}]

# --- cursor --------------------------------------------------------------------------------------------

CURSOR_NORMAL = [
    {
        "type": "system",
        "subtype": "init",
        "apiKeySource": "env",
        "cwd": "/w",
        "session_id": "c1",
        "model": "gpt-5",
        "permissionMode": "default",
    },
    {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "task"}]}, "session_id": "c1"},
    {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Reading."}]},
        "session_id": "c1",
    },
    {
        "type": "tool_call",
        "subtype": "started",
        "call_id": "t1",
        "tool_call": {"readToolCall": {"args": {"path": "README.md"}}},
        "session_id": "c1",
    },
    {
        "type": "tool_call",
        "subtype": "completed",
        "call_id": "t1",
        "tool_call": {"readToolCall": {"args": {"path": "README.md"}, "result": {"success": {}}}},
        "session_id": "c1",
    },
    {
        "type": "tool_call",
        "subtype": "started",
        "call_id": "t2",
        "tool_call": {"writeToolCall": {"args": {"path": "done.txt"}}},
        "session_id": "c1",
    },
    {
        "type": "tool_call",
        "subtype": "completed",
        "call_id": "t2",
        "tool_call": {"writeToolCall": {"args": {"path": "done.txt"}}},
        "session_id": "c1",
    },
    {
        "type": "tool_call",
        "subtype": "started",
        "call_id": "t3",
        "tool_call": {"shellToolCall": {"args": {"command": "ls"}}},
        "session_id": "c1",
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 1234,
        "duration_api_ms": 1234,
        "result": "Done",
        "session_id": "c1",
        "usage": {"inputTokens": 2100, "outputTokens": 90, "cacheReadTokens": 800, "cacheWriteTokens": 12},
    },
]
CURSOR_FAILED = [
    CURSOR_NORMAL[0],
    {"type": "result", "subtype": "error", "is_error": True, "duration_ms": 10, "result": "failed", "session_id": "c1"},
]

# --- vtcode --------------------------------------------------------------------------------------------

VTCODE_NORMAL = [
    {"type": "thread.started", "thread_id": "v1"},
    {"type": "turn.started"},
    {
        "type": "item.completed",
        "item": {"id": "a", "type": "tool_invocation", "tool_name": "write_file", "status": "completed"},
    },
    {
        "type": "item.completed",
        "item": {"id": "b", "type": "tool_invocation", "tool_name": "run_pty_cmd", "status": "completed"},
    },
    {
        "type": "item.completed",
        "item": {
            "id": "c",
            "type": "command_execution",
            "command": "ls",
            "aggregated_output": "",
            "status": "completed",
        },
    },
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 900, "cached_input_tokens": 100, "cache_creation_tokens": 0, "output_tokens": 80},
    },
    {"type": "turn.started"},
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 1100, "cached_input_tokens": 700, "cache_creation_tokens": 0, "output_tokens": 40},
    },
    {
        "type": "thread.completed",
        "thread_id": "v1",
        "session_id": "s",
        "subtype": "success",
        "outcome_code": "completed",
        "result": "done",
        "usage": {"input_tokens": 2000, "cached_input_tokens": 800, "cache_creation_tokens": 10, "output_tokens": 120},
        "total_cost_usd": 0.0042,
        "num_turns": 2,
    },
]
VTCODE_FAILED = [
    {"type": "thread.started", "thread_id": "v2"},
    {"type": "turn.started"},
    {
        "type": "turn.failed",
        "message": "turn limit",
        "usage": {"input_tokens": 5, "cached_input_tokens": 0, "output_tokens": 1},
    },
    {
        "type": "thread.completed",
        "thread_id": "v2",
        "session_id": "s",
        "subtype": "error_max_turns",
        "outcome_code": "max_turns",
        "usage": {"input_tokens": 5, "cached_input_tokens": 0, "cache_creation_tokens": 0, "output_tokens": 1},
        "num_turns": 1,
    },
]

# --- copilot (--output-format json; usage in the --usage-output-file document) ---------------------------------


def _cp(kind: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, "id": f"ev-{kind}", "timestamp": "2026-01-01T00:00:00.000Z", **extra}


COPILOT_NORMAL = [
    _cp("session.tools_updated", {"model": "model-x"}, ephemeral=True),
    _cp("user.message", {"content": "Create done.txt"}),
    _cp("assistant.turn_start", {"turnId": "0"}),
    _cp(
        "assistant.message",
        {
            "messageId": "m1",
            "model": "model-x",
            "content": "",
            "toolRequests": [
                {"toolCallId": "c1", "name": "bash", "arguments": {"command": "ls"}, "type": "function"},
                {"toolCallId": "c2", "name": "create", "arguments": {"path": "done.txt"}, "type": "function"},
            ],
        },
    ),
    _cp("tool.execution_complete", {"toolCallId": "c1", "success": True}),
    _cp("tool.execution_complete", {"toolCallId": "c2", "success": True}),
    _cp("assistant.turn_end", {"turnId": "0"}),
    _cp(
        "assistant.message", {"messageId": "m2", "model": "model-x", "content": "Created done.txt", "toolRequests": []}
    ),
    {"type": "result", "timestamp": "2026-01-01T00:00:01.000Z", "sessionId": "s1", "exitCode": 0, "usage": {}},
]
COPILOT_USAGE = {
    "totalPremiumRequestCost": 0,
    "modelMetrics": {
        "model-x": {
            "requests": {"count": 2, "cost": 0},
            "usage": {
                "inputTokens": 2300,
                "outputTokens": 59,
                "cacheReadTokens": 1300,
                "cacheWriteTokens": 0,
                "reasoningTokens": 12,
            },
        }
    },
    "currentModel": "model-x",
}
COPILOT_FAILED = [
    _cp("user.message", {"content": "Create done.txt"}),
    _cp(
        "assistant.message", {"messageId": "m1", "model": "model-x", "content": "I cannot do that.", "toolRequests": []}
    ),
    {"type": "result", "timestamp": "2026-01-01T00:00:01.000Z", "sessionId": "s1", "exitCode": 1, "usage": {}},
]

# --- gptme (--output-format json: one conversation message per line) ------------------------------------------


def _gp(role: str, content: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "message", "role": role, "content": content, "timestamp": "2026-01-01T00:00:00"}
    return message | ({"metadata": metadata} if metadata is not None else {})


GPTME_NORMAL = [
    _gp("user", "Create done.txt"),
    _gp(
        "assistant",
        '\n@shell(call_1): {"command": "touch done.txt"}',
        {
            "model": "local/model-x",
            "served_model": "model-x",
            "usage": {"input_tokens": 700, "output_tokens": 50, "cache_read_tokens": 300, "reasoning_tokens": 10},
        },
    ),
    _gp("system", "Ran command: `touch done.txt`\n\nNo output\n", {"tool": "shell"}),
    _gp(
        "assistant",
        "\n@complete(call_2): {}",
        {
            "model": "local/model-x",
            "served_model": "model-x",
            "usage": {"input_tokens": 300, "output_tokens": 9, "cache_read_tokens": 1000, "cache_creation_tokens": 20},
            "cost": 0.0042,
        },
    ),
    _gp("system", "Task complete. Autonomous session finished.", {"tool": "complete"}),
]
GPTME_FAILED = [
    _gp("user", "Create done.txt"),
    _gp(
        "assistant",
        "I could not finish.",
        {"model": "local/model-x", "usage": {"input_tokens": 100, "output_tokens": 5}},
    ),
]

# --- droid (exec -o stream-json) -------------------------------------------------------------------------------

_DROID_SESSION = {"session_id": "d1", "timestamp": 1_700_000_000_000}
DROID_NORMAL = [
    {"type": "system", "subtype": "init", "cwd": "/w", "model": "custom:model-x", "tools": ["Execute", "Create"]}
    | _DROID_SESSION,
    {"type": "message", "role": "user", "id": "u1", "text": "Create done.txt"} | _DROID_SESSION,
    {"type": "tool_call", "id": "c1", "toolId": "Execute", "toolName": "Execute", "parameters": {"command": "ls"}}
    | _DROID_SESSION,
    {"type": "tool_result", "id": "c1", "toolId": "Execute", "isError": False, "value": "ok"} | _DROID_SESSION,
    {"type": "tool_call", "id": "c2", "toolId": "Create", "toolName": "Create", "parameters": {}} | _DROID_SESSION,
    {"type": "tool_result", "id": "c2", "toolId": "Create", "isError": False, "value": "ok"} | _DROID_SESSION,
    {"type": "message", "role": "assistant", "id": "a1", "text": "Created done.txt"} | _DROID_SESSION,
    {
        "type": "completion",
        "finalText": "Created done.txt",
        "numTurns": 3,
        "durationMs": 900,
        "usage": {
            "input_tokens": 1000,
            "output_tokens": 59,
            "cache_read_input_tokens": 1300,
            "cache_creation_input_tokens": 40,
            "factory_credits": 0,
        },
    }
    | _DROID_SESSION,
]
DROID_FAILED = [
    {"type": "system", "subtype": "init", "cwd": "/w", "model": "custom:model-x"} | _DROID_SESSION,
    {"type": "message", "role": "user", "id": "u1", "text": "Create done.txt"} | _DROID_SESSION,
    {"type": "error", "source": "cli", "message": "Exec failed"} | _DROID_SESSION,
]


# --- grok-cli (the conversation as OpenAI-style messages, one per line) ----------------------------------------------

_GROK_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "bash", "arguments": '{"command": "touch done.txt"}'},
}
GROK_NORMAL = [
    {"role": "user", "content": "Create done.txt"},
    {"role": "assistant", "content": "", "tool_calls": [_GROK_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Command executed successfully"},
    {"role": "assistant", "content": "Created done.txt."},
]
GROK_FAILED = [
    {"role": "user", "content": "Create done.txt"},
    {"role": "assistant", "content": "Sorry, I encountered an error: the tool loop ended early"},
]
