"""``collector.wire`` reads a protobuf request into the records ``decode.to_records`` makes of
it, or hands it back (None) for protobuf's objects to read: never a third answer.

What exporters send is read on the fast path (a real OTel SDK export with every attribute
type, the recorded instrumentations, the bench's agent traffic); protobuf's rules for what
the plain encoding does not say (a field sent twice, fields in any order, unknown fields,
enums out of range, a oneof set twice) give the same records or go back to protobuf; and
``process_request`` stores the same rows either way. The fuzz tests (tests/fuzz/
test_decode_fuzz.py) hold the two readers together on generated and mutated requests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status as SdkStatus
from opentelemetry.trace.status import StatusCode

from bench.collector_bench import REALISTIC_SECRET_EVERY_BYTES, make_requests
from collector.blocks import encode_block
from collector.decode import DecodeResult, decode_json, decode_protobuf, to_records
from collector.model import SpanRecord
from collector.pipeline import Processor, process_request
from collector.privacy import default_processors
from collector.settings import CollectorSettings
from collector.wire import records_from_wire
from tests.dialects import PLAIN_GENAI, PLAIN_GENAI_PREVIOUS, RECORDINGS, request_body

NOW_NS = 1_760_000_000_000_000_000
WINDOW = (NOW_NS - 3_600_000_000_000, NOW_NS + 600_000_000_000)
TRACE = bytes(range(1, 17))
SPAN = bytes(range(1, 9))


def _through_protobuf(raw: bytes, window: tuple[int, int] | None = None) -> DecodeResult:
    return to_records(decode_protobuf(raw), "p", NOW_NS, window)


def _read_fast(raw: bytes, window: tuple[int, int] | None = None) -> DecodeResult:
    """The wire reader's records for ``raw``, which it must read itself: the same as
    protobuf's."""
    expected = _through_protobuf(raw, window)
    found = records_from_wire(raw, "p", NOW_NS, window)
    assert found is not None, "the plain encoding went back to protobuf"
    assert found == expected
    return found


def _same_or_handed_back(raw: bytes) -> bool:
    """True when the wire reader read ``raw`` (and agrees), False when it handed it back."""
    found = records_from_wire(raw, "p", NOW_NS)
    if found is None:
        return False
    assert found == _through_protobuf(raw)
    return True


def _span(**fields: object) -> Span:
    base: dict[str, object] = {
        "trace_id": TRACE,
        "span_id": SPAN,
        "name": "s",
        "start_time_unix_nano": NOW_NS,
        "end_time_unix_nano": NOW_NS + 5,
    }
    base.update(fields)
    return Span(**base)  # type: ignore[arg-type]


def _raw_request(span: bytes) -> bytes:
    """A request of one span given as its bytes, which protobuf never rewrites."""
    return _field(1, 2, _field(2, 2, _field(2, 2, span)))


def _request(*spans: Span, resource: Resource | None = None) -> bytes:
    raw: bytes = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=resource or Resource(attributes=[_kv("service.name", "svc")]),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name="sc"), spans=spans)],
            )
        ]
    ).SerializeToString()
    return raw


def processors_applied(
    processors: list[tuple[str, Processor]], records: list[SpanRecord]
) -> list[SpanRecord]:
    for _, processor in processors:
        records = processor(records)
    return records


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, AnyValue):
        return KeyValue(key=key, value=value)
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


# --- what exporters send: read on the fast path ---------------------------------------------
def test_an_otel_sdk_export_with_every_attribute_type_is_read_on_the_fast_path() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=SdkResource.create({"service.name": "svc", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope", "1.2.3")
    other = SpanContext(int.from_bytes(TRACE, "big"), 7, True, TraceFlags(1))
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER) as root:
        root.set_attributes(
            {
                "text": "héllo \u2028 wörld",
                "empty": "",
                "yes": True,
                "no": False,
                "int": -(2**63),
                "big": 2**63 - 1,
                "float": 0.1,
                "nan": math.nan,
                "inf": -math.inf,
                "texts": ["a", "", "ü"],
                "ints": [1, -2],
                "floats": [1.5, math.inf],
                "bools": [True, False],
            }
        )
        root.add_event("ev", {"k": "v", "n": 2})
        root.add_event("bare")
        with tracer.start_as_current_span("child", links=[Link(other, {"why": "retry"})]) as kid:
            kid.set_status(SdkStatus(StatusCode.ERROR, "boom"))
            kid.record_exception(ValueError("bad"))
    provider.shutdown()
    raw = encode_spans(exporter.get_finished_spans()).SerializeToString()
    records = _read_fast(raw).records
    assert [r.span_name for r in records] == ["child", "root"]
    assert records[0].status_code == "Error" and records[0].link_attributes == [{"why": "retry"}]
    assert records[1].span_attributes["texts"] == '["a","","ü"]'
    assert records[1].span_attributes["nan"] == "nan"


@pytest.mark.parametrize(
    "recording", [*RECORDINGS, PLAIN_GENAI, PLAIN_GENAI_PREVIOUS], ids=lambda r: r.name
)
def test_recorded_instrumentations_are_read_on_the_fast_path(recording: object) -> None:
    body = json.dumps(request_body(recording)).encode()  # type: ignore[arg-type]
    raw = decode_json(body).SerializeToString()
    assert _read_fast(raw).records


@pytest.mark.parametrize("secret_every_bytes", [0, REALISTIC_SECRET_EVERY_BYTES])
@pytest.mark.parametrize("dialect", ["openinference", "afr"])
def test_the_bench_agent_traffic_is_read_on_the_fast_path(
    secret_every_bytes: int, dialect: str
) -> None:
    for raw in make_requests(2, secret_every_bytes=secret_every_bytes, dialect=dialect):
        assert len(_read_fast(raw).records) > 100


# --- protobuf's rules past the plain encoding --------------------------------------------------
def test_a_scalar_sent_twice_keeps_the_last_as_protobuf_does() -> None:
    # Concatenated messages are one message to protobuf: a scalar's last value wins.
    first = _span(name="first", trace_state="a=1", kind=Span.SPAN_KIND_CLIENT)
    second = Span(name="second", end_time_unix_nano=NOW_NS + 9, parent_span_id=b"\x05" * 8)
    raw = _raw_request(first.SerializeToString() + second.SerializeToString())
    record = _read_fast(raw).records[0]
    assert (record.span_name, record.duration_ns, record.span_kind) == ("second", 9, "Client")


def test_fields_in_any_order_and_the_resource_after_its_spans_are_read() -> None:
    span = _span(attributes=[_kv("a", "1")])
    scope = (
        ScopeSpans(spans=[span]).SerializeToString()
        + ScopeSpans(scope=InstrumentationScope(name="late", version="9")).SerializeToString()
    )
    resource = Resource(attributes=[_kv("service.name", "after")]).SerializeToString()
    resource_spans = _field(2, 2, scope) + _field(1, 2, resource)
    raw = _field(1, 2, resource_spans)
    record = _read_fast(raw).records[0]
    assert (record.service_name, record.scope_name, record.scope_version) == ("after", "late", "9")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    tag = _varint(number << 3 | wire)
    return tag + (_varint(len(payload)) + payload if wire == 2 else payload)


UNKNOWN_FIELDS = {
    "varint": _field(99, 0, _varint(2**64 - 1)),
    "fixed64": _field(98, 1, b"\x01" * 8),
    "bytes": _field(97, 2, b"\xff\xfe not utf-8"),
    "fixed32": _field(96, 5, b"\x01" * 4),
}


@pytest.mark.parametrize("wire", list(UNKNOWN_FIELDS))
@pytest.mark.parametrize("inside", ["request", "resource_spans", "span", "key_value", "any_value"])
def test_unknown_fields_of_every_wire_type_are_skipped(wire: str, inside: str) -> None:
    unknown = UNKNOWN_FIELDS[wire]
    value = AnyValue(string_value="v").SerializeToString()
    if inside == "any_value":
        value += unknown
    key_value = _field(1, 2, b"k") + _field(2, 2, value)
    if inside == "key_value":
        key_value += unknown
    span = _span().SerializeToString() + _field(9, 2, key_value)
    if inside == "span":
        span += unknown
    resource_spans = _field(2, 2, _field(2, 2, span))
    if inside == "resource_spans":
        resource_spans += unknown
    raw = _field(1, 2, resource_spans)
    if inside == "request":
        raw += unknown
    assert _read_fast(raw).records[0].span_attributes == {"k": "v"}


@pytest.mark.parametrize(
    ("kind", "stored"),
    [(0, "Unspecified"), (5, "Consumer"), (6, "Unspecified"), (-1, "Unspecified"),
     (2**31 - 1, "Unspecified"), (2**32 + 3, "Client"), (2**64 - 1, "Unspecified")],
)  # fmt: skip
def test_span_kinds_and_status_codes_are_read_as_protobuf_reads_an_enum(
    kind: int, stored: str
) -> None:
    # An enum is an int32 on the wire: protobuf keeps a varint's low 32 bits, signed.
    span = _span().SerializeToString() + _field(6, 0, _varint(kind % 2**64))
    span += _field(15, 2, _field(3, 0, _varint(kind % 2**64)) + _field(2, 2, b"why"))
    record = _read_fast(_raw_request(span)).records[0]
    assert record.span_kind == stored
    assert record.status_message == "why"


def test_a_oneof_set_twice_keeps_the_last_value_of_any_kind() -> None:
    values = [
        AnyValue(string_value="s"),
        AnyValue(int_value=-5),
        AnyValue(bool_value=True),
        AnyValue(double_value=2.5),
        AnyValue(bytes_value=b"\x00\xff" * 8),
        AnyValue(bytes_value=b"text as bytes"),
        AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue()])),
        AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k"), _kv("j", "v")])),
        AnyValue(),
    ]
    read: list[tuple[str | None, str | None]] = []
    handed_back: list[tuple[str | None, str | None]] = []
    for first in values:
        for second in values:
            # One AnyValue on the wire holding both: protobuf keeps the last member set.
            value = first.SerializeToString() + second.SerializeToString()
            attribute = _field(9, 2, _field(1, 2, b"k") + _field(2, 2, value))
            raw = _raw_request(_span().SerializeToString() + attribute)
            pair = (first.WhichOneof("value"), second.WhichOneof("value"))
            (read if _same_or_handed_back(raw) else handed_back).append(pair)
    # Only the same list twice is merged by protobuf: those requests go back to it.
    assert sorted(handed_back) == [("array_value",) * 2, ("kvlist_value",) * 2]
    assert len(read) == len(values) ** 2 - 2


@pytest.mark.parametrize(
    "twice",
    ["resource", "scope", "status", "key_value's value", "array", "kvlist"],
)
def test_a_message_sent_twice_goes_back_to_protobuf_which_merges_it(
    twice: str, tmp_path: Path
) -> None:
    span = _span().SerializeToString()
    resource = Resource(attributes=[_kv("service.name", "svc")]).SerializeToString()
    scope = InstrumentationScope(name="sc").SerializeToString()
    if twice == "status":
        span += _field(15, 2, Status(message="a").SerializeToString())
        span += _field(15, 2, Status(code=Status.STATUS_CODE_ERROR).SerializeToString())
    elif twice == "key_value's value":
        value = _field(2, 2, AnyValue(string_value="x").SerializeToString())
        span += _field(9, 2, _field(1, 2, b"k") + value + _field(2, 2, b""))
    elif twice in ("array", "kvlist"):
        number = 5 if twice == "array" else 6
        inner = AnyValue(string_value="x").SerializeToString()
        if twice == "kvlist":
            inner = KeyValue(key="k", value=AnyValue(string_value="x")).SerializeToString()
        value = _field(number, 2, _field(1, 2, inner)) * 2
        span += _field(9, 2, _field(1, 2, b"k") + _field(2, 2, value))
    scope_spans = _field(1, 2, scope) + _field(2, 2, span)
    if twice == "scope":
        scope_spans += _field(1, 2, InstrumentationScope(version="2").SerializeToString())
    resource_spans = _field(1, 2, resource) + _field(2, 2, scope_spans)
    if twice == "resource":
        resource_spans += _field(1, 2, Resource(attributes=[_kv("n", "2")]).SerializeToString())
    raw = _field(1, 2, resource_spans)
    assert records_from_wire(raw, "p", NOW_NS) is None
    expected = _through_protobuf(raw)
    assert len(expected.records) == 1
    # The pipeline stores what protobuf's reader makes of it.
    processors = default_processors(CollectorSettings(data_dir=tmp_path))
    stored = process_request(processors, raw, False, "p", NOW_NS)
    assert stored.rows == 1
    assert stored.payload == encode_block(processors_applied(processors, expected.records))


@pytest.mark.parametrize(
    ("span", "reason"),
    [
        (_span(trace_id=b""), "trace_id must be 16 non-zero bytes"),
        (_span(trace_id=b"\x00" * 16), "trace_id must be 16 non-zero bytes"),
        (_span(span_id=b"\x01" * 9), "span_id must be 8 non-zero bytes"),
        (_span(parent_span_id=b"\x01" * 4), "parent_span_id must be empty or 8 bytes"),
        (_span(start_time_unix_nano=0), "start_time_unix_nano is missing or out of range"),
        (_span(start_time_unix_nano=NOW_NS - 10**15), "outside the accepted window"),
        (_span(links=[Span.Link(trace_id=TRACE, span_id=b"1")]), "link ids must be 16 and 8"),
    ],
)
def test_a_span_with_bad_ids_or_times_is_rejected_alone_with_protobufs_reason(
    span: Span, reason: str
) -> None:
    raw = _request(span, _span(name="kept"))
    result = _read_fast(raw, WINDOW)
    assert [r.span_name for r in result.records] == ["kept"]
    assert result.rejected == 1 and reason in result.error_message


def test_event_times_out_of_range_take_the_spans_start_and_links_keep_their_fields() -> None:
    span = _span(
        events=[Span.Event(time_unix_nano=1, name="early"), Span.Event(time_unix_nano=NOW_NS + 1)],
        links=[
            Span.Link(trace_id=TRACE, span_id=SPAN, trace_state="t=1", attributes=[_kv("a", 1)])
        ],
        status=Status(code=Status.STATUS_CODE_OK, message="fine"),
        end_time_unix_nano=2**64 - 1,
    )
    record = _read_fast(_request(span)).records[0]
    assert record.event_timestamps == [NOW_NS, NOW_NS + 1]
    assert record.link_trace_states == ["t=1"] and record.status_code == "Ok"


def test_a_request_cut_short_or_with_a_group_is_handed_back() -> None:
    raw = _request(_span(attributes=[_kv("k", "v")]))
    for cut in range(1, len(raw)):
        assert records_from_wire(raw[:cut], "p", NOW_NS) is None
    group = _request(_span()) + _varint(50 << 3 | 3) + _varint(50 << 3 | 4)
    assert records_from_wire(group, "p", NOW_NS) is None
    assert len(_through_protobuf(group).records) == 1
