"""GenAI content sent as log records, put where a span's own content would be (ADR 40).

The GenAI conventions moved message content off spans: into a
``gen_ai.client.inference.operation.details`` event (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions`` as its attributes or its body)
and, before that, one event per message (``gen_ai.system.message``, ``gen_ai.user.message``,
``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice``). An instrumentation
that sends them so leaves its model-call spans without bodies. At read time (the run view),
``attach_log_content`` gives a model-call span without an input (or output) the one its log
records carry, in the conventions' message shape, so the run reads, diffs and replays as one
captured with content on its spans. Pure: spans and log rows in, spans changed in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from collector.model import SpanRecord

__all__ = ["CONTENT_EVENTS", "attach_event_content", "attach_log_content", "chat_messages"]

OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_CHOICE = "gen_ai.choice"
_PROMPT = "gen_ai.content.prompt"
_COMPLETION = "gen_ai.content.completion"
"""Semantic conventions up to 1.26: the whole prompt and completion as span events
(``gen_ai.prompt`` / ``gen_ai.completion`` attributes, chat-format JSON)."""
CONTENT_EVENTS = frozenset({OPERATION_DETAILS, _CHOICE, _PROMPT, _COMPLETION, *_ROLE_EVENTS})
_INPUT = "gen_ai.input.messages"
_OUTPUT = "gen_ai.output.messages"
_SYSTEM = "gen_ai.system_instructions"


def _json(text: str) -> Any:
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A per-message event's body (``content``, ``tool_calls``, ``id``) as message parts."""
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        parts.extend(p for p in content if isinstance(p, dict))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        inner = call.get("function")
        function: Mapping[str, Any] = inner if isinstance(inner, dict) else call
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            arguments = _json(arguments) if _json(arguments) is not None else arguments
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": arguments,
            }
        )
    return parts


def _tool_result(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A tool message's part: ``result`` as the current conventions name it."""
    return {
        "type": "tool_call_response",
        "id": fields.get("id") or fields.get("tool_call_id"),
        "result": fields.get("content"),
    }


def chat_messages(messages: list[Any]) -> list[dict[str, Any]] | None:
    """Chat-format messages (``{"role", "content", "tool_calls", "tool_call_id"}``, what the
    earlier conventions recorded) in the current conventions' shape (``role`` and
    ``parts``); None unless every item is such a message. Messages already in the current
    shape are kept as they are."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        if isinstance(message.get("parts"), list):
            out.append(message)
        elif message["role"] == "tool":
            out.append({"role": "tool", "parts": [_tool_result(message)]})
        else:
            out.append({"role": message["role"], "parts": _parts(message)})
    return out


def _event(row: Mapping[str, Any]) -> str:
    attributes = row.get("attributes") or {}
    return str(row.get("event_name") or attributes.get("event.name") or "")


def _content(rows: Iterable[Mapping[str, Any]]) -> tuple[Any, Any, Any]:
    """(input messages, output messages, system instructions) the records of one span
    carry, or None for each they do not."""
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    given_input = given_output = system = None
    for row in rows:
        event = _event(row)
        attributes: Mapping[str, str] = row.get("attributes") or {}
        body = _json(str(row.get("body") or ""))
        fields: Mapping[str, Any] = body if isinstance(body, dict) else {}
        if event == OPERATION_DETAILS or _INPUT in attributes or _OUTPUT in attributes:
            for key, target in ((_INPUT, "in"), (_OUTPUT, "out"), (_SYSTEM, "sys")):
                raw = attributes.get(key)
                value = _json(raw) if raw is not None else fields.get(key)
                if value is None and isinstance(raw, str) and raw:
                    value = raw
                if value is None:
                    continue
                if target == "in":
                    given_input = value
                elif target == "out":
                    given_output = value
                else:
                    system = value
        elif event in _ROLE_EVENTS:
            role = str(fields.get("role") or _ROLE_EVENTS[event])
            message: dict[str, Any] = {"role": role, "parts": _parts(fields)}
            if role == "tool":
                message["parts"] = [_tool_result(fields)]
            inputs.append(message)
        elif event in (_PROMPT, _COMPLETION):
            raw = attributes.get("gen_ai.prompt" if event == _PROMPT else "gen_ai.completion")
            parsed = _json(raw) if raw else None
            converted = chat_messages(parsed) if isinstance(parsed, list) else None
            if converted is None and raw:
                role = "user" if event == _PROMPT else "assistant"
                converted = [{"role": role, "parts": [{"type": "text", "content": raw}]}]
            (inputs if event == _PROMPT else outputs).extend(converted or [])
        elif event == _CHOICE:
            inner = fields.get("message")
            choice: Mapping[str, Any] = inner if isinstance(inner, dict) else fields
            outputs.append(
                {
                    "role": str(choice.get("role") or "assistant"),
                    "parts": _parts(choice),
                    **(
                        {"finish_reason": fields["finish_reason"]}
                        if "finish_reason" in fields
                        else {}
                    ),
                }
            )
    return (
        given_input if given_input is not None else (inputs or None),
        given_output if given_output is not None else (outputs or None),
        system,
    )


def _fields(attributes: Mapping[str, str]) -> dict[str, Any]:
    """A span event's attributes as the fields a log record's body would hold (values that
    are JSON text parsed: ``tool_calls``, ``message``)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        parsed = _json(value) if key != "content" else None
        out[key] = parsed if parsed is not None else value
    return out


def attach_event_content(record: SpanRecord) -> bool:
    """The earlier conventions' content span events (per message, or the whole prompt and
    completion) as the model-call span's input and output when its attributes had none
    (the ingest normalizer calls it); True when it filled either."""
    if record.input and record.output:
        return False
    rows = [
        {
            "event_name": name,
            "attributes": attributes,
            "body": _dumps(_fields(attributes)),
        }
        for name, attributes in zip(record.event_names, record.event_attributes, strict=False)
        if name in CONTENT_EVENTS
    ]
    if not rows:
        return False
    given_input, given_output, _ = _content(rows)
    filled = False
    if not record.input and given_input is not None:
        record.input = given_input if isinstance(given_input, str) else _dumps(given_input)
        filled = True
    if not record.output and given_output is not None:
        record.output = given_output if isinstance(given_output, str) else _dumps(given_output)
        filled = True
    return filled


def attach_log_content(records: list[SpanRecord], logs: Sequence[Mapping[str, Any]]) -> set[str]:
    """Fills the input and output of each model-call span that has none from its log
    records (the system instructions too, as ``gen_ai.system_instructions``, when the span
    has none); returns the ids of the spans it filled."""
    by_span: dict[str, list[Mapping[str, Any]]] = {}
    for row in logs:
        span_id = str(row.get("span_id") or "")
        if span_id:
            by_span.setdefault(span_id, []).append(row)
    filled: set[str] = set()
    for record in records:
        rows = by_span.get(record.span_id)
        if not rows or record.span_type != "llm" or (record.input and record.output):
            continue
        given_input, given_output, system = _content(rows)
        if not record.input and given_input is not None:
            record.input = given_input if isinstance(given_input, str) else _dumps(given_input)
            filled.add(record.span_id)
        if not record.output and given_output is not None:
            record.output = given_output if isinstance(given_output, str) else _dumps(given_output)
            filled.add(record.span_id)
        if system is not None and _SYSTEM not in record.span_attributes:
            record.span_attributes[_SYSTEM] = system if isinstance(system, str) else _dumps(system)
            filled.add(record.span_id)
    return filled
