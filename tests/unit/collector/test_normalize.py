"""Every instrumentation dialect, replayed from a recorded OTLP payload, normalizes to the
right span types (payloads recorded from real runs of the canonical incident; see
tests/data/dialects/NOTES.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from collector.decode import decode_json, to_records
from collector.model import SpanRecord
from collector.processors.normalize import BODY_ATTRIBUTE_BYTES, normalize

DIALECTS = Path(__file__).parents[2] / "data" / "dialects"

EXPECTED = {
    "openinference": {
        "workflow": 1,
        "task": 1,
        "agent": 2,
        "turn": 3,
        "guardrail": 1,
        "llm": 3,
        "handoff": 1,
        "tool": 1,
    },
    "openllmetry": {"workflow": 1, "agent": 2, "llm": 3, "handoff": 1, "tool": 1},
    # The -v2 package itself does not know the SDK's task and turn spans ("unknown").
    "contrib_v2": {
        "workflow": 1,
        "other": 4,
        "agent": 2,
        "guardrail": 1,
        "llm": 3,
        "handoff": 1,
        "tool": 1,
    },
    "logfire": {
        "workflow": 1,
        "task": 1,
        "agent": 2,
        "turn": 3,
        "guardrail": 1,
        "llm": 3,
        "handoff": 1,
        "tool": 1,
    },
    "plain_genai": {"agent": 2, "llm": 3, "handoff": 1, "tool": 1},
}
DIALECT_NAMES = {
    "openinference": "openinference",
    "openllmetry": "openllmetry",
    "contrib_v2": "otel-contrib-v2",
    "logfire": "logfire",
    "plain_genai": "genai",
}


def load(name: str) -> list[SpanRecord]:
    request = decode_json((DIALECTS / f"{name}.json").read_bytes())
    result = to_records(request, "p", 1)
    assert result.rejected == 0
    return normalize(result.records)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dialect_span_types(name: str) -> None:
    records = load(name)
    assert Counter(r.span_type for r in records) == Counter(EXPECTED[name])
    assert {r.dialect for r in records} == {DIALECT_NAMES[name]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dialect_failing_tool_span(name: str) -> None:
    (tool,) = [r for r in load(name) if r.span_type == "tool"]
    assert tool.tool_name == "refund_order"
    assert tool.status_code == "Error"
    assert tool.error_type
    assert "12.OO" in tool.input, "tool arguments become the Input body"
    agents = {r.agent_name for r in load(name) if r.span_type == "agent"}
    assert agents == {"Triage Agent", "Refund Agent"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bodies_leave_the_attribute_map(name: str) -> None:
    for record in load(name):
        assert all(len(v) <= BODY_ATTRIBUTE_BYTES for v in record.span_attributes.values())
        restored = record.original_attributes()
        assert set(restored) >= set(record.span_attributes)
    llm = [r for r in load(name) if r.span_type == "llm"]
    assert all(r.model == "gpt-4.1-mini" for r in llm)


def test_unknown_spans_are_kept_as_other() -> None:
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": "db"},
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "startTimeUnixNano": "1764000000000000000",
                                "name": "SELECT orders",
                                "attributes": [
                                    {"key": "db.system", "value": {"stringValue": "postgresql"}}
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    records = normalize(to_records(decode_json(json.dumps(body).encode()), "p", 1).records)
    assert [(r.span_type, r.span_name) for r in records] == [("other", "SELECT orders")]


def test_text_sent_as_bytes_stays_text_binary_stays_base64() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    span = trace_pb2.Span(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="s",
        start_time_unix_nano=1_764_000_000_000_000_000,
        attributes=[
            common_pb2.KeyValue(
                key="text", value=common_pb2.AnyValue(bytes_value=b"mail jane@example.com")
            ),
            common_pb2.KeyValue(key="blob", value=common_pb2.AnyValue(bytes_value=b"\xff\x00\x01")),
        ],
    )
    request = ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[span])])]
    )
    (record,) = to_records(request, "p", 1).records
    assert record.span_attributes == {"text": "mail jane@example.com", "blob": "base64:/wAB"}
