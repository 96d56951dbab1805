"""Every instrumentation dialect, replayed from a recorded OTLP payload, normalizes to the
same run: span types, agents, tools, tool-call ids, names, error types and bodies (payloads
recorded from real runs of the canonical incident on both model APIs; see
tests/data/dialects/NOTES.md). Per-span results never depend on which other spans came in the
same batch; what needs the whole trace comes from ``normalize_trace``."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from collector.decode import decode_json, to_records
from collector.model import SpanRecord
from collector.processors.normalize import (
    BODY_ATTRIBUTE_BYTES,
    canonical_error_type,
    normalize,
    normalize_trace,
    render_template,
)
from tests.dialects import (
    PLAIN_GENAI,
    RECORDINGS,
    SDK_TOOL_ERROR,
    Recording,
    one_request_per_span,
    request_body,
)

ALL = (*RECORDINGS, PLAIN_GENAI)
LOGFIRE = tuple(r for r in RECORDINGS if r.dialect == "logfire")


def decoded(body: dict[str, object]) -> list[SpanRecord]:
    result = to_records(decode_json(json.dumps(body).encode()), "p", 1)
    assert result.rejected == 0
    return result.records


def whole_trace(recording: Recording) -> list[SpanRecord]:
    """One request holds the trace: ingest, then the read view's trace-level pass."""
    records = normalize(decoded(request_body(recording)))
    normalize_trace(records)
    return records


def span_by_span(recording: Recording, seed: int = 7) -> list[SpanRecord]:
    """Each span ingested alone (shuffled, root last); the read view sees them all."""
    records = []
    for request in one_request_per_span(request_body(recording), seed):
        records += normalize(decoded(request))
    random.Random(seed).shuffle(records)
    normalize_trace(records)
    return records


def view(records: list[SpanRecord]) -> list[tuple[str, ...]]:
    """What a user of the run sees, in a stable order."""
    return sorted(
        (
            r.span_id,
            r.span_name,
            r.span_type,
            r.agent_name,
            r.tool_name,
            r.tool_call_id,
            r.error_type,
            r.input,
            r.output,
        )
        for r in records
    )


def ids(recordings: tuple[Recording, ...]) -> list[str]:
    return [r.name for r in recordings]


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_whole_trace_span_types_and_dialect(recording: Recording) -> None:
    records = whole_trace(recording)
    assert Counter(r.span_type for r in records) == recording.span_types
    assert {r.dialect for r in records} == {recording.dialect}


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_batching_never_changes_the_run(recording: Recording) -> None:
    assert view(span_by_span(recording)) == view(whole_trace(recording))
    assert view(span_by_span(recording, seed=8)) == view(whole_trace(recording))


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_stored_span_types_are_per_span(recording: Recording) -> None:
    """What ingest stores for a span is the same whatever else its request held."""
    alone = {
        r.span_id: r.span_type
        for request in one_request_per_span(request_body(recording), 3)
        for r in normalize(decoded(request))
    }
    together = {r.span_id: r.span_type for r in normalize(decoded(request_body(recording)))}
    assert alone == together


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_failing_tool_span(recording: Recording) -> None:
    (tool,) = [r for r in whole_trace(recording) if r.span_type == "tool"]
    assert tool.tool_name == "refund_order"
    assert tool.tool_call_id == "call_refund_1", "joined from the model span that asked for it"
    assert tool.status_code == "Error"
    assert "12.OO" in tool.input, "tool arguments become the Input body"
    assert "{" not in tool.span_name, "names are rendered, never templates"
    if recording is not PLAIN_GENAI:
        assert tool.error_type == SDK_TOOL_ERROR


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_agents_are_the_runs_agents(recording: Recording) -> None:
    records = whole_trace(recording)
    assert {r.agent_name for r in records if r.span_type == "agent"} == {
        "Triage Agent",
        "Refund Agent",
    }
    assert {r.agent_name for r in records} <= {"", "Triage Agent", "Refund Agent"}


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_model_spans_have_model_and_input(recording: Recording) -> None:
    llm = [r for r in whole_trace(recording) if r.span_type == "llm"]
    assert all(r.model == "gpt-4.1-mini" for r in llm)
    assert all("A-1001" in r.input for r in llm), "the user message is in every model input"


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_bodies_leave_the_attribute_map(recording: Recording) -> None:
    for record in whole_trace(recording):
        assert all(len(v) <= BODY_ATTRIBUTE_BYTES for v in record.span_attributes.values())
        restored = record.original_attributes()
        assert set(restored) >= set(record.span_attributes)


@pytest.mark.parametrize("recording", LOGFIRE, ids=ids(LOGFIRE))
def test_logfire_names_are_rendered_like_logfire_renders_them(recording: Recording) -> None:
    records = whole_trace(recording)
    for record in records:
        attributes = record.original_attributes()
        if record.status_code != "Error":
            assert record.span_name == attributes["logfire.msg"]
    (root,) = [r for r in records if r.span_type == "workflow"]
    assert root.span_name == "OpenAI Agents trace: refund-desk"
    assert root.span_attributes["gen_ai.workflow.name"] == "refund-desk"
    (tool,) = [r for r in records if r.span_type == "tool"]
    assert tool.span_name == "Function: refund_order"
    assert tool.span_attributes["logfire.msg_template"] == "Function: {name}", "template kept"


def test_the_original_error_text_is_kept() -> None:
    for recording in RECORDINGS:
        (tool,) = [r for r in whole_trace(recording) if r.span_type == "tool"]
        original = tool.status_message or tool.original_attributes()["error"]
        assert "Tool execution failed" in original, recording.name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SDK_TOOL_ERROR, SDK_TOOL_ERROR),
        (f"{SDK_TOOL_ERROR}: {{'tool_name': 'refund_order', 'error': 'x'}}", SDK_TOOL_ERROR),
        (f"{{'message': '{SDK_TOOL_ERROR}', 'data': {{'tool_name': 'r'}}}}", SDK_TOOL_ERROR),
        (json.dumps({"message": SDK_TOOL_ERROR, "data": {"tool_name": "r"}}), SDK_TOOL_ERROR),
        ("Error running tool: {'tool_name': 'r'}", "Error running tool"),
        ("Max turns exceeded: {'max_turns': 3}", "Max turns exceeded"),
        ("Guardrail tripwire triggered: None", "Guardrail tripwire triggered"),
        ("Custom failure: {'k': 1}", "Custom failure"),
        ("agents.exceptions.ModelBehaviorError", "agents.exceptions.ModelBehaviorError"),
        ("{'message': \"it's broken\", 'data': None}", "it's broken"),
        ("{not json", "{not json"),
        ("x" * 500, "x" * 200),
    ],
)
def test_canonical_error_type(text: str, expected: str) -> None:
    assert canonical_error_type(text) == expected


@pytest.mark.parametrize(
    ("template", "attributes", "rendered"),
    [
        ("Function: {name}", {"name": "refund_order"}, "Function: refund_order"),
        ("Agent run: {name!r}", {"name": "Triage Agent"}, "Agent run: 'Triage Agent'"),
        (
            "Guardrail {name!r} {triggered=}",
            {"name": "abuse_screen", "triggered": "false"},
            "Guardrail 'abuse_screen' triggered=False",
        ),
        ("Turn {turn} for agent A", {"turn": "2"}, "Turn 2 for agent A"),
        (
            "Responses API with {gen_ai.request.model!r}",
            {},
            "Responses API with {gen_ai.request.model!r}",
        ),
    ],
)
def test_render_template(template: str, attributes: dict[str, str], rendered: str) -> None:
    assert render_template(template, attributes) == rendered


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


def _set_usage(body: dict[str, object], changes: dict[str, object]) -> dict[str, object]:
    """The recording with these attributes of its spans set (int, or a JSON object)."""
    for resource in body["resourceSpans"]:  # type: ignore[attr-defined]
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for attribute in span.get("attributes", []):
                    if attribute["key"] in changes:
                        value = changes[attribute["key"]]
                        attribute["value"] = (
                            {"intValue": str(value)}
                            if isinstance(value, int)
                            else {"stringValue": json.dumps(value)}
                        )
    return body


# What each recorded instrumentation sends the cache and reasoning tokens as (they are 0 in
# the recordings: the scripted model cached nothing), set to figures of our own.
USAGE_DETAILS: dict[str, dict[str, object]] = {
    "openinference": {
        "llm.token_count.prompt_details.cache_read": 90,
        "llm.token_count.completion_details.reasoning": 7,
    },
    "openllmetry": {"gen_ai.usage.cache_read.input_tokens": 90, "gen_ai.usage.reasoning_tokens": 7},
    "logfire": {
        "gen_ai.usage.raw": {
            "input_tokens": 130,
            "input_tokens_details": {"cached_tokens": 90},
            "output_tokens": 39,
            "output_tokens_details": {"reasoning_tokens": 7},
        }
    },
}
DETAILED = tuple(r for r in RECORDINGS if r.name in USAGE_DETAILS)


@pytest.mark.parametrize("recording", DETAILED, ids=ids(DETAILED))
def test_cache_and_reasoning_tokens_under_each_dialects_names(recording: Recording) -> None:
    body = _set_usage(request_body(recording), USAGE_DETAILS[recording.name])
    llm = [r for r in normalize(decoded(body)) if r.span_type == "llm"]
    assert llm
    assert [(r.cache_read_tokens, r.reasoning_tokens) for r in llm] == [(90, 7)] * len(llm)
    assert all(r.input_tokens >= r.cache_read_tokens for r in llm)


@pytest.mark.parametrize("recording", ALL, ids=ids(ALL))
def test_recordings_without_cached_tokens_have_none(recording: Recording) -> None:
    records = whole_trace(recording)
    assert not any(r.cache_read_tokens or r.cache_creation_tokens for r in records)
    assert not any(r.reasoning_tokens for r in records)
