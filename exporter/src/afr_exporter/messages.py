"""Pure conversions of SDK model inputs and outputs to the GenAI message format.

The target is the OTel GenAI JSON shape: ``{"role", "parts": [...]}`` with ``text``,
``tool_call`` (``id``, ``name``, ``arguments``) and ``tool_call_response`` (``id``,
``response``) parts. Tool arguments stay the exact string the model produced (a replay needs
the malformed ``"12.OO"`` byte for byte). Anything without a standard part keeps its
original fields under its own ``type``, so nothing the SDK recorded is lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ToolCall",
    "chat_input",
    "chat_output",
    "responses_input",
    "responses_output",
    "tool_calls_in_chat_output",
    "tool_calls_in_responses_output",
]

Message = dict[str, Any]
Part = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call a model made: what a later ``function`` span is matched against."""

    call_id: str
    name: str
    arguments: str


def as_plain(value: Any) -> Any:
    """A JSON-ready copy of an SDK or openai object (pydantic models, mappings, lists)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): as_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_plain(v) for v in value]
    return value


def _text_parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[Part] = []
    for item in content if isinstance(content, list) else [content]:
        plain = as_plain(item)
        if not isinstance(plain, dict):
            parts.append({"type": "text", "content": str(plain)})
            continue
        kind = plain.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "content": plain.get("text", "")})
        elif kind == "refusal":
            parts.append({"type": "refusal", "content": plain.get("refusal", "")})
        else:
            parts.append(plain)
    return parts


def responses_input(items: str | Iterable[Any] | None) -> list[Message]:
    """Responses API input items -> GenAI input messages."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "parts": [{"type": "text", "content": items}]}]
    messages: list[Message] = []
    for raw in items:
        item = as_plain(raw)
        if not isinstance(item, dict):
            messages.append({"role": "user", "parts": [{"type": "text", "content": str(item)}]})
            continue
        kind = item.get("type", "message")
        if kind == "function_call":
            part = {
                "type": "tool_call",
                "id": item.get("call_id"),
                "name": item.get("name"),
                "arguments": item.get("arguments"),
            }
            messages.append({"role": "assistant", "parts": [part]})
        elif kind == "function_call_output":
            part = {
                "type": "tool_call_response",
                "id": item.get("call_id"),
                "response": item.get("output"),
            }
            messages.append({"role": "tool", "parts": [part]})
        elif kind == "message" and "role" in item:
            messages.append({"role": item["role"], "parts": _text_parts(item.get("content"))})
        else:
            messages.append({"role": "assistant", "parts": [item]})
    return messages


def responses_output(output: Sequence[Any], finish_reason: str) -> list[Message]:
    """The ``output`` items of a Responses ``Response`` -> one GenAI output message."""
    parts: list[Part] = []
    for raw in output:
        item = as_plain(raw)
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            parts.extend(_text_parts(item.get("content")))
        elif kind == "function_call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
        elif isinstance(item, dict):
            parts.append(item)
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason}]


def tool_calls_in_responses_output(output: Sequence[Any]) -> list[ToolCall]:
    calls = []
    for item in output:
        if getattr(item, "type", None) == "function_call":
            calls.append(ToolCall(str(item.call_id), str(item.name), str(item.arguments)))
    return calls


def _chat_message(message: Mapping[str, Any]) -> Message:
    role = str(message.get("role", "user"))
    if role == "tool":
        part = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": message.get("content"),
        }
        return {"role": "tool", "parts": [part]}
    parts = _text_parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def chat_input(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[Message]]:
    """Chat Completions messages -> (system instructions, GenAI input messages).

    The first system (or developer) message is the agent's instructions; later ones stay in
    the conversation where they were.
    """
    instructions: str | None = None
    converted: list[Message] = []
    for message in messages:
        if instructions is None and message.get("role") in ("system", "developer"):
            content = message.get("content")
            if isinstance(content, str):
                instructions = content
                continue
        converted.append(_chat_message(message))
    return instructions, converted


def chat_output(output: Sequence[Mapping[str, Any]]) -> list[Message]:
    messages = []
    for message in output:
        converted = _chat_message(message)
        has_calls = any(part.get("type") == "tool_call" for part in converted["parts"])
        converted["finish_reason"] = "tool_calls" if has_calls else "stop"
        messages.append(converted)
    return messages


def tool_calls_in_chat_output(output: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    calls = []
    for message in output:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            calls.append(
                ToolCall(
                    str(call.get("id")), str(function.get("name")), str(function.get("arguments"))
                )
            )
    return calls
