"""Hostile inputs: what the collector must refuse, or bound, without harm to good traffic.

Each builder makes one ``Request`` with the outcomes the collector's documented behaviour
allows (docs/collector.md, "OTLP semantics"; OTLP specification). Spans they carry come from trace
numbers far above any good trace's (``HOSTILE_TRACE_BASE``), with the run's ids, so the
validator recognises them: refused ones must be absent from the store, acknowledged ones
present. None of them may be answered with a server error, and the good traffic around them
must be acknowledged and stored exactly as if they had not been there.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from testbed.loadgen import Auth, Outcome, Request, Transport
from testbed.traces import (
    SPANS_PER_TRACE,
    TraceSet,
    encode_protobuf,
    message_json,
    span_key,
    to_request,
)

__all__ = ["HOSTILE_TRACE_BASE", "KINDS", "hostile_requests"]

HOSTILE_TRACE_BASE = 1 << 40
_REFUSED_INVALID = frozenset({Outcome.INVALID})
_TOO_LARGE = frozenset({Outcome.TOO_LARGE})
_INVALID_OR_STORED = frozenset({Outcome.INVALID, Outcome.ACKED})
_KiB = 1024

Builder = Callable[[TraceSet, int, int, int], Request]
"""(traces, trace number, variant, max request bytes) -> request; ``variant`` counts the
requests of that kind made so far, so each variant (transport, body) gets its turn."""


def _trace(traces: TraceSet, number: int) -> tuple[ExportTraceServiceRequest, tuple[int, ...]]:
    n = HOSTILE_TRACE_BASE + number
    return to_request(traces.trace(n)), tuple(span_key(n, p) for p in range(SPANS_PER_TRACE))


def _words(size: int) -> str:
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def _oversize(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, keys = _trace(traces, number)
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.append(
        common_pb2.KeyValue(
            key="testbed.blob", value=common_pb2.AnyValue(string_value=_words(limit + 64 * _KiB))
        )
    )
    transport = (Transport.GRPC, Transport.HTTP_PROTOBUF)[variant % 2]
    return Request("oversize", transport, encode_protobuf(message), keys, expect=_TOO_LARGE)


def _oversize_compressed(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    """Small on the wire, over the limit once inflated: refused without inflating it all."""
    message, keys = _trace(traces, number)
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.append(
        common_pb2.KeyValue(
            key="testbed.blob", value=common_pb2.AnyValue(string_value=_words(2 * limit))
        )
    )
    raw = encode_protobuf(message)
    if variant % 2:
        return Request(
            "oversize, compressed",
            Transport.GRPC,
            raw,
            keys,
            compress=True,
            expect=_TOO_LARGE,
        )
    return Request(
        "oversize, compressed",
        Transport.HTTP_PROTOBUF,
        gzip.compress(raw),
        keys,
        compress=True,
        expect=_TOO_LARGE,
    )


def _gzip_bomb(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    bomb = gzip.compress(b"\x00" * (4 * limit), compresslevel=9)
    return Request("gzip bomb", Transport.HTTP_PROTOBUF, bomb, (), compress=True, expect=_TOO_LARGE)


def _truncated(raw: bytes) -> bytes:
    for cut in range(len(raw) // 2, 0, -1):
        try:
            ExportTraceServiceRequest().ParseFromString(raw[:cut])
        except Exception:  # DecodeError: a cut inside a field, what we want
            return raw[:cut]
    raise AssertionError("no undecodable prefix")  # pragma: no cover - protobuf framing


def _malformed_protobuf(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, _ = _trace(traces, number)
    raw = encode_protobuf(message)
    bodies = (
        b"\xff\xff not protobuf",
        b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a length no varint can hold
        _truncated(raw),
        b"\x0f",  # wire type 7 does not exist
    )
    transport = (Transport.GRPC, Transport.HTTP_PROTOBUF)[variant % 2]
    body = bodies[(variant // 2) % len(bodies)]
    return Request("malformed protobuf", transport, body, (), expect=_REFUSED_INVALID)


def _bad_utf8_protobuf(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, keys = _trace(traces, number)
    message.resource_spans[0].scope_spans[0].spans[0].name = "testbed-utf8-XXXX"
    raw = encode_protobuf(message).replace(b"testbed-utf8-XXXX", b"testbed-utf8-\xff\xfeXX")
    transport = (Transport.GRPC, Transport.HTTP_PROTOBUF)[variant % 2]
    return Request(
        "invalid UTF-8 in protobuf", transport, raw, keys, expect=_INVALID_OR_STORED, exact=False
    )


def _malformed_json(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, _ = _trace(traces, number)
    valid = message_json(message)
    bodies = (
        valid[: len(valid) // 2],  # cut short
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 5, "name": ["x"]}]}]}]}',
        b'{"a":' * 100_000,  # nested deeper than any parser's stack
        b"[1, 2, 3]",
        b'{"resourceSpans": "\xff\xfe not UTF-8"}',
    )
    body = bodies[variant % len(bodies)]
    return Request("malformed JSON", Transport.HTTP_JSON, body, (), expect=_REFUSED_INVALID)


def _lone_surrogate(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    """A lone surrogate escape (``\\ud800``) where OTLP/JSON needs text: a name, a key."""
    message, keys = _trace(traces, number)
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.name = "testbed-surrogate-name"
    span.attributes.append(
        common_pb2.KeyValue(
            key="testbed-surrogate-key", value=common_pb2.AnyValue(string_value="v")
        )
    )
    target = (b"testbed-surrogate-name", b"testbed-surrogate-key")[variant % 2]
    body = message_json(message).replace(target, target + b"\\ud800")
    return Request(
        "lone surrogate", Transport.HTTP_JSON, body, keys, expect=_INVALID_OR_STORED, exact=False
    )


def _escaped_surrogate_with_secret(
    traces: TraceSet, number: int, variant: int, limit: int
) -> Request:
    """A message body (JSON inside an attribute) with an escaped lone surrogate and an e-mail
    address, beside good spans in one request: the good spans must be stored as sent, the
    odd span stored redacted or rejected on its own, and nothing answered 500."""
    n = HOSTILE_TRACE_BASE + number
    specs = traces.trace(n)
    odd = trace_pb2.Span(
        trace_id=specs[0].trace_id,
        span_id=traces.span_id(n, SPANS_PER_TRACE),
        parent_span_id=specs[0].span_id,
        name="chat odd-body",
        start_time_unix_nano=specs[0].start_ns,
        end_time_unix_nano=specs[0].end_ns,
        attributes=[
            common_pb2.KeyValue(
                key="gen_ai.input.messages",
                value=common_pb2.AnyValue(
                    string_value='[{"role":"user","content":"write to jane.doe@example.com '
                    '\\ud83d"}]'
                ),
            )
        ],
    )
    message = to_request(specs, extra=[odd])
    transport = (Transport.GRPC, Transport.HTTP_JSON)[variant % 2]
    body = message_json(message) if transport is Transport.HTTP_JSON else encode_protobuf(message)
    return Request(
        "escaped lone surrogate beside a secret",
        transport,
        body,
        tuple(spec.key for spec in specs),
        loose_spans=(span_key(n, SPANS_PER_TRACE),),
    )


def _unauthenticated(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, keys = _trace(traces, number)
    transport = tuple(Transport)[variant % 3]
    body = message_json(message) if transport is Transport.HTTP_JSON else encode_protobuf(message)
    auth = (Auth.WRONG_KEY, Auth.NO_KEY)[(variant // 3) % 2]
    return Request(
        "unauthenticated",
        transport,
        body,
        keys,
        auth=auth,
        expect=frozenset({Outcome.UNAUTHENTICATED}),
    )


def _unsupported_media(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    message, keys = _trace(traces, number)
    return Request(
        "unsupported content type",
        Transport.HTTP_PROTOBUF,
        encode_protobuf(message),
        keys,
        content_type="text/plain",
        expect=frozenset({Outcome.UNSUPPORTED}),
    )


def _partial(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    """Good spans with two of malformed ids: those two rejected alone, the rest stored."""
    n = HOSTILE_TRACE_BASE + number
    specs = traces.trace(n)
    bad = [
        trace_pb2.Span(
            trace_id=specs[0].trace_id[:8],
            span_id=traces.span_id(n, 14),
            name="short trace id",
            start_time_unix_nano=specs[0].start_ns,
        ),
        trace_pb2.Span(
            trace_id=specs[0].trace_id,
            span_id=b"\x00" * 8,
            name="zero span id",
            start_time_unix_nano=specs[0].start_ns,
        ),
    ]
    message = to_request(specs, extra=bad)
    transport = tuple(Transport)[variant % 3]
    body = message_json(message) if transport is Transport.HTTP_JSON else encode_protobuf(message)
    return Request(
        "malformed ids beside good spans",
        transport,
        body,
        tuple(spec.key for spec in specs),
        bad_spans=2,
    )


def _implausible_times(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    """Good spans with two whose clocks are off (40 days back, 2 days ahead): those two
    rejected alone by the plausibility window, the rest stored."""
    n = HOSTILE_TRACE_BASE + number
    specs = traces.trace(n)
    day_ns = 86_400 * 1_000_000_000
    odd = [
        trace_pb2.Span(
            trace_id=specs[0].trace_id,
            span_id=traces.span_id(n, position),
            parent_span_id=specs[0].span_id,
            name=name,
            start_time_unix_nano=specs[0].start_ns + shift,
            end_time_unix_nano=specs[0].start_ns + shift + 1_000,
        )
        for position, name, shift in (
            (12, "stale clock", -40 * day_ns),
            (13, "clock ahead", 2 * day_ns),
        )
    ]
    message = to_request(specs, extra=odd)
    transport = tuple(Transport)[variant % 3]
    body = message_json(message) if transport is Transport.HTTP_JSON else encode_protobuf(message)
    return Request(
        "implausible timestamps beside good spans",
        transport,
        body,
        tuple(spec.key for spec in specs),
        bad_spans=2,
    )


def _huge(traces: TraceSet, number: int, variant: int, limit: int) -> Request:
    """Under the request limit but far over every name and value limit: stored, bounded."""
    message, keys = _trace(traces, number)
    resource = message.resource_spans[0].resource
    resource.attributes.append(
        common_pb2.KeyValue(
            key="testbed.huge.resource", value=common_pb2.AnyValue(string_value=_words(300 * _KiB))
        )
    )
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.name = _words(64 * _KiB)
    span.attributes.append(
        common_pb2.KeyValue(
            key="testbed.huge.value", value=common_pb2.AnyValue(string_value=_words(300 * _KiB))
        )
    )
    transport = (Transport.GRPC, Transport.HTTP_PROTOBUF)[variant % 2]
    return Request(
        "huge names and values",
        transport,
        encode_protobuf(message),
        (),
        loose_spans=keys,
        expect=frozenset({Outcome.ACKED}),
    )


KINDS: dict[str, Builder] = {
    "oversize": _oversize,
    "oversize, compressed": _oversize_compressed,
    "gzip bomb": _gzip_bomb,
    "malformed protobuf": _malformed_protobuf,
    "invalid UTF-8 in protobuf": _bad_utf8_protobuf,
    "malformed JSON": _malformed_json,
    "lone surrogate": _lone_surrogate,
    "escaped lone surrogate beside a secret": _escaped_surrogate_with_secret,
    "unauthenticated": _unauthenticated,
    "unsupported content type": _unsupported_media,
    "malformed ids beside good spans": _partial,
    "implausible timestamps beside good spans": _implausible_times,
    "huge names and values": _huge,
}


def hostile_requests(
    traces: TraceSet, count: int, *, max_request_bytes: int, kinds: Sequence[str] | None = None
) -> list[Request]:
    """``count`` hostile requests, the ``kinds`` (default: all) in turn; every one has its
    own trace number, so its spans are told apart in the store."""
    chosen = list(kinds or KINDS)
    return [
        KINDS[chosen[number % len(chosen)]](
            traces, number, number // len(chosen), max_request_bytes
        )
        for number in range(count)
    ]
