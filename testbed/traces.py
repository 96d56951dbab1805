"""Deterministic agent-like traces: every span's ids say which trace and position it is, and
its whole content is a pure function of (seed, base time, trace number, position).

So the validator needs no copy of what was sent: it reads a stored span's ids back into its
key and regenerates the span it must equal. The content is designed to pass the collector's
documented processing unchanged (no secrets, so redaction fires nothing; every value, name
and resource under the truncation limits) while still exercising it: JSON message bodies
that normalization moves into Input/Output, attributes over 1 KiB that move into
BodyAttributes, every attribute type, events, links, trace states, non-ASCII text.

A span key is ``trace_number * KEY_STRIDE + position``; ids embed both, behind a hash of
the seed, so a stored span from anywhere else is recognised as "not sent".
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = [
    "KEY_STRIDE",
    "SPANS_PER_TRACE",
    "AttrValue",
    "EventSpec",
    "LinkSpec",
    "SpanSpec",
    "TraceSet",
    "attribute_text",
    "encode_json",
    "encode_protobuf",
    "expected_fields",
    "message_json",
    "span_key",
    "split_key",
    "to_request",
]

SPANS_PER_TRACE = 9
KEY_STRIDE = 16
TRACE_SPACING_NS = 1_000_000
_TIME_SLOTS = 1 << 20
MODELS = ("gpt-4.1-mini", "gpt-4.1", "o4-mini")

AttrValue = str | bool | int | float | list[str]

# Plain words, and a few non-ASCII ones so UTF-8 is carried through every hop. No digits
# runs, no '@', no key=value shapes: nothing a redaction rule could take for a secret.
_WORDS = (
    "refund",
    "order",
    "customer",
    "charged",
    "twice",
    "duplicate",
    "amount",
    "please",
    "process",
    "the",
    "payment",
    "card",
    "shipment",
    "late",
    "apology",
    "policy",
    "window",
    "approve",
    "café",
    "naïve",
    "crème",
    "Zürich",
    "日本語",
    "データ",
    "🚀",
    "ok",
)

_KINDS = {
    "workflow": trace_pb2.Span.SPAN_KIND_SERVER,
    "agent": trace_pb2.Span.SPAN_KIND_INTERNAL,
    "guardrail": trace_pb2.Span.SPAN_KIND_INTERNAL,
    "response": trace_pb2.Span.SPAN_KIND_CLIENT,
    "handoff": trace_pb2.Span.SPAN_KIND_INTERNAL,
    "function": trace_pb2.Span.SPAN_KIND_INTERNAL,
}
_KIND_NAMES = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
_STATUS_NAMES = ("Unset", "Ok", "Error")
# afr.span.type -> the SpanType normalization documents for afr's own dialect.
_SPAN_TYPES = {
    "workflow": "workflow",
    "agent": "agent",
    "guardrail": "guardrail",
    "response": "llm",
    "handoff": "handoff",
    "function": "tool",
}
# (name, afr.span.type, parent position) of the nine spans of a trace.
_SHAPE: tuple[tuple[str, str, int | None], ...] = (
    ("invoke_workflow refund-desk", "workflow", None),
    ("invoke_agent Triage Agent", "agent", 0),
    ("guardrail abuse_screen", "guardrail", 1),
    ("chat {model}", "response", 1),
    ("handoff Triage Agent -> Refund Agent", "handoff", 1),
    ("invoke_agent Refund Agent", "agent", 0),
    ("chat {model}", "response", 5),
    ("execute_tool refund_order", "function", 5),
    ("chat {model}", "response", 5),
)


def span_key(trace_number: int, position: int) -> int:
    return trace_number * KEY_STRIDE + position


def split_key(key: int) -> tuple[int, int]:
    return divmod(key, KEY_STRIDE)


@dataclass(frozen=True)
class EventSpec:
    time_ns: int
    name: str
    attributes: Mapping[str, AttrValue]


@dataclass(frozen=True)
class LinkSpec:
    trace_id: bytes
    span_id: bytes
    trace_state: str
    attributes: Mapping[str, AttrValue]


@dataclass(frozen=True)
class SpanSpec:
    key: int
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    trace_state: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttrValue]
    status_code: int
    status_message: str
    resource: Mapping[str, AttrValue]
    scope_name: str
    scope_version: str
    events: tuple[EventSpec, ...] = ()
    links: tuple[LinkSpec, ...] = ()
    derived: Mapping[str, Any] = field(default_factory=dict)
    """What normalization documents for this span (SpanType, Model, ...)."""


_CORPUS = " ".join(random.Random("afr-testbed-corpus").choices(_WORDS, k=32_768))


def _text(rng: random.Random, size: int) -> str:
    """``size`` characters of words from a random place in a fixed corpus."""
    start = _CORPUS.index(" ", rng.randrange(len(_CORPUS) - size - 64)) + 1
    return _CORPUS[start : start + size]


@dataclass(frozen=True)
class TraceSet:
    """The traces of one run: ``seed`` tells runs apart, ``base_ns`` anchors their times
    (recent, so any plausibility window holds them)."""

    seed: int
    base_ns: int

    @functools.cached_property
    def _tag(self) -> bytes:
        return hashlib.blake2b(f"afr-testbed:{self.seed}".encode(), digest_size=8).digest()

    def trace_id(self, trace_number: int) -> bytes:
        return self._tag + trace_number.to_bytes(8, "big")

    def span_id(self, trace_number: int, position: int) -> bytes:
        digest = hashlib.blake2b(
            self.trace_id(trace_number) + bytes([position]), digest_size=7
        ).digest()
        return digest + bytes([position + 1])

    def key_of(self, trace_id_hex: str, span_id_hex: str) -> int | None:
        """The key of a stored span, or None when this run never made those ids."""
        try:
            trace_id, span_id = bytes.fromhex(trace_id_hex), bytes.fromhex(span_id_hex)
        except ValueError:
            return None
        if len(trace_id) != 16 or len(span_id) != 8 or trace_id[:8] != self._tag:
            return None
        trace_number = int.from_bytes(trace_id[8:], "big")
        position = span_id[7] - 1
        if not 0 <= position < KEY_STRIDE or self.span_id(trace_number, position) != span_id:
            return None
        return span_key(trace_number, position)

    def span(self, key: int) -> SpanSpec:
        trace_number, position = split_key(key)
        return self.trace(trace_number)[position]

    def spans(self, keys: Iterable[int]) -> list[SpanSpec]:
        return [self.span(key) for key in keys]

    @functools.lru_cache(maxsize=256)  # noqa: B019 - a few TraceSets per process, each small
    def trace(self, trace_number: int) -> tuple[SpanSpec, ...]:
        """The nine spans of one agent run: workflow, two agents, guardrail, handoff, three
        model calls, one tool call (an error every fourth trace)."""
        rng = random.Random(f"{self.seed}:{trace_number}")
        n = trace_number
        # Within ~17 minutes of the base whatever the number (hostile traces' numbers are
        # huge): every span starts where a collector's plausibility window takes it.
        start = self.base_ns + (n % _TIME_SLOTS) * TRACE_SPACING_NS
        model = MODELS[n % len(MODELS)]
        resource: dict[str, AttrValue] = {
            "service.name": f"testbed-agent-{n % 3}",
            "deployment.environment": "testbed",
            "host.name": f"host-{'abcde'[n % 5]}",
            "process.runtime.name": "CPython",
        }
        scope_name, scope_version = "afr.testbed", f"1.{n % 4}.0"
        ids = [self.span_id(n, p) for p in range(SPANS_PER_TRACE)]
        trace_id = self.trace_id(n)
        failed = n % 4 == 0
        spans: list[SpanSpec] = []
        for position, (template, kind, parent) in enumerate(_SHAPE):
            offset = position * 2_000_000
            begin = start + offset
            end = begin + rng.randrange(100_000, 1_900_000)
            attributes: dict[str, AttrValue] = {
                "afr.span.type": kind,
                "testbed.trace": n,
                "testbed.position": position,
                "testbed.cached": n % 2 == 0,
                "testbed.temperature": (n % 4) * 0.25,
                "testbed.tags": ["alpha", "beta", f"t{n % 7}"],
            }
            derived: dict[str, Any] = {"SpanType": _SPAN_TYPES[kind]}
            events: list[EventSpec] = []
            links: list[LinkSpec] = []
            status_code, status_message = trace_pb2.Status.STATUS_CODE_UNSET, ""
            if kind == "agent":
                agent = template.removeprefix("invoke_agent ")
                attributes["gen_ai.agent.name"] = agent
                derived["AgentName"] = agent
            elif kind == "handoff":
                attributes["afr.handoff.from_agent"] = "Triage Agent"
                attributes["afr.handoff.to_agent"] = "Refund Agent"
                derived["AgentName"] = "Triage Agent"
            elif kind == "guardrail":
                attributes["afr.guardrail.name"] = "abuse_screen"
                attributes["afr.guardrail.triggered"] = False
            if kind == "response":
                input_tokens, output_tokens = rng.randrange(50, 900), rng.randrange(10, 300)
                messages = [
                    {"role": "system", "parts": [{"type": "text", "content": _text(rng, 120)}]},
                    {
                        "role": "user",
                        "parts": [{"type": "text", "content": _text(rng, rng.randrange(80, 1400))}],
                    },
                ]
                output = [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": _text(rng, rng.randrange(40, 400))}],
                    }
                ]
                attributes.update(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": model,
                        "gen_ai.input.messages": json.dumps(messages, ensure_ascii=False),
                        "gen_ai.output.messages": json.dumps(output, ensure_ascii=False),
                        "gen_ai.usage.input_tokens": input_tokens,
                        "gen_ai.usage.output_tokens": output_tokens,
                    }
                )
                derived.update(
                    {"Model": model, "InputTokens": input_tokens, "OutputTokens": output_tokens}
                )
                events.append(
                    EventSpec(begin + 50_000, "gen_ai.content.chunk", {"index": 0, "final": True})
                )
                if n > 0:  # every model call links to the previous run's root
                    links.append(
                        LinkSpec(
                            self.trace_id(n - 1),
                            self.span_id(n - 1, 0),
                            "testbed=previous",
                            {"afr.link.role": "previous-run"},
                        )
                    )
            elif kind == "function":
                call_id = f"call_{trace_id.hex()[16:]}"
                attributes.update(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "refund_order",
                        "gen_ai.tool.call.id": call_id,
                        "gen_ai.tool.call.arguments": json.dumps(
                            {"order_id": f"A-{n % 9000 + 1000}", "note": _text(rng, 200)},
                            ensure_ascii=False,
                        ),
                        "gen_ai.tool.call.result": json.dumps(
                            {"ok": not failed, "detail": _text(rng, 150)}, ensure_ascii=False
                        ),
                    }
                )
                derived.update({"ToolName": "refund_order", "ToolCallId": call_id})
                if failed:
                    status_code = trace_pb2.Status.STATUS_CODE_ERROR
                    status_message = "Error running tool (non-fatal)"
                    events.append(
                        EventSpec(
                            end - 1_000,
                            "exception",
                            {"exception.type": "ValueError", "exception.message": "bad amount"},
                        )
                    )
            elif kind != "response":
                # Some of these notes are over 1 KiB: normalization moves them to BodyAttributes.
                attributes["afr.note"] = _text(rng, rng.randrange(60, 1600))
            spans.append(
                SpanSpec(
                    key=span_key(n, position),
                    trace_id=trace_id,
                    span_id=ids[position],
                    parent_span_id=b"" if parent is None else ids[parent],
                    trace_state="testbed=1" if position == 0 else "",
                    name=template.format(model=model),
                    kind=_KINDS[kind],
                    start_ns=begin,
                    end_ns=end,
                    attributes=attributes,
                    status_code=status_code,
                    status_message=status_message,
                    resource=resource,
                    scope_name=scope_name,
                    scope_version=scope_version,
                    events=tuple(events),
                    links=tuple(links),
                    derived=derived,
                )
            )
        return tuple(spans)


# --- encoding ----------------------------------------------------------------------------


def _any_value(value: AttrValue) -> common_pb2.AnyValue:
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, list):
        return common_pb2.AnyValue(
            array_value=common_pb2.ArrayValue(values=[_any_value(v) for v in value])
        )
    return common_pb2.AnyValue(string_value=value)


def _key_values(attributes: Mapping[str, AttrValue]) -> list[common_pb2.KeyValue]:
    return [common_pb2.KeyValue(key=k, value=_any_value(v)) for k, v in attributes.items()]


def _span_proto(spec: SpanSpec) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=spec.trace_id,
        span_id=spec.span_id,
        parent_span_id=spec.parent_span_id,
        trace_state=spec.trace_state,
        name=spec.name,
        kind=spec.kind,  # type: ignore[arg-type]
        start_time_unix_nano=spec.start_ns,
        end_time_unix_nano=spec.end_ns,
        attributes=_key_values(spec.attributes),
        events=[
            trace_pb2.Span.Event(
                time_unix_nano=e.time_ns, name=e.name, attributes=_key_values(e.attributes)
            )
            for e in spec.events
        ],
        links=[
            trace_pb2.Span.Link(
                trace_id=link.trace_id,
                span_id=link.span_id,
                trace_state=link.trace_state,
                attributes=_key_values(link.attributes),
            )
            for link in spec.links
        ],
        status=trace_pb2.Status(code=spec.status_code, message=spec.status_message),  # type: ignore[arg-type]
    )


def to_request(
    specs: Sequence[SpanSpec], extra: Sequence[trace_pb2.Span] = ()
) -> ExportTraceServiceRequest:
    """One ResourceSpans per (resource, scope) run of consecutive spans, as SDKs batch them;
    ``extra`` spans (hostile ones) go into the last scope."""
    request = ExportTraceServiceRequest()
    current: Any = None
    last: tuple[Any, ...] | None = None
    for spec in specs:
        group = (tuple(spec.resource.items()), spec.scope_name, spec.scope_version)
        if group != last:
            resource_spans = request.resource_spans.add()
            resource_spans.resource.CopyFrom(
                resource_pb2.Resource(attributes=_key_values(spec.resource))
            )
            current = resource_spans.scope_spans.add()
            current.scope.name, current.scope.version = spec.scope_name, spec.scope_version
            last = group
        current.spans.append(_span_proto(spec))
    if extra:
        if current is None:
            current = request.resource_spans.add().scope_spans.add()
        current.spans.extend(extra)
    return request


def encode_protobuf(request: ExportTraceServiceRequest) -> bytes:
    return bytes(request.SerializeToString())


def _json_value(value: AttrValue) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 as a decimal string (proto3 JSON)
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_value(v) for v in value]}}
    return {"stringValue": value}


def _json_attributes(attributes: Mapping[str, AttrValue]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attributes.items()]


def _json_span(spec: SpanSpec) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": spec.trace_id.hex(),
        "spanId": spec.span_id.hex(),
        "name": spec.name,
        "kind": spec.kind,
        "startTimeUnixNano": str(spec.start_ns),
        "endTimeUnixNano": str(spec.end_ns),
        "attributes": _json_attributes(spec.attributes),
        "status": {"code": spec.status_code, "message": spec.status_message},
    }
    if spec.parent_span_id:
        span["parentSpanId"] = spec.parent_span_id.hex()
    if spec.trace_state:
        span["traceState"] = spec.trace_state
    if spec.events:
        span["events"] = [
            {
                "timeUnixNano": str(e.time_ns),
                "name": e.name,
                "attributes": _json_attributes(e.attributes),
            }
            for e in spec.events
        ]
    if spec.links:
        span["links"] = [
            {
                "traceId": link.trace_id.hex(),
                "spanId": link.span_id.hex(),
                "traceState": link.trace_state,
                "attributes": _json_attributes(link.attributes),
            }
            for link in spec.links
        ]
    return span


def encode_json(specs: Sequence[SpanSpec]) -> bytes:
    """OTLP/JSON, written from the specs as the OTLP specification spells it (hex ids,
    64-bit integers as strings, enums as integers), not through protobuf's own JSON
    mapping: a second encoder, so the two transports are checked against each other."""
    resource_spans: list[dict[str, Any]] = []
    last: tuple[Any, ...] | None = None
    spans: list[dict[str, Any]] = []
    for spec in specs:
        group = (tuple(spec.resource.items()), spec.scope_name, spec.scope_version)
        if group != last:
            spans = []
            resource_spans.append(
                {
                    "resource": {"attributes": _json_attributes(spec.resource)},
                    "scopeSpans": [
                        {
                            "scope": {"name": spec.scope_name, "version": spec.scope_version},
                            "spans": spans,
                        }
                    ],
                }
            )
            last = group
        spans.append(_json_span(spec))
    return json.dumps(
        {"resourceSpans": resource_spans}, ensure_ascii=False, separators=(",", ":")
    ).encode()


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _ids_to_hex(node: Any) -> None:
    if isinstance(node, dict):
        for name in _ID_FIELDS:
            if isinstance(node.get(name), str):
                node[name] = base64.b64decode(node[name]).hex()
        for child in node.values():
            _ids_to_hex(child)
    elif isinstance(node, list):
        for child in node:
            _ids_to_hex(child)


def message_json(request: ExportTraceServiceRequest) -> bytes:
    """Any request as OTLP/JSON through protobuf's JSON mapping (for hostile variants of
    requests no spec describes)."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    _ids_to_hex(document)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


# --- what the store must hold ------------------------------------------------------------


def attribute_text(value: AttrValue) -> str:
    """An attribute as the store's ``Map(String, String)`` keeps it (docs/collector.md: values come back
    as strings): ints in decimal, booleans as true/false, arrays as compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _texts(attributes: Mapping[str, AttrValue]) -> dict[str, str]:
    return {key: attribute_text(value) for key, value in attributes.items()}


def expected_fields(spec: SpanSpec, project: str) -> dict[str, Any]:
    """The stored row this span must read back as, in the validator's dump format."""
    fields: dict[str, Any] = {
        "ProjectId": project,
        "TraceId": spec.trace_id.hex(),
        "SpanId": spec.span_id.hex(),
        "ParentSpanId": spec.parent_span_id.hex(),
        "TraceState": spec.trace_state,
        "SpanName": spec.name,
        "SpanKind": _KIND_NAMES[spec.kind],
        "ServiceName": attribute_text(spec.resource.get("service.name", "unknown_service")),
        "ResourceAttributes": _texts(spec.resource),
        "ScopeName": spec.scope_name,
        "ScopeVersion": spec.scope_version,
        "Attributes": _texts(spec.attributes),
        "StartNs": spec.start_ns,
        "Duration": max(0, spec.end_ns - spec.start_ns),
        "StatusCode": _STATUS_NAMES[spec.status_code],
        "StatusMessage": spec.status_message,
        "Events": [[e.time_ns, e.name, _texts(e.attributes)] for e in spec.events],
        "Links": [
            [link.trace_id.hex(), link.span_id.hex(), link.trace_state, _texts(link.attributes)]
            for link in spec.links
        ],
        "Redactions": [],
        "Truncated": False,
        "SpanType": "other",
        "AgentName": "",
        "ToolName": "",
        "ToolCallId": "",
        "Model": "",
        "InputTokens": 0,
        "OutputTokens": 0,
    }
    fields.update(spec.derived)
    return fields
