"""The OTLP decoders on arbitrary and mutated input: only the documented errors escape.

``decode_protobuf`` / ``decode_json`` raise ``InvalidRequest`` (400 / INVALID_ARGUMENT) for a
body they cannot read, never anything else (a SystemError, RecursionError, OverflowError or
UnicodeError would be a 500 and, on gRPC, an INTERNAL). ``to_records`` never raises on a request
that decoded (and ``collector.wire`` reads the same records from its bytes, or leaves it to
``to_records``): it keeps each span whose ids and start time are well formed, counts each other
one as rejected, and what it keeps round-trips through the read API's OTLP/JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from collector.api.runs import otlp_json, span_json
from collector.blocks import encode_block
from collector.decode import MAX_TIME_NS, MIN_TIME_NS, decode_json, decode_protobuf, to_records
from collector.errors import InvalidRequest
from collector.model import SpanRecord
from collector.wire import records_from_wire
from tests.fuzz.strategies import any_text, fuzz_settings, utf8_text

_NOW_NS = 1_764_000_000_000_000_000


def _decode(raw: bytes, as_json: bool) -> ExportTraceServiceRequest | None:
    """The request, or None for a body refused with the documented error (which says what is
    wrong)."""
    try:
        return decode_json(raw) if as_json else decode_protobuf(raw)
    except InvalidRequest as refused:
        message = str(refused)
    assert message
    return None


def _records_never_raise(request: ExportTraceServiceRequest) -> None:
    total = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    result = to_records(request, "p", _NOW_NS)
    assert len(result.records) + result.rejected == total
    assert bool(result.error_message) == bool(result.rejected)
    encode_block(result.records)  # what the store and the write-ahead log hold


# --- structurally valid requests, arbitrary field values -----------------------------------
_TIME_EDGES = [
    0,
    1,
    MIN_TIME_NS - 1,
    MIN_TIME_NS,
    MIN_TIME_NS + 1,
    _NOW_NS,
    MAX_TIME_NS - 1,
    MAX_TIME_NS,
    MAX_TIME_NS + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
]
times = st.sampled_from(_TIME_EDGES) | st.integers(0, 2**64 - 1)
ids = st.binary(max_size=20) | st.sampled_from([b"\0" * 8, b"\0" * 16, b"\1" * 8, b"\1" * 16])
# Mostly well formed, so most requests keep some spans; any length or value otherwise.
trace_ids = st.binary(min_size=16, max_size=16) | st.binary(min_size=16, max_size=16) | ids
span_ids = st.binary(min_size=8, max_size=8) | st.binary(min_size=8, max_size=8) | ids
parent_ids = st.just(b"") | span_ids
in_range = st.integers(MIN_TIME_NS, MAX_TIME_NS - 1)
start_times = in_range | times
well_formed_ids = {"trace_id": b"\x0a" * 16, "span_id": b"\x0b" * 8, "parent_span_id": b""}

# A plain Python tree for an AnyValue: ("s", text), ("i", int), ... nested in arrays/kvlists.
any_values = st.recursive(
    st.tuples(st.just("s"), utf8_text)
    | st.tuples(st.just("i"), st.integers(-(2**63), 2**63 - 1))
    | st.tuples(st.just("d"), st.floats())
    | st.tuples(st.just("b"), st.booleans())
    | st.tuples(st.just("y"), st.binary(max_size=24))
    | st.tuples(st.just("none"), st.none()),
    lambda children: (
        st.tuples(st.just("a"), st.lists(children, max_size=3))
        | st.tuples(st.just("k"), st.lists(st.tuples(utf8_text, children), max_size=3))
    ),
    max_leaves=6,
)


def _any_value(tree: tuple[str, Any]) -> AnyValue:
    kind, payload = tree
    value = AnyValue()
    if kind == "s":
        value.string_value = payload
    elif kind == "i":
        value.int_value = payload
    elif kind == "d":
        value.double_value = payload
    elif kind == "b":
        value.bool_value = payload
    elif kind == "y":
        value.bytes_value = payload
    elif kind == "a":
        value.array_value.SetInParent()
        value.array_value.values.extend(_any_value(child) for child in payload)
    elif kind == "k":
        value.kvlist_value.SetInParent()
        value.kvlist_value.values.extend(
            KeyValue(key=key, value=_any_value(child)) for key, child in payload
        )
    return value


def _plain(tree: tuple[str, Any]) -> Any:
    """What an array or kvlist AnyValue reads back as, once its JSON text is parsed."""
    kind, payload = tree
    if kind == "a":
        return [_plain(child) for child in payload]
    if kind == "k":
        return {key: _plain(child) for key, child in payload}
    if kind == "y":
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError:
            return _BYTES  # the decoder's rendering of binary: not compared
    return payload


_BYTES = object()


def _same(stored: Any, expected: Any) -> bool:
    if expected is _BYTES:
        return isinstance(stored, str)
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(stored, float) and math.isnan(stored)
    if isinstance(expected, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(expected)
            and all(_same(a, b) for a, b in zip(stored, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == expected.keys()
            and all(_same(stored[k], expected[k]) for k in expected)
        )
    return bool(stored == expected) and type(stored) is type(expected)


def _check_attribute(stored: str, tree: tuple[str, Any]) -> None:
    kind, payload = tree
    if kind == "s":
        assert stored == payload
    elif kind == "i":
        assert int(stored) == payload
    elif kind == "d":
        assert float(stored) == payload or (math.isnan(payload) and stored == "nan")
    elif kind == "b":
        assert stored == ("true" if payload else "false")
    elif kind == "none":
        assert stored == ""
    elif kind == "y":
        expected = _plain(tree)
        assert stored == expected or (expected is _BYTES and stored)
    else:
        assert _same(json.loads(stored), _plain(tree)), (stored, tree)


attributes = st.lists(st.tuples(utf8_text, any_values), max_size=3)


@st.composite
def spans(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "trace_id": draw(trace_ids),
        "span_id": draw(span_ids),
        "parent_span_id": draw(parent_ids),
        "name": draw(utf8_text),
        "trace_state": draw(utf8_text),
        "kind": draw(st.integers(-(2**31), 2**31 - 1)),
        "start": draw(start_times),
        "end": draw(times),
        "status": (draw(st.integers(-(2**31), 2**31 - 1)), draw(utf8_text)),
        "attributes": draw(attributes),
        "events": draw(st.lists(st.tuples(times, utf8_text, attributes), max_size=2)),
        "links": draw(st.lists(st.tuples(trace_ids, span_ids, utf8_text, attributes), max_size=2)),
    }


@st.composite
def requests(
    draw: st.DrawFn, kept: bool = False
) -> tuple[ExportTraceServiceRequest, list[dict[str, Any]]]:
    """A request and what was put in each span; ``kept``: at least one well-formed span."""
    request = ExportTraceServiceRequest()
    drawn: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1 if kept else 0, 2))):
        resource_spans = request.resource_spans.add()
        resource = draw(attributes)
        resource_spans.resource.attributes.extend(
            KeyValue(key=k, value=_any_value(v)) for k, v in resource
        )
        for _ in range(draw(st.integers(1 if kept else 0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(utf8_text)
            scope_spans.scope.version = draw(utf8_text)
            chosen = draw(st.lists(spans(), min_size=int(kept and index == 0), max_size=3))
            if kept and index == 0:
                chosen[0].update(well_formed_ids, links=[], start=draw(in_range))
                kept = False
            for fields in chosen:
                span = scope_spans.spans.add()
                span.trace_id, span.span_id = fields["trace_id"], fields["span_id"]
                span.parent_span_id = fields["parent_span_id"]
                span.name, span.trace_state = fields["name"], fields["trace_state"]
                span.kind = fields["kind"]
                span.start_time_unix_nano, span.end_time_unix_nano = fields["start"], fields["end"]
                span.status.code, span.status.message = fields["status"]
                span.attributes.extend(
                    KeyValue(key=k, value=_any_value(v)) for k, v in fields["attributes"]
                )
                for time_ns, name, event_attributes in fields["events"]:
                    event = span.events.add(time_unix_nano=time_ns, name=name)
                    event.attributes.extend(
                        KeyValue(key=k, value=_any_value(v)) for k, v in event_attributes
                    )
                for trace_id, span_id, state, link_attributes in fields["links"]:
                    link = span.links.add(trace_id=trace_id, span_id=span_id, trace_state=state)
                    link.attributes.extend(
                        KeyValue(key=k, value=_any_value(v)) for k, v in link_attributes
                    )
                fields["resource"] = resource
                fields["scope"] = (scope_spans.scope.name, scope_spans.scope.version)
                drawn.append(fields)
    return request, drawn


def _well_formed(fields: dict[str, Any]) -> bool:
    """OTLP's per-span rules as docs/collector.md states them, written out independently."""
    trace_id, span_id, parent = fields["trace_id"], fields["span_id"], fields["parent_span_id"]
    return (
        MIN_TIME_NS <= fields["start"] < MAX_TIME_NS
        and len(trace_id) == 16
        and trace_id != b"\0" * 16
        and len(span_id) == 8
        and span_id != b"\0" * 8
        and len(parent) in (0, 8)
        and all(len(t) == 16 and len(s) == 8 for t, s, _, _ in fields["links"])
    )


def _check_record(record: SpanRecord, fields: dict[str, Any]) -> None:
    assert record.trace_id == fields["trace_id"].hex()
    assert record.span_id == fields["span_id"].hex()
    assert record.parent_span_id == fields["parent_span_id"].hex()
    assert record.span_name == fields["name"]
    assert record.timestamp_ns == fields["start"]
    assert record.duration_ns == max(0, min(fields["end"], MAX_TIME_NS - 1) - fields["start"])
    assert record.timestamp_ns + record.duration_ns < MAX_TIME_NS
    assert all(MIN_TIME_NS <= t < MAX_TIME_NS for t in record.event_timestamps)
    assert record.span_kind in (
        "Unspecified",
        "Internal",
        "Server",
        "Client",
        "Producer",
        "Consumer",
    )
    assert record.status_code in ("Unset", "Ok", "Error")
    assert record.status_message == fields["status"][1]
    assert (record.scope_name, record.scope_version) == fields["scope"]
    expected = dict(fields["attributes"])  # a repeated key: the last one wins
    assert record.span_attributes.keys() == expected.keys()
    for key, tree in expected.items():
        _check_attribute(record.span_attributes[key], tree)
    resource = dict(fields["resource"])
    assert record.resource_attributes.keys() == resource.keys()
    service = record.resource_attributes.get("service.name", "unknown_service")
    assert record.service_name == service
    assert record.event_names == [name for _, name, _ in fields["events"]]
    assert record.link_trace_ids == [t.hex() for t, _, _, _ in fields["links"]]


@fuzz_settings(30)
@given(requests())
def test_to_records_keeps_well_formed_spans_and_counts_the_rest(
    drawn: tuple[ExportTraceServiceRequest, list[dict[str, Any]]],
) -> None:
    request, fields = drawn
    result = to_records(request, "p", _NOW_NS)
    kept = [f for f in fields if _well_formed(f)]
    assert result.rejected == len(fields) - len(kept)
    assert len(result.records) == len(kept)
    for record, expected in zip(result.records, kept, strict=True):
        _check_record(record, expected)
    encode_block(result.records)


def _comparable(record: SpanRecord) -> str:
    return json.dumps({**span_json(record), "ingested": None}, sort_keys=True)


@fuzz_settings(30)
@given(requests(kept=True))
def test_kept_spans_round_trip_through_the_read_apis_otlp_json(
    drawn: tuple[ExportTraceServiceRequest, list[dict[str, Any]]],
) -> None:
    request, _ = drawn
    first = to_records(request, "p", _NOW_NS).records
    assert first
    served = json.dumps(otlp_json([span_json(record) for record in first]))
    again = decode_json(served.encode())
    second = to_records(again, "p", _NOW_NS)
    assert second.rejected == 0
    assert sorted(map(_comparable, second.records)) == sorted(map(_comparable, first))


# --- protobuf bytes --------------------------------------------------------------------------
@fuzz_settings(300)
@given(st.binary(max_size=512))
def test_decode_protobuf_of_arbitrary_bytes(raw: bytes) -> None:
    request = _decode(raw, as_json=False)
    if request is not None:
        _records_never_raise(request)


_MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate", "varint"]),
        st.integers(0, 2**16),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(raw: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    data = bytearray(raw)
    for operation, where, payload in mutations:
        at = where % (len(data) + 1)
        if operation == "flip" and data:
            data[at % len(data)] ^= payload[0] or 1
        elif operation == "insert":
            data[at:at] = payload
        elif operation == "delete":
            del data[at : at + len(payload)]
        elif operation == "truncate":
            del data[at:]
        elif operation == "duplicate":
            data[at:at] = data[at : at + payload[0]]
        elif operation == "varint":  # a length or tag of ten 0xff bytes: the longest varint
            data[at:at] = b"\xff" * 9 + b"\x01"
    return bytes(data)


@fuzz_settings(150)
@given(requests(), _MUTATIONS)
def test_decode_protobuf_of_mutated_valid_requests(
    drawn: tuple[ExportTraceServiceRequest, list[dict[str, Any]]],
    mutations: list[tuple[str, int, bytes]],
) -> None:
    raw = _mutate(drawn[0].SerializeToString(), mutations)
    request = _decode(raw, as_json=False)
    if request is not None:
        _records_never_raise(request)
        # The wire reader (collector.wire) reads the same records, or hands them back.
        found = records_from_wire(raw, "p", _NOW_NS)
        assert found is None or found == to_records(request, "p", _NOW_NS)


@fuzz_settings(60)
@given(requests())
def test_the_wire_reader_reads_what_protobuf_reads_from_an_exporters_encoding(
    drawn: tuple[ExportTraceServiceRequest, list[dict[str, Any]]],
) -> None:
    raw = drawn[0].SerializeToString()
    # Protobuf's own encoding is the plain one: the reader takes it, never hands it back.
    assert records_from_wire(raw, "p", _NOW_NS) == to_records(decode_protobuf(raw), "p", _NOW_NS)


# --- OTLP/JSON ---------------------------------------------------------------------------------
# Numbers json.dumps cannot write: a marker string in the document, the number in the body.
_HUGE = {
    "<huge int>": "9" * 5000,
    "<huge negative>": "-" + "9" * 4400,
    "<huge float>": "1e99999",
    "<tiny float>": "-1e-99999",
    "<long fraction>": "0." + "1" * 5000,
}
_FIELDS = [
    "resourceSpans", "resource", "attributes", "scopeSpans", "scope", "name", "version",
    "spans", "traceId", "spanId", "parentSpanId", "traceState", "kind", "startTimeUnixNano",
    "endTimeUnixNano", "status", "code", "message", "events", "timeUnixNano", "links", "key",
    "value", "stringValue", "intValue", "doubleValue", "boolValue", "bytesValue", "arrayValue",
    "kvlistValue", "values", "droppedAttributesCount", "flags", "schemaUrl",
]  # fmt: skip
keys = st.sampled_from(_FIELDS) | any_text
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | any_text
    | st.sampled_from(list(_HUGE))
    | st.sampled_from(["0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "2", "-1"])
)
junk = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=8,
)


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: of its own type and form, or anything else."""
    return st.one_of(valid, valid, junk)


hex_ids = st.sampled_from(["", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "zz", "0"])
time_texts = st.sampled_from([str(t) for t in _TIME_EDGES] + ["", "-1", "1.5", "1e18", " 1"])
json_any_values = st.recursive(
    st.fixed_dictionaries({"stringValue": _field(any_text)})
    | st.fixed_dictionaries({"intValue": _field(st.integers() | time_texts)})
    | st.fixed_dictionaries({"doubleValue": _field(st.floats() | st.sampled_from(["NaN", "-Infinity"]))})
    | st.fixed_dictionaries({"boolValue": _field(st.booleans())})
    | st.fixed_dictionaries({"bytesValue": _field(st.sampled_from(["", "AAEC", "AA", "!!"]))}),
    lambda children: st.fixed_dictionaries({"arrayValue": _field(st.fixed_dictionaries({"values": st.lists(children, max_size=3)}))})
    | st.fixed_dictionaries({"kvlistValue": _field(st.fixed_dictionaries({"values": st.lists(st.fixed_dictionaries({"key": _field(any_text), "value": children}), max_size=3)}))}),
    max_leaves=6,
)  # fmt: skip
json_attributes = _field(
    st.lists(st.fixed_dictionaries({"key": _field(any_text), "value": _field(json_any_values)}), max_size=3)
)  # fmt: skip
json_spans = st.fixed_dictionaries(
    {},
    optional={
        "traceId": _field(hex_ids),
        "spanId": _field(hex_ids),
        "parentSpanId": _field(hex_ids),
        "traceState": _field(any_text),
        "name": _field(any_text),
        "kind": _field(st.integers(-3, 7) | st.sampled_from(["SPAN_KIND_SERVER", "Server"])),
        "startTimeUnixNano": _field(time_texts | st.integers()),
        "endTimeUnixNano": _field(time_texts | st.integers()),
        "attributes": json_attributes,
        "events": _field(st.lists(st.fixed_dictionaries({}, optional={"timeUnixNano": _field(time_texts), "name": _field(any_text), "attributes": json_attributes}), max_size=2)),
        "links": _field(st.lists(st.fixed_dictionaries({}, optional={"traceId": _field(hex_ids), "spanId": _field(hex_ids), "attributes": json_attributes}), max_size=2)),
        "status": _field(st.fixed_dictionaries({}, optional={"code": _field(st.integers(-1, 3) | st.just("STATUS_CODE_ERROR")), "message": _field(any_text)})),
        "droppedAttributesCount": _field(st.integers()),
    },
)  # fmt: skip
json_requests = st.fixed_dictionaries(
    {},
    optional={
        "resourceSpans": _field(st.lists(st.fixed_dictionaries({}, optional={
            "resource": _field(st.fixed_dictionaries({}, optional={"attributes": json_attributes})),
            "scopeSpans": _field(st.lists(st.fixed_dictionaries({}, optional={
                "scope": _field(st.fixed_dictionaries({}, optional={"name": _field(any_text), "version": _field(any_text)})),
                "spans": _field(st.lists(json_spans, max_size=3)),
            }), max_size=2)),
        }), max_size=2)),
    },
) | junk  # fmt: skip


def _serialize(document: Any, ensure_ascii: bool) -> bytes:
    text = json.dumps(document, ensure_ascii=ensure_ascii)
    for marker, number in _HUGE.items():
        text = text.replace(f'"{marker}"', number)
    return text.encode("utf-8", "surrogatepass")


@fuzz_settings(150)
@given(json_requests, st.booleans())
def test_decode_json_of_json_ish_documents(document: Any, ensure_ascii: bool) -> None:
    """Lone surrogates (escaped, or raw bytes that are not UTF-8), huge numbers, NaN, and a
    value of the wrong type in every field."""
    request = _decode(_serialize(document, ensure_ascii), as_json=True)
    if request is not None:
        _records_never_raise(request)


@fuzz_settings(80)
@given(json_requests, _MUTATIONS)
def test_decode_json_of_mutated_documents(document: Any, mutations: list[Any]) -> None:
    request = _decode(_mutate(_serialize(document, True), mutations), as_json=True)
    if request is not None:
        _records_never_raise(request)


_NESTING = {
    "array": ("[", "]"),
    "object": ('{"a":', "}"),
    "arrayValue": ('{"arrayValue":{"values":[', "]}}"),
    "kvlistValue": ('{"kvlistValue":{"values":[{"key":"k","value":', "}]}}"),
}
_PLACES = {
    "top": "{}",
    "resourceSpans": '{{"resourceSpans":{}}}',
    "attribute": '{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","startTimeUnixNano":"1764000000000000000","attributes":[{{"key":"k","value":{}}}]}}]}}]}}]}}',
}


@fuzz_settings(60)
@given(
    st.sampled_from(sorted(_NESTING)),
    st.sampled_from(sorted(_PLACES)),
    st.integers(1, 5_000) | st.sampled_from([50_000, 200_000]),
)
def test_decode_deeply_nested_json(nesting: str, place: str, depth: int) -> None:
    opening, closing = _NESTING[nesting]
    inner = opening * depth + ('{"stringValue":"x"}' if nesting.endswith("Value") else "1")
    raw = _PLACES[place].format(inner + closing * depth).encode()
    request = _decode(raw, as_json=True)
    if request is not None:
        _records_never_raise(request)


@fuzz_settings(200)
@given(st.binary(max_size=256))
def test_decode_json_of_arbitrary_bytes(raw: bytes) -> None:
    request = _decode(raw, as_json=True)
    if request is not None:
        _records_never_raise(request)


@fuzz_settings(100)
@given(
    st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from(["[", "{", "]", "}", '"', ","])), max_size=40
    )
)
def test_decode_json_of_bracket_soup(pieces: list[tuple[int, str]]) -> None:
    raw = "".join(char * count for count, char in pieces).encode()
    request = _decode(raw, as_json=True)
    if request is not None:
        _records_never_raise(request)
