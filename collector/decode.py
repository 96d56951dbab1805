"""OTLP request bytes -> SpanRecords, with OTLP's per-span rejection rules.

Protobuf is parsed by the upb-backed ``protobuf`` runtime. OTLP/JSON differs from
protobuf's canonical JSON in one way that matters: trace and span ids are hex, not base64,
so ids are rewritten before parsing. A span whose ids are malformed is rejected on its own
(``partial_success``); the rest of the request is kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.errors import InvalidRequest
from collector.model import SpanRecord

__all__ = [
    "MAX_TIME_NS",
    "MIN_TIME_NS",
    "PARSE_ERRORS",
    "DecodeResult",
    "attributes_of",
    "bytes_text",
    "decode_json",
    "decode_protobuf",
    "hex_ids_to_base64",
    "load_json_document",
    "protobuf_json_document",
    "to_records",
    "value_to_str",
]

_SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
_STATUS_CODES = ("Unset", "Ok", "Error")
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


@dataclass
class DecodeResult:
    records: list[SpanRecord]
    rejected: int
    error_message: str


def decode_protobuf(raw: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        raise InvalidRequest(f"body is not an OTLP ExportTraceServiceRequest: {exc}") from None
    return request


def _hex_ids_to_base64(node: Any) -> None:
    if isinstance(node, dict):
        for key in _ID_KEYS:
            value = node.get(key)
            if isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    node[key] = "AA=="  # one byte: the span is rejected on its own below
        for child in node.values():
            if isinstance(child, dict | list):
                _hex_ids_to_base64(child)
    elif isinstance(node, list):
        for child in node:
            _hex_ids_to_base64(child)


_PARSE_FIELD = re.compile(r"Failed to parse (\w+) field")


def load_json_document(raw: bytes) -> dict[str, Any]:
    """An OTLP/JSON body as a JSON object; every fault an InvalidRequest that never quotes
    the content (traces and logs alike)."""
    try:
        document = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"body is not UTF-8: invalid byte at position {exc.start}") from None
    except json.JSONDecodeError as exc:
        # The decoder's own message names the problem and position, never the content.
        raise InvalidRequest(f"body is not JSON: {exc.msg} (position {exc.pos})") from None
    except ValueError:
        # Python's cap on integer digits (4300): a number no OTLP field can hold.
        raise InvalidRequest("body is not OTLP/JSON: a number too long to read") from None
    except RecursionError:
        raise InvalidRequest("body is not OTLP/JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise InvalidRequest("body is not an OTLP/JSON object")
    return document


PARSE_ERRORS: tuple[type[Exception], ...] = (
    json_format.ParseError,
    binascii.Error,
    ValueError,
    TypeError,
    RecursionError,
    SystemError,  # protobuf's JSON parser on a lone surrogate in a key
)
"""What protobuf's JSON parser raises on an OTLP/JSON document of the wrong form."""


def protobuf_json_document(raw: bytes) -> dict[str, Any]:
    """An OTLP/JSON body as protobuf's JSON parser takes it (its hex ids as base64); every
    fault an InvalidRequest (traces and logs alike)."""
    document = load_json_document(raw)
    try:
        _hex_ids_to_base64(document)
    except RecursionError:
        raise InvalidRequest("body is not OTLP/JSON: nested too deeply") from None
    return document


def decode_json(raw: bytes) -> ExportTraceServiceRequest:
    document = protobuf_json_document(raw)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except PARSE_ERRORS as exc:
        # The parser quotes the offending value back: keep only the field path it names, and
        # say where (which span) by parsing the parts one by one.
        where = _locate(document)
        fields = _PARSE_FIELD.findall(str(exc))[where.count("[") :]
        field = f"field {'.'.join(fields)}" if fields else "a field"
        raise InvalidRequest(
            f"body is not an OTLP/JSON ExportTraceServiceRequest: {where}{field} "
            "has a value of the wrong type or form"
        ) from None
    return request


def _locate(document: dict[str, Any]) -> str:
    """``resourceSpans[i].scopeSpans[j].spans[k]: `` of the first part that fails to parse
    on its own, or "" (an error path only: it parses the request again, piece by piece)."""
    parts: list[tuple[str, Any, type[Any]]] = []
    for i, resource_spans in enumerate(_items(document.get("resourceSpans"))):
        if not isinstance(resource_spans, dict):
            return f"resourceSpans[{i}]: "
        resource = {k: v for k, v in resource_spans.items() if k != "scopeSpans"}
        parts.append((f"resourceSpans[{i}]", resource, trace_pb2.ResourceSpans))
        for j, scope_spans in enumerate(_items(resource_spans.get("scopeSpans"))):
            if not isinstance(scope_spans, dict):
                return f"resourceSpans[{i}].scopeSpans[{j}]: "
            scope = {k: v for k, v in scope_spans.items() if k != "spans"}
            parts.append((f"resourceSpans[{i}].scopeSpans[{j}]", scope, trace_pb2.ScopeSpans))
            for k, span in enumerate(_items(scope_spans.get("spans"))):
                name = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                parts.append((name, span, trace_pb2.Span))
    for name, part, message in parts:
        try:
            json_format.ParseDict(part, message(), ignore_unknown_fields=True)
        except Exception:  # any failure locates the part
            return f"{name}: "
    return ""


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def value_to_str(value: Any) -> str:
    """An OTLP AnyValue as the string the ``Map(..., String)`` columns hold."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return str(value.string_value)
    if kind == "int_value":
        return str(value.int_value)
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        return repr(value.double_value)
    if kind is None:
        return ""
    if kind == "bytes_value":
        return _bytes_text(value.bytes_value)
    return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"))


def _bytes_text(raw: bytes) -> str:
    # Text sent as bytes stays text, so redaction can read it — also with a stray byte that
    # is not UTF-8 (shown as U+FFFD, which no detector's word boundary sticks to); binary is
    # kept as base64 (whose text the redactor decodes and scans).
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        printable = sum(1 for c in text if c.isprintable() or c in "\r\n\t")
        if printable >= 0.9 * len(text):
            return text
        return "base64:" + base64.b64encode(raw).decode()


def _plain(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return _bytes_text(value.bytes_value)
    return getattr(value, kind) if kind else None


def _attributes(key_values: Any) -> dict[str, str]:
    # The hot loop of ingest: most values are strings, so try that field first.
    out = {}
    for kv in key_values:
        value = kv.value
        text = value.string_value
        if text or value.WhichOneof("value") == "string_value":
            out[kv.key] = text
        else:
            out[kv.key] = value_to_str(value)
    return out


# Start times the store can hold and the row encoding can express exactly: from 2001-09-09
# (ten-digit unix seconds) to the end of DateTime64(9) in 2262. Anything else is a broken
# clock or a missing field, and is rejected on its own instead of poisoning a batch.
MIN_TIME_NS = 1_000_000_000 * 1_000_000_000
MAX_TIME_NS = 9_214_646_400 * 1_000_000_000  # 2262-01-01


def _bad_ids(span: Any, earliest_ns: int, latest_ns: int) -> str | None:
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    start = span.start_time_unix_nano
    if not MIN_TIME_NS <= start < MAX_TIME_NS:
        return "start_time_unix_nano is missing or out of range"
    if not earliest_ns <= start <= latest_ns:
        return "start_time_unix_nano is outside the accepted window (a broken clock?)"
    if len(trace_id) != 16 or not any(trace_id):
        return "trace_id must be 16 non-zero bytes"
    if len(span_id) != 8 or not any(span_id):
        return "span_id must be 8 non-zero bytes"
    if len(parent) not in (0, 8):
        return "parent_span_id must be empty or 8 bytes"
    return None


attributes_of = _attributes
"""OTLP KeyValues as the ``Map(..., String)`` columns hold them (logs too)."""
bytes_text = _bytes_text
"""An OTLP ``bytes_value`` as the ``Map(..., String)`` columns hold it (``collector.wire``)."""
hex_ids_to_base64 = _hex_ids_to_base64
"""OTLP/JSON's hex ``traceId``/``spanId`` rewritten for protobuf's JSON parser (logs too)."""


def _clamp(stamp: int, fallback: int) -> int:
    return stamp if MIN_TIME_NS <= stamp < MAX_TIME_NS else fallback


def to_records(
    request: ExportTraceServiceRequest,
    project_id: str,
    ingested_ns: int,
    window: tuple[int, int] | None = None,
) -> DecodeResult:
    """Spans as records; a span with bad ids or a start outside ``window`` (earliest,
    latest; unix ns) is rejected on its own and counted, never stored."""
    earliest_ns, latest_ns = window or (MIN_TIME_NS, MAX_TIME_NS)
    records: list[SpanRecord] = []
    rejected = 0
    first_reason = ""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = resource.get("service.name", "unknown_service")
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name
            scope_version = scope_spans.scope.version
            for span in scope_spans.spans:
                reason = _bad_ids(span, earliest_ns, latest_ns)
                if reason is None:
                    for link in span.links:
                        if len(link.trace_id) != 16 or len(link.span_id) != 8:
                            reason = "link ids must be 16 and 8 bytes"
                            break
                if reason is not None:
                    rejected += 1
                    first_reason = first_reason or reason
                    continue
                start = span.start_time_unix_nano
                end = min(span.end_time_unix_nano, MAX_TIME_NS - 1)
                events = span.events
                links = span.links
                kind = span.kind
                code = span.status.code
                records.append(
                    SpanRecord(
                        project_id=project_id,
                        timestamp_ns=start,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        trace_state=span.trace_state,
                        span_name=span.name,
                        span_kind=_SPAN_KINDS[kind]
                        if 0 <= kind < len(_SPAN_KINDS)
                        else "Unspecified",
                        service_name=service,
                        resource_attributes=resource,
                        scope_name=scope_name,
                        scope_version=scope_version,
                        span_attributes=_attributes(span.attributes),
                        duration_ns=end - start if end > start else 0,
                        status_code=_STATUS_CODES[code] if 0 <= code < 3 else "Unset",
                        status_message=span.status.message,
                        event_timestamps=[_clamp(e.time_unix_nano, start) for e in events]
                        if events
                        else [],
                        event_names=[e.name for e in events] if events else [],
                        event_attributes=[_attributes(e.attributes) for e in events]
                        if events
                        else [],
                        link_trace_ids=[link.trace_id.hex() for link in links] if links else [],
                        link_span_ids=[link.span_id.hex() for link in links] if links else [],
                        link_trace_states=[link.trace_state for link in links] if links else [],
                        link_attributes=[_attributes(link.attributes) for link in links]
                        if links
                        else [],
                        ingested_ns=ingested_ns,
                    )
                )
    message = f"{rejected} spans rejected: {first_reason}" if rejected else ""
    return DecodeResult(records, rejected, message)
