"""What a model call showed the model and what the model answered, read from the four wire formats the gateway
speaks, as one neutral shape (``Item``); used only when a run records trajectories (``recorder.py``).

A request carries the whole conversation so far (system prompt, user messages, the model's earlier answers, tool
results); an answer carries text, reasoning and tool calls, whole (JSON) or as a stream of events. Everything an
agent sends is hostile input: every field is checked for its type, and what is not understood is left out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from worktrial.gateway.wire import Wire

ItemKind = Literal["system", "user", "assistant", "tool_call", "tool_result"]


@dataclass(frozen=True)
class Item:
    """One piece of a conversation: a message's text, a tool call, or a tool's result."""

    kind: ItemKind
    text: str = ""
    call_id: str | None = None
    name: str | None = None
    arguments: dict[str, Any] | None = None
    is_error: bool = False

    def key(self) -> str:
        """The item's identity across requests, whatever the agent re-serialised (whitespace, JSON key order,
        cache markers): the same answer echoed in the next request has the same key. A tool call is known by its
        name and arguments, not its id: Gemini's answers carry none, and Gemini CLI adds one of its own when it
        echoes them (the same call made twice counts twice, see ``Recorder``)."""
        args = json.dumps(self.arguments, sort_keys=True, default=str) if self.arguments is not None else ""
        call = self.call_id if self.call_id is not None and self.kind != "tool_call" else ""
        text = "".join(self.text.split())  # whitespace left out (str.split: many times faster than a regex)
        raw = "\0".join((self.kind, call, self.name or "", args, text))
        return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass
class Prompt:
    """What one request showed the model."""

    system: str
    items: list[Item]


@dataclass
class Answer:
    """What the model answered in one call."""

    text: str = ""
    reasoning: str = ""
    calls: list[Item] = field(default_factory=list)

    def items(self) -> list[Item]:
        head = [Item("assistant", self.text)] if self.text else []
        return head + self.calls


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _json_args(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: parsed from a JSON string, or kept raw under ``input`` when they are not
    a JSON object."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return {"input": raw}
        return value if isinstance(value, dict) else {"input": value}
    return {} if raw is None else {"input": raw}


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts (text kept, images named, the rest left out)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in _list(content):
        if isinstance(part, str):
            parts.append(part)
            continue
        part = _dict(part)
        kind = _str(part.get("type"))
        if isinstance(part.get("text"), str) and kind not in ("thinking", "redacted_thinking", "reasoning"):
            parts.append(part["text"])
        elif kind in ("image", "image_url", "input_image") or "inlineData" in part:
            parts.append("[image]")
        elif kind in ("input_file", "document", "file"):
            parts.append("[file]")
    return "\n".join(p for p in parts if p)


def _content_result(value: Any) -> str:
    """A tool result's content as text (Gemini's ``response`` objects as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _text_of(value)
    if isinstance(value, dict):
        for key in ("output", "content", "result"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return json.dumps(value, ensure_ascii=False, default=str) if value is not None else ""


# -- requests ---------------------------------------------------------------------------------------------------


def read_prompt(wire: Wire, body: bytes) -> Prompt | None:
    """The conversation a request shows the model, or None when its body is not a JSON object."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if wire == "chat":
        return _chat_prompt(data)
    if wire == "responses":
        return _responses_prompt(data)
    if wire == "messages":
        return _messages_prompt(data)
    return _gemini_prompt(data)


def _chat_prompt(data: dict[str, Any]) -> Prompt:
    system: list[str] = []
    items: list[Item] = []
    for message in _list(data.get("messages")):
        message = _dict(message)
        role = _str(message.get("role"))
        text = _text_of(message.get("content"))
        if role in ("system", "developer"):
            if items:
                items.append(Item("system", text))
            else:
                system.append(text)
        elif role == "user":
            items.append(Item("user", text))
        elif role == "assistant":
            if text:
                items.append(Item("assistant", text))
            for call in _list(message.get("tool_calls")):
                call = _dict(call)
                function = _dict(call.get("function"))
                items.append(
                    Item(
                        "tool_call",
                        call_id=_str(call.get("id")) or None,
                        name=_str(function.get("name")),
                        arguments=_json_args(function.get("arguments")),
                    )
                )
        elif role in ("tool", "function"):
            items.append(
                Item(
                    "tool_result",
                    text,
                    call_id=_str(message.get("tool_call_id")) or None,
                    name=_str(message.get("name")) or None,
                )
            )
    return Prompt("\n\n".join(s for s in system if s), items)


def _responses_prompt(data: dict[str, Any]) -> Prompt:
    items: list[Item] = []
    raw = data.get("input")
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    for entry in _list(raw):
        entry = _dict(entry)
        kind = _str(entry.get("type")) or "message"
        if kind == "message":
            role = _str(entry.get("role"))
            text = _text_of(entry.get("content"))
            items.append(Item("assistant" if role == "assistant" else "system" if role != "user" else "user", text))
        elif kind.endswith("_call_output"):
            items.append(Item("tool_result", _content_result(entry.get("output")), call_id=_call_id(entry)))
        elif kind.endswith("_call"):
            items.append(
                Item("tool_call", call_id=_call_id(entry), name=_call_name(entry), arguments=_call_args(entry))
            )
    return Prompt(_str(data.get("instructions")), items)


def _call_id(entry: dict[str, Any]) -> str | None:
    return _str(entry.get("call_id")) or _str(entry.get("id")) or None


def _call_name(entry: dict[str, Any]) -> str:
    return _str(entry.get("name")) or _str(entry.get("type")).removesuffix("_call") or "tool"


def _call_args(entry: dict[str, Any]) -> dict[str, Any]:
    if "arguments" in entry:
        return _json_args(entry["arguments"])
    if "input" in entry:
        return _json_args(entry["input"])
    if isinstance(entry.get("action"), dict):
        return dict(entry["action"])
    return {}


def _messages_prompt(data: dict[str, Any]) -> Prompt:
    items: list[Item] = []
    for message in _list(data.get("messages")):
        message = _dict(message)
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)
        items += _anthropic_blocks("assistant" if _str(message.get("role")) == "assistant" else "user", blocks)
    return Prompt(_text_of(data.get("system")), items)


def _anthropic_blocks(role: Literal["assistant", "user"], blocks: list[Any]) -> list[Item]:
    """One Messages message's blocks: consecutive text blocks as one item, each tool use or result as its own."""
    items: list[Item] = []
    texts: list[str] = []
    for block in blocks:
        block = _dict(block)
        kind = _str(block.get("type"))
        if kind == "text":
            texts.append(_str(block.get("text")))
            continue
        if kind in ("image", "document"):
            texts.append(f"[{kind}]")
            continue
        if kind not in ("tool_use", "server_tool_use", "tool_result"):
            continue
        if texts:
            items.append(Item(role, "\n".join(texts)))
            texts = []
        if kind == "tool_result":
            content = _content_result(block.get("content"))
            call_id = _str(block.get("tool_use_id")) or None
            items.append(Item("tool_result", content, call_id=call_id, is_error=block.get("is_error") is True))
        else:
            arguments = _json_args(block.get("input"))
            items.append(
                Item(
                    "tool_call",
                    call_id=_str(block.get("id")) or None,
                    name=_str(block.get("name")),
                    arguments=arguments,
                )
            )
    if texts:
        items.append(Item(role, "\n".join(texts)))
    return items


def _gemini_prompt(data: dict[str, Any]) -> Prompt:
    instruction = data.get("systemInstruction", data.get("system_instruction"))
    system = _text_of(_dict(instruction).get("parts")) if isinstance(instruction, dict) else _text_of(instruction)
    items: list[Item] = []
    for message in _list(data.get("contents")):
        message = _dict(message)
        role = "assistant" if _str(message.get("role")) == "model" else "user"
        texts: list[str] = []
        for part in _list(message.get("parts")):
            part = _dict(part)
            if isinstance(part.get("text"), str) and part.get("thought") is not True:
                texts.append(part["text"])
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                items.append(
                    Item(
                        "tool_call",
                        call_id=_str(call.get("id")) or None,
                        name=_str(call.get("name")),
                        arguments=_json_args(call.get("args")),
                    )
                )
            elif isinstance(part.get("functionResponse"), dict):
                response = part["functionResponse"]
                items.append(
                    Item(
                        "tool_result",
                        _content_result(response.get("response")),
                        call_id=_str(response.get("id")) or None,
                        name=_str(response.get("name")) or None,
                    )
                )
        if texts:
            items.append(Item("assistant" if role == "assistant" else "user", "".join(texts)))
    return Prompt(system, items)


# -- answers ----------------------------------------------------------------------------------------------------


class AnswerReader:
    """Reads one answer's JSON body or stream events (as ``wire.Exchange`` hands them on) into an ``Answer``."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        """Tool calls by their index in the answer, as their parts arrive."""
        self._blocks: dict[int, dict[str, Any]] = {}
        """Anthropic content blocks by index, as they stream."""
        self._final: Answer | None = None
        self._items: list[Any] = []
        """Responses output items as their done events arrive (a stream cut before its completed event)."""

    def event(self, event: Any) -> None:
        if not isinstance(event, dict) or self._final is not None:
            return
        if self.wire == "chat":
            self._chat(event)
        elif self.wire == "responses":
            self._responses(event)
        elif self.wire == "messages":
            self._messages(event)
        else:
            self._gemini(event)

    def answer(self) -> Answer:
        if self._final is not None:
            return self._final
        if self._items:
            return self._responses_output(self._items)
        calls = [
            Item(
                "tool_call",
                call_id=c.get("id") or None,
                name=c.get("name", ""),
                arguments=_json_args(c["args"]) if "args" in c else _json_args("".join(c.get("parts", []))),
            )
            for _, c in sorted(self._calls.items())
        ]
        return Answer("".join(self._text), "".join(self._reasoning), calls)

    def _call(self, index: int) -> dict[str, Any]:
        return self._calls.setdefault(index, {"parts": []})

    def _chat(self, event: dict[str, Any]) -> None:
        choices = _list(event.get("choices"))
        first = _dict(choices[0]) if choices else {}
        message = _dict(first.get("message")) if "message" in first else _dict(first.get("delta"))
        self._text.append(_text_of(message.get("content")))
        self._reasoning.append(_str(message.get("reasoning_content")) or _str(message.get("reasoning")))
        for position, call in enumerate(_list(message.get("tool_calls"))):
            call = _dict(call)
            index = call.get("index")
            slot = self._call(index if isinstance(index, int) else position)
            function = _dict(call.get("function"))
            if _str(call.get("id")):
                slot["id"] = call["id"]
            if _str(function.get("name")) and not slot.get("name"):
                slot["name"] = function["name"]
            slot["parts"].append(_str(function.get("arguments")))

    def _responses(self, event: dict[str, Any]) -> None:
        kind = _str(event.get("type"))
        if kind in ("response.completed", "response.incomplete", "response.failed") or "output" in event:
            output = _list(_dict(event.get("response")).get("output")) if "response" in event else event["output"]
            if output:
                self._final = self._responses_output(output)
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self._items.append(event["item"])

    def _responses_output(self, output: list[Any]) -> Answer:
        answer = Answer()
        texts: list[str] = []
        for item in output:
            item = _dict(item)
            kind = _str(item.get("type"))
            if kind == "message":
                texts.append(_text_of(item.get("content")))
            elif kind == "reasoning":
                answer.reasoning += "\n".join(_str(_dict(s).get("text")) for s in _list(item.get("summary")))
            elif kind.endswith("_call"):
                answer.calls.append(
                    Item("tool_call", call_id=_call_id(item), name=_call_name(item), arguments=_call_args(item))
                )
        answer.text = "\n".join(t for t in texts if t)
        return answer

    def _messages(self, event: dict[str, Any]) -> None:
        kind = _str(event.get("type"))
        if kind == "message":  # a whole answer
            for index, block in enumerate(_list(event.get("content"))):
                self._block(index, _dict(block), whole=True)
        elif kind == "content_block_start":
            at = event.get("index")
            if isinstance(at, int):
                self._block(at, _dict(event.get("content_block")), whole=False)
        elif kind == "content_block_delta":
            at = event.get("index")
            delta = _dict(event.get("delta"))
            block = self._blocks.get(at) if isinstance(at, int) else None
            if block is None:
                return
            if _str(delta.get("type")) == "text_delta":
                block["text"] += _str(delta.get("text"))
            elif _str(delta.get("type")) == "thinking_delta":
                block["thinking"] += _str(delta.get("thinking"))
            elif _str(delta.get("type")) == "input_json_delta":
                block["parts"].append(_str(delta.get("partial_json")))
        else:
            return
        self._text = ["\n".join(b["text"] for _, b in sorted(self._blocks.items()) if b["kind"] == "text")]
        self._reasoning = ["\n".join(b["thinking"] for _, b in sorted(self._blocks.items()) if b["kind"] == "thinking")]
        self._calls = {
            i: {"id": b["id"], "name": b["name"], **({"args": b["input"]} if b["input"] else {}), "parts": b["parts"]}
            for i, b in self._blocks.items()
            if b["kind"] == "tool_use"
        }

    def _block(self, index: int, block: dict[str, Any], *, whole: bool) -> None:
        kind = _str(block.get("type"))
        kind = "tool_use" if kind == "server_tool_use" else kind
        if kind not in ("text", "thinking", "tool_use"):
            return
        self._blocks[index] = {
            "kind": kind,
            "text": _str(block.get("text")),
            "thinking": _str(block.get("thinking")),
            "id": _str(block.get("id")),
            "name": _str(block.get("name")),
            "input": _dict(block.get("input")) if whole or block.get("input") else {},
            "parts": [],
        }

    def _gemini(self, event: dict[str, Any]) -> None:
        candidates = _list(event.get("candidates"))
        content = _dict(_dict(candidates[0]).get("content")) if candidates else {}
        for part in _list(content.get("parts")):
            part = _dict(part)
            if isinstance(part.get("text"), str):
                (self._reasoning if part.get("thought") is True else self._text).append(part["text"])
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                self._calls[len(self._calls)] = {
                    "id": _str(call.get("id")),
                    "name": _str(call.get("name")),
                    "args": call.get("args") if isinstance(call.get("args"), dict) else {},
                }
