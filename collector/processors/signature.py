"""The failure cause of an errored span: its part of a run's failure signature (ADR 34).

A pure function of the span alone (so it is the same whichever batch carried the span, and
for each of its deliveries): the span's type, what failed in it (the tool, guardrail or
handoff target), the canonical error type, and the *shape* of the cause, never its values:

- arguments a tool's schema rejected, when the error carries the validation report
  (pydantic's, which the Agents SDK includes unless it hides tool data): one
  ``/pointer: <class> where <expected>`` per failed field, e.g. ``/amount: string where number``;
- arguments rejected without a report (the SDK's default): the JSON classes of the
  arguments' top-level fields, ``rejected {amount: string, order_id: string}``;
- any other error message: its text with every value masked (quoted strings and every token
  holding a digit become ``<v>``, except a three-digit code such as an HTTP status).

What needs the rest of the run (the agent that ran the span, the path of agents before it) is
derived in the store's run summary from per-span columns (``schema.py``), so the signature
never depends on batching either.

``failure_causes`` is the ingest processor (after normalization, before truncation: it reads
the canonical fields and the whole arguments). ``AFR_FAILURE_SIGNATURES=false`` leaves it out
of the pipeline: spans then carry no cause, their runs no signature, and they never cluster.
"""

from __future__ import annotations

import json
import re
from typing import Any

from afr_exporter.semconv import (
    AFR_ERROR_DATA,
    AFR_GUARDRAIL_NAME,
    AFR_HANDOFF_TO,
)
from collector.model import SpanRecord

__all__ = ["CAUSE_CHARS", "cause_shape", "failure_cause", "failure_causes", "masked_message"]

CAUSE_CHARS = 200
"""The longest cause shape kept: a signature names a failure, it does not archive it."""

_INVALID_ARGUMENTS = "Invalid JSON input for tool"
_CAUSE_JSON = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(cause, separators=(",", ":"))``, without building an encoder per span."""
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_VALUE_TOKEN = re.compile(r"[\w.:/+#@-]*\d[\w.:/+#@-]*")
_CODE = re.compile(r"\d{3}")
_SPACES = re.compile(r"\s+")
# One failed field of a pydantic ValidationError's text: its location line, then the message
# with [type=..., input_value=..., input_type=...].
_PYDANTIC_ERROR = re.compile(
    r"^(?P<loc>[^\s\[][^\n]*)\n\s+[^\n]*?\[type=(?P<type>\w+)[^\n]*?"
    r"(?:input_type=(?P<input_type>\w+))?\]",
    re.MULTILINE,
)
_PYTHON_CLASSES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "Decimal": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
    "tuple": "array",
    "NoneType": "null",
}
# pydantic error types by prefix -> the JSON class the field expected.
_EXPECTED = (
    ("int_", "integer"),
    ("float_", "number"),
    ("decimal_", "number"),
    ("bool_", "boolean"),
    ("string_", "string"),
    ("datetime_", "datetime"),
    ("date_", "date"),
    ("time_", "time"),
    ("uuid_", "uuid"),
    ("list_", "array"),
    ("dict_", "object"),
    ("model_", "object"),
    ("literal_", "one of its values"),
    ("enum", "one of its values"),
    ("url_", "url"),
)


def _json_class(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def masked_message(text: str) -> str:
    """``text`` with its values masked: what stays is the sentence, not the data."""
    text = _QUOTED.sub("<v>", text)
    text = _VALUE_TOKEN.sub(lambda m: m.group() if _CODE.fullmatch(m.group()) else "<v>", text)
    return _SPACES.sub(" ", text).strip()[:CAUSE_CHARS]


def _pointer(location: str) -> str:
    parts = [p.strip() for p in location.strip().split(".") if p.strip()]
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _validation_shape(text: str) -> str | None:
    fields = []
    for match in _PYDANTIC_ERROR.finditer(text):
        error_type = match["type"]
        pointer = _pointer(match["loc"])
        if error_type == "missing":
            fields.append(f"{pointer}: missing")
            continue
        expected = next((c for p, c in _EXPECTED if error_type.startswith(p)), error_type)
        got = _PYTHON_CLASSES.get(match["input_type"] or "", match["input_type"] or "value")
        fields.append(f"{pointer}: {got} where {expected}")
    return "; ".join(sorted(set(fields))) or None


def _arguments_shape(arguments: str) -> str:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return "arguments not JSON"
    if not isinstance(parsed, dict):
        return f"arguments {_json_class(parsed)}"
    fields = ", ".join(f"{key}: {_json_class(parsed[key])}" for key in sorted(parsed))
    return "rejected {" + fields + "}"


def cause_shape(error_type: str, message: str, arguments: str) -> str:
    """The shape of a failure's cause from its error type, its message and (for a tool) the
    arguments it was called with."""
    if message.startswith(error_type):
        message = message[len(error_type) :].lstrip(": ")
    if message.startswith(_INVALID_ARGUMENTS) or error_type.startswith(_INVALID_ARGUMENTS):
        return (_validation_shape(message) or _arguments_shape(arguments))[:CAUSE_CHARS]
    return masked_message(message)


def _error_data(record: SpanRecord) -> dict[str, Any]:
    raw = record.span_attributes.get(AFR_ERROR_DATA) or record.body_attributes.get(AFR_ERROR_DATA)
    try:
        data = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _message(record: SpanRecord, data: dict[str, Any]) -> str:
    if isinstance(data.get("error"), str):
        return str(data["error"])
    for name, attributes in zip(record.event_names, record.event_attributes, strict=False):
        if name == "exception" and attributes.get("exception.message"):
            return attributes["exception.message"]
    return record.status_message


def _subject(record: SpanRecord, data: dict[str, Any]) -> str:
    attrs = record.span_attributes
    if record.span_type == "tool" and record.tool_name:
        return f"tool:{record.tool_name}"
    if record.span_type == "guardrail":
        return f"guardrail:{attrs.get(AFR_GUARDRAIL_NAME) or record.span_name}"
    if record.span_type == "handoff":
        return f"handoff:{attrs.get(AFR_HANDOFF_TO, '')}"
    # An agent or turn span names what failed in it (the SDK's error data).
    for key, kind in (("tool_name", "tool"), ("guardrail", "guardrail")):
        if isinstance(data.get(key), str) and data[key]:
            return f"{kind}:{data[key]}"
    return ""


def failure_cause(record: SpanRecord) -> str:
    """The span's failure cause as a JSON array ``[span type, subject, error type, shape]``,
    or ``""`` for a span that did not fail. Run after normalization (it reads the canonical
    fields)."""
    if record.status_code != "Error":
        return ""
    data = _error_data(record)
    shape = cause_shape(record.error_type, _message(record, data), record.input)
    cause = [record.span_type, _subject(record, data), record.error_type, shape]
    # ASCII escapes: a lone surrogate in parsed error data can never reach a row.
    return _CAUSE_JSON.encode(cause)


def failure_causes(records: list[SpanRecord]) -> list[SpanRecord]:
    """The ingest processor: every span's failure cause (``""`` for a span that did not fail)."""
    for record in records:
        record.failure_cause = failure_cause(record)
    return records
