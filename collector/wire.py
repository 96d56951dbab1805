"""OTLP trace requests read as records straight from the protobuf wire format.

``decode.to_records`` reads a request through protobuf's Python objects: a wrapper object
for every message it touches (each key-value, each value), made, cached and freed again.
This module reads the same request bytes directly, with the same rules, into the same
records; compiled (ADR 52), protobuf's parse and this reader took 10-12 us per realistic
agent span against 16-19 for the parse and ``to_records`` (ADR 53).

It is an accelerator, never a judge: the request has been parsed by protobuf first (its
accept or reject is protobuf's), and anything here that is not the plain encoding every
OTLP exporter writes (a message field sent twice, which protobuf merges; a known field with
another wire type; a group; an OTLP field afr does not read yet, or values nested deeper
than ``_MAX_DEPTH``) makes ``records_from_wire`` answer None, and the caller reads the
request through protobuf as before. ``tests/unit/collector/test_wire.py`` holds the two to
the same records.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

from collector.decode import MAX_TIME_NS, MIN_TIME_NS, DecodeResult, bytes_text
from collector.model import SpanRecord

__all__ = ["records_from_wire"]

_SPAN_KINDS: Final = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
_STATUS_CODES: Final = ("Unset", "Ok", "Error")

_VARINT: Final = 0
_FIXED64: Final = 1
_LEN: Final = 2
_FIXED32: Final = 5

# Values nested deeper (an array in an array ...) are left to protobuf, whose own limit
# decides whether the request is taken at all.
_MAX_DEPTH: Final = 32

_DOUBLE: Final = struct.Struct("<d")


class _Unplain(Exception):
    """The request holds something read only through protobuf (see the module's doc)."""


class _Reader:
    """A cursor over a request's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        data = self.data
        pos = self.pos
        byte = data[pos]
        pos += 1
        if byte < 0x80:
            self.pos = pos
            return byte
        result = byte & 0x7F
        shift = 7
        while True:
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 63:
                raise _Unplain("a varint longer than 10 bytes")
        self.pos = pos
        # Ten bytes carry 70 bits; protobuf keeps the low 64.
        return result & 0xFFFF_FFFF_FFFF_FFFF if shift == 63 else result

    def fixed64(self) -> int:
        pos = self.pos
        if pos + 8 > len(self.data):
            raise _Unplain("a value past the end")
        self.pos = pos + 8
        return int.from_bytes(self.data[pos : pos + 8], "little")

    def close(self, end: int) -> None:
        """The cursor at ``end``, where the message it read ends."""
        if self.pos != end:
            raise _Unplain("a field past its message")

    # A known field's value, read once its wire type is the field's own.
    def message(self, wire: int) -> int:
        """Where the message field that begins here ends (the cursor at its first byte)."""
        _expect(wire, _LEN)
        size = self.length()
        return self.pos + size

    def string_field(self, wire: int) -> str:
        _expect(wire, _LEN)
        return self.string()

    def bytes_field(self, wire: int) -> bytes:
        _expect(wire, _LEN)
        return self.blob()

    def varint_field(self, wire: int) -> int:
        _expect(wire, _VARINT)
        return self.varint()

    def fixed64_field(self, wire: int) -> int:
        _expect(wire, _FIXED64)
        return self.fixed64()

    def passed(self, wire: int, own: int) -> None:
        """Past a known field afr does not read (a dropped count, flags)."""
        _expect(wire, own)
        self.skip(wire)

    def length(self) -> int:
        """A length-delimited field's length; the cursor at its first byte."""
        size = self.varint()
        if self.pos + size > len(self.data):
            raise _Unplain("a length past the end")
        return size

    def string(self) -> str:
        size = self.length()
        pos = self.pos
        self.pos = pos + size
        try:
            return self.data[pos : pos + size].decode("utf-8")
        except UnicodeDecodeError:
            raise _Unplain("a string that is not UTF-8") from None

    def blob(self) -> bytes:
        size = self.length()
        pos = self.pos
        self.pos = pos + size
        return self.data[pos : pos + size]

    def skip(self, wire: int) -> None:
        """Past an unknown field's value."""
        if wire == _VARINT:
            self.varint()
        elif wire == _FIXED64:
            self.pos += 8
        elif wire == _LEN:
            size = self.length()  # first: it moves the cursor past the length
            self.pos += size
        elif wire == _FIXED32:
            self.pos += 4
        else:  # a group: protobuf keeps it as unknown fields; not read here
            raise _Unplain("a group")
        if self.pos > len(self.data):
            raise _Unplain("a value past the end")


def _int32(value: int) -> int:
    """An enum's varint as protobuf reads it: its low 32 bits, signed."""
    value &= 0xFFFF_FFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _expect(wire: int, wanted: int) -> None:
    if wire != wanted:
        raise _Unplain("a known field with another wire type")


def _attributes(reader: _Reader, end: int, out: dict[str, str]) -> None:
    """One KeyValue (the cursor at its first byte, ``end`` past its last) into ``out`` as
    ``decode._attributes`` writes it."""
    key, kind, found = _key_value(reader, end, 0)
    out[key] = _text(kind, found)


def _key_value(reader: _Reader, end: int, depth: int) -> tuple[str, int, Any]:
    """(key, the value's kind and value as ``_any_value`` gives them)."""
    key = ""
    kind = 0
    found: Any = None
    seen_value = False
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 1:
            key = reader.string_field(wire)
        elif field == 2:
            stop = reader.message(wire)
            if seen_value:  # protobuf merges the two values
                raise _Unplain("a value sent twice")
            seen_value = True
            kind, found = _any_value(reader, stop, depth)
        elif field == 3:  # key_strindex: not read (as decode does)
            reader.passed(wire, _VARINT)
        else:
            reader.skip(wire)
    reader.close(end)
    return key, kind, found


def _text(kind: int, found: Any) -> str:
    """An AnyValue as ``decode.value_to_str`` gives it."""
    if kind == 1 or kind == 3 or kind == 7:  # a string, an int, bytes as text
        return str(found)
    if kind == 0:
        return ""
    if kind == 2:
        return "true" if found else "false"
    if kind == 4:
        return repr(found)
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"))


def _any_value(reader: _Reader, end: int, depth: int) -> tuple[int, Any]:
    """(the oneof's field number, 0 when unset; its value as ``decode._plain`` has it)."""
    if depth > _MAX_DEPTH:
        raise _Unplain("values nested too deep")
    kind = 0
    found: Any = None
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 1:
            kind, found = 1, reader.string_field(wire)
        elif field == 2:
            kind, found = 2, reader.varint_field(wire) != 0
        elif field == 3:
            kind, found = 3, _int64(reader.varint_field(wire))
        elif field == 4:
            pos = reader.pos
            reader.fixed64_field(wire)
            kind, found = 4, _DOUBLE.unpack_from(reader.data, pos)[0]
        elif field == 5 or field == 6:
            stop = reader.message(wire)
            if kind == field:  # the same message twice: protobuf merges them
                raise _Unplain("a list value sent twice")
            if field == 5:
                kind, found = 5, _array(reader, stop, depth + 1)
            else:
                kind, found = 6, _kvlist(reader, stop, depth + 1)
        elif field == 7:
            kind, found = 7, bytes_text(reader.bytes_field(wire))
        elif field == 8:  # string_value_strindex: a profiles-only form
            raise _Unplain("a string table index")
        else:
            reader.skip(wire)
    reader.close(end)
    return kind, found


def _array(reader: _Reader, end: int, depth: int) -> list[Any]:
    values: list[Any] = []
    while reader.pos < end:
        tag = reader.varint()
        if tag >> 3 == 1:
            values.append(_any_value(reader, reader.message(tag & 7), depth)[1])
        else:
            reader.skip(tag & 7)
    reader.close(end)
    return values


def _kvlist(reader: _Reader, end: int, depth: int) -> dict[str, Any]:
    values: dict[str, Any] = {}
    while reader.pos < end:
        tag = reader.varint()
        if tag >> 3 == 1:
            key, _, found = _key_value(reader, reader.message(tag & 7), depth)
            values[key] = found
        else:
            reader.skip(tag & 7)
    reader.close(end)
    return values


def _key_values(reader: _Reader, end: int) -> dict[str, str]:
    """A Resource's attributes."""
    out: dict[str, str] = {}
    while reader.pos < end:
        tag = reader.varint()
        if tag >> 3 == 1:
            _attributes(reader, reader.message(tag & 7), out)
        elif tag >> 3 == 2:  # dropped_attributes_count
            reader.passed(tag & 7, _VARINT)
        else:  # entity_refs, or a field newer than this reader: not read (as decode does)
            reader.skip(tag & 7)
    reader.close(end)
    return out


def _scope(reader: _Reader, end: int) -> tuple[str, str]:
    name = ""
    version = ""
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 1:
            name = reader.string_field(wire)
        elif field == 2:
            version = reader.string_field(wire)
        else:  # attributes, dropped_attributes_count: not read (as decode does)
            reader.skip(wire)
    reader.close(end)
    return name, version


class _Span:
    """A span's fields as read so far."""

    def __init__(self) -> None:
        self.trace_id = b""
        self.span_id = b""
        self.parent_span_id = b""
        self.trace_state = ""
        self.name = ""
        self.kind = 0
        self.start = 0
        self.end = 0
        self.attributes: dict[str, str] = {}
        self.event_times: list[int] = []
        self.event_names: list[str] = []
        self.event_attributes: list[dict[str, str]] = []
        self.link_trace_ids: list[bytes] = []
        self.link_span_ids: list[bytes] = []
        self.link_states: list[str] = []
        self.link_attributes: list[dict[str, str]] = []
        self.status_code = 0
        self.status_message = ""


def _span(reader: _Reader, end: int) -> _Span:
    span = _Span()
    seen_status = False
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 9:
            _attributes(reader, reader.message(wire), span.attributes)
        elif field == 5:
            span.name = reader.string_field(wire)
        elif field == 1:
            span.trace_id = reader.bytes_field(wire)
        elif field == 2:
            span.span_id = reader.bytes_field(wire)
        elif field == 4:
            span.parent_span_id = reader.bytes_field(wire)
        elif field == 3:
            span.trace_state = reader.string_field(wire)
        elif field == 6:
            span.kind = _int32(reader.varint_field(wire))
        elif field == 7:
            span.start = reader.fixed64_field(wire)
        elif field == 8:
            span.end = reader.fixed64_field(wire)
        elif field == 11:
            _event(reader, reader.message(wire), span)
        elif field == 13:
            _link(reader, reader.message(wire), span)
        elif field == 15:
            stop = reader.message(wire)
            if seen_status:  # protobuf merges the two
                raise _Unplain("a status sent twice")
            seen_status = True
            _status(reader, stop, span)
        elif field == 10 or field == 12 or field == 14:
            reader.passed(wire, _VARINT)
        elif field == 16:
            reader.passed(wire, _FIXED32)
        else:
            reader.skip(wire)
    reader.close(end)
    return span


def _event(reader: _Reader, end: int, span: _Span) -> None:
    time_ns = 0
    name = ""
    attributes: dict[str, str] = {}
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 1:
            time_ns = reader.fixed64_field(wire)
        elif field == 2:
            name = reader.string_field(wire)
        elif field == 3:
            _attributes(reader, reader.message(wire), attributes)
        elif field == 4:
            reader.passed(wire, _VARINT)
        else:
            reader.skip(wire)
    reader.close(end)
    span.event_times.append(time_ns)
    span.event_names.append(name)
    span.event_attributes.append(attributes)


def _link(reader: _Reader, end: int, span: _Span) -> None:
    trace_id = b""
    span_id = b""
    state = ""
    attributes: dict[str, str] = {}
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 1:
            trace_id = reader.bytes_field(wire)
        elif field == 2:
            span_id = reader.bytes_field(wire)
        elif field == 3:
            state = reader.string_field(wire)
        elif field == 4:
            _attributes(reader, reader.message(wire), attributes)
        elif field == 5:
            reader.passed(wire, _VARINT)
        elif field == 6:
            reader.passed(wire, _FIXED32)
        else:
            reader.skip(wire)
    reader.close(end)
    span.link_trace_ids.append(trace_id)
    span.link_span_ids.append(span_id)
    span.link_states.append(state)
    span.link_attributes.append(attributes)


def _status(reader: _Reader, end: int, span: _Span) -> None:
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 2:
            span.status_message = reader.string_field(wire)
        elif field == 3:
            span.status_code = _int32(reader.varint_field(wire))
        else:
            reader.skip(wire)
    reader.close(end)


def _bad_ids(span: _Span, earliest_ns: int, latest_ns: int) -> str | None:
    """``decode._bad_ids``, and the links' ids, on the span as read."""
    start = span.start
    if not MIN_TIME_NS <= start < MAX_TIME_NS:
        return "start_time_unix_nano is missing or out of range"
    if not earliest_ns <= start <= latest_ns:
        return "start_time_unix_nano is outside the accepted window (a broken clock?)"
    trace_id = span.trace_id
    if len(trace_id) != 16 or not any(trace_id):
        return "trace_id must be 16 non-zero bytes"
    span_id = span.span_id
    if len(span_id) != 8 or not any(span_id):
        return "span_id must be 8 non-zero bytes"
    if len(span.parent_span_id) not in (0, 8):
        return "parent_span_id must be empty or 8 bytes"
    for index, link_trace in enumerate(span.link_trace_ids):
        if len(link_trace) != 16 or len(span.link_span_ids[index]) != 8:
            return "link ids must be 16 and 8 bytes"
    return None


def _record(
    span: _Span,
    project_id: str,
    ingested_ns: int,
    resource: dict[str, str],
    service: str,
    scope_name: str,
    scope_version: str,
) -> SpanRecord:
    start = span.start
    end = min(span.end, MAX_TIME_NS - 1)
    kind = span.kind
    code = span.status_code
    times = span.event_times
    return SpanRecord(
        project_id=project_id,
        timestamp_ns=start,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        trace_state=span.trace_state,
        span_name=span.name,
        span_kind=_SPAN_KINDS[kind] if 0 <= kind < len(_SPAN_KINDS) else "Unspecified",
        service_name=service,
        resource_attributes=resource,
        scope_name=scope_name,
        scope_version=scope_version,
        span_attributes=span.attributes,
        duration_ns=end - start if end > start else 0,
        status_code=_STATUS_CODES[code] if 0 <= code < 3 else "Unset",
        status_message=span.status_message,
        event_timestamps=[t if MIN_TIME_NS <= t < MAX_TIME_NS else start for t in times],
        event_names=span.event_names,
        event_attributes=span.event_attributes,
        link_trace_ids=[link.hex() for link in span.link_trace_ids],
        link_span_ids=[link.hex() for link in span.link_span_ids],
        link_trace_states=span.link_states,
        link_attributes=span.link_attributes,
        ingested_ns=ingested_ns,
    )


def records_from_wire(
    raw: bytes,
    project_id: str,
    ingested_ns: int,
    window: tuple[int, int] | None = None,
) -> DecodeResult | None:
    """``decode.to_records(decode.decode_protobuf(raw), ...)`` for a request protobuf has
    parsed; None when the request holds anything not read here (see the module's doc)."""
    try:
        return _records(_Reader(raw), project_id, ingested_ns, window)
    except (_Unplain, IndexError):
        return None


def _records(
    reader: _Reader, project_id: str, ingested_ns: int, window: tuple[int, int] | None
) -> DecodeResult:
    earliest_ns, latest_ns = window or (MIN_TIME_NS, MAX_TIME_NS)
    records: list[SpanRecord] = []
    rejected = 0
    first_reason = ""
    size = len(reader.data)
    while reader.pos < size:
        tag = reader.varint()
        if tag >> 3 != 1:
            reader.skip(tag & 7)
            continue
        end = reader.message(tag & 7)
        # A ResourceSpans: its resource may come after its spans (protobuf reads fields in
        # any order), so its spans are kept until it is whole.
        resource: dict[str, str] = {}
        seen_resource = False
        scopes: list[tuple[str, str, list[_Span]]] = []
        while reader.pos < end:
            inner = reader.varint()
            field = inner >> 3
            wire = inner & 7
            if field == 2:
                scopes.append(_scope_spans(reader, reader.message(wire)))
            elif field == 1:
                stop = reader.message(wire)
                if seen_resource:  # protobuf merges the two
                    raise _Unplain("a resource sent twice")
                seen_resource = True
                resource = _key_values(reader, stop)
            elif field == 3:
                reader.string_field(wire)
            else:
                reader.skip(wire)
        reader.close(end)
        service = resource.get("service.name", "unknown_service")
        for scope_name, scope_version, spans in scopes:
            for span in spans:
                reason = _bad_ids(span, earliest_ns, latest_ns)
                if reason is not None:
                    rejected += 1
                    first_reason = first_reason or reason
                    continue
                records.append(
                    _record(
                        span, project_id, ingested_ns, resource, service, scope_name, scope_version
                    )
                )
    message = f"{rejected} spans rejected: {first_reason}" if rejected else ""
    return DecodeResult(records, rejected, message)


def _scope_spans(reader: _Reader, end: int) -> tuple[str, str, list[_Span]]:
    name = ""
    version = ""
    seen_scope = False
    spans: list[_Span] = []
    while reader.pos < end:
        tag = reader.varint()
        field = tag >> 3
        wire = tag & 7
        if field == 2:
            spans.append(_span(reader, reader.message(wire)))
        elif field == 1:
            stop = reader.message(wire)
            if seen_scope:  # protobuf merges the two
                raise _Unplain("a scope sent twice")
            seen_scope = True
            name, version = _scope(reader, stop)
        elif field == 3:
            reader.string_field(wire)
        else:
            reader.skip(wire)
    reader.close(end)
    return name, version, spans
