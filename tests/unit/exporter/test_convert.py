"""Pure span conversion: every SDK span type, ids, errors, unknown types, content off."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents.tracing.span_data import (
    AgentSpanData,
    CustomSpanData,
    FunctionSpanData,
    GenerationSpanData,
    GuardrailSpanData,
    HandoffSpanData,
    MCPListToolsSpanData,
    ResponseSpanData,
    SpanData,
    SpeechGroupSpanData,
    SpeechSpanData,
    TaskSpanData,
    TranscriptionSpanData,
    TurnSpanData,
)
from agents.tracing.spans import SpanImpl
from agents.tracing.traces import TraceImpl
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import StatusCode

from afr_exporter import semconv as sc
from afr_exporter.convert import (
    SpanConverter,
    iso_to_ns,
    otel_span_id,
    otel_trace_id,
    workflow_span_id,
)
from tests.fakes import RecordingProcessor

TRACE_ID = "trace_0123456789abcdef0123456789abcdef"


def make_span(
    data: SpanData,
    *,
    span_id: str | None = None,
    parent_id: str | None = None,
    error: dict[str, Any] | None = None,
) -> SpanImpl[Any]:
    span: SpanImpl[Any] = SpanImpl(
        trace_id=TRACE_ID,
        span_id=span_id,
        parent_id=parent_id,
        processor=RecordingProcessor(),  # type: ignore[arg-type]
        span_data=data,
        tracing_api_key=None,
    )
    span.start()
    if error is not None:
        span.set_error(error)  # type: ignore[arg-type]
    span.finish()
    return span


@pytest.fixture
def converter() -> SpanConverter:
    return SpanConverter(Resource.create({"service.name": "unit"}))


def test_ids_are_exact_and_deterministic() -> None:
    assert otel_trace_id(TRACE_ID) == 0x0123456789ABCDEF0123456789ABCDEF
    assert otel_span_id("span_0123456789abcdef01234567") == 0x0123456789ABCDEF
    # Non-conforming ids (custom ids are not validated by the SDK) hash stably, never to 0.
    assert otel_span_id("my-span") == otel_span_id("my-span") != 0
    assert otel_trace_id("trace_not-hex") == otel_trace_id("trace_not-hex") != 0
    assert workflow_span_id(TRACE_ID) == workflow_span_id(TRACE_ID)
    assert workflow_span_id(TRACE_ID) != workflow_span_id("trace_" + "f" * 32)


def test_reconverting_the_same_span_yields_the_same_ids_and_times(converter: SpanConverter) -> None:
    span = make_span(
        AgentSpanData(name="A"),
        span_id="span_aaaaaaaaaaaaaaaabbbbbbbb",
        parent_id="span_cccccccccccccccc00000000",
    )
    first, second = converter.convert(span), SpanConverter(Resource.create({})).convert(span)
    assert first.context is not None and second.context is not None
    assert (first.context.trace_id, first.context.span_id) == (
        second.context.trace_id,
        second.context.span_id,
    )
    assert first.parent is not None and first.parent.span_id == 0xCCCCCCCCCCCCCCCC
    assert first.start_time == second.start_time == iso_to_ns(span.started_at)


def test_top_level_span_hangs_under_the_workflow_root(converter: SpanConverter) -> None:
    span = make_span(TaskSpanData(name="wf", usage={"input_tokens": 3}))
    converted = converter.convert(span)
    assert converted.parent is not None and converted.parent.span_id == workflow_span_id(TRACE_ID)
    attrs = dict(converted.attributes or {})
    assert attrs[sc.AFR_SPAN_TYPE] == "task"
    assert json.loads(str(attrs[sc.AFR_USAGE_AGGREGATE])) == {"input_tokens": 3}
    # Aggregates are never reported as gen_ai usage, so nothing sums them twice.
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in attrs


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (
            AgentSpanData(name="Refund Agent", handoffs=["X"], tools=["t"], output_type="str"),
            "invoke_agent Refund Agent",
            {
                sc.GEN_AI_OPERATION_NAME: "invoke_agent",
                sc.GEN_AI_AGENT_NAME: "Refund Agent",
                sc.AFR_AGENT_HANDOFFS: ("X",),
                sc.AFR_AGENT_TOOLS: ("t",),
            },
        ),
        (
            TurnSpanData(turn=2, agent_name="B"),
            "turn 2 B",
            {sc.AFR_TURN_NUMBER: 2, sc.GEN_AI_AGENT_NAME: "B"},
        ),
        (
            FunctionSpanData(name="lookup", input='{"q": 1}', output={"hits": 2}),
            "execute_tool lookup",
            {
                sc.GEN_AI_TOOL_NAME: "lookup",
                sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"q": 1}',
                sc.GEN_AI_TOOL_CALL_RESULT: '{"hits":2}',
            },
        ),
        (
            HandoffSpanData(from_agent="A", to_agent="B"),
            "handoff A -> B",
            {sc.AFR_HANDOFF_FROM: "A", sc.AFR_HANDOFF_TO: "B"},
        ),
        (
            GuardrailSpanData(name="g", triggered=True),
            "guardrail g",
            {sc.AFR_GUARDRAIL_NAME: "g", sc.AFR_GUARDRAIL_TRIGGERED: True},
        ),
        (
            CustomSpanData(name="lookup-cache", data={"hit": True}),
            "lookup-cache",
            {sc.AFR_CUSTOM_DATA: '{"hit":true}'},
        ),
        (
            MCPListToolsSpanData(server="files", result=["read", "write"]),
            "mcp list_tools files",
            {sc.AFR_MCP_SERVER: "files", sc.AFR_MCP_TOOLS: ("read", "write")},
        ),
        (
            TranscriptionSpanData(input="AAAA", output="hello", model="whisper-1"),
            "transcription whisper-1",
            {sc.AFR_AUDIO_BYTES: 4, sc.GEN_AI_REQUEST_MODEL: "whisper-1"},
        ),
        (
            SpeechSpanData(input="hi there", output="QUJD", model="tts-1"),
            "speech tts-1",
            {sc.AFR_AUDIO_BYTES: 4},
        ),
        (SpeechGroupSpanData(input="hi"), "speech_group", {}),
        (
            ResponseSpanData(response=None, input="hello"),
            "chat unknown",
            {sc.GEN_AI_OPERATION_NAME: "chat"},
        ),
    ],
)
def test_every_sdk_span_type_maps(
    converter: SpanConverter, data: SpanData, name: str, expected: dict[str, Any]
) -> None:
    converted = converter.convert(make_span(data))
    attrs = dict(converted.attributes or {})
    assert converted.name == name
    assert attrs[sc.AFR_SPAN_TYPE] == data.type
    for key, value in expected.items():
        assert attrs[key] == value, key
    # Raw audio never becomes an attribute.
    assert "AAAA" not in json.dumps(attrs, default=str) and "QUJD" not in json.dumps(
        attrs, default=str
    )


def test_generation_span_with_offered_tools(converter: SpanConverter) -> None:
    data = GenerationSpanData(
        input=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        output=[
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ],
        model="m",
        model_config={"temperature": 0.2, "top_p": None},
        usage={"input_tokens": 5, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}},
    )
    offered = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    attrs = dict(converter.convert(make_span(data), offered).attributes or {})
    assert json.loads(str(attrs[sc.GEN_AI_SYSTEM_INSTRUCTIONS])) == [
        {"type": "text", "content": "Be brief."}
    ]
    assert json.loads(str(attrs[sc.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert json.loads(str(attrs[sc.GEN_AI_TOOL_DEFINITIONS])) == offered
    assert attrs[sc.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 1
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)


def test_tool_call_ids_are_claimed_once_by_name_and_arguments(converter: SpanConverter) -> None:
    parent = "span_111111111111111111111111"
    output = [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 2}'},
                },
            ],
        }
    ]
    converter.convert(make_span(GenerationSpanData(output=output), parent_id=parent))
    second = converter.convert(make_span(FunctionSpanData("f", '{"a": 2}', "ok"), parent_id=parent))
    first = converter.convert(make_span(FunctionSpanData("f", '{"a": 1}', "ok"), parent_id=parent))
    extra = converter.convert(make_span(FunctionSpanData("f", '{"a": 1}', "ok"), parent_id=parent))
    assert (second.attributes or {})[sc.GEN_AI_TOOL_CALL_ID] == "c2"
    assert (first.attributes or {})[sc.GEN_AI_TOOL_CALL_ID] == "c1"
    assert sc.GEN_AI_TOOL_CALL_ID not in (extra.attributes or {})


def test_error_becomes_status_error_type_and_exception_event(converter: SpanConverter) -> None:
    span = make_span(
        FunctionSpanData("refund_order", '{"amount": "12.OO"}', None),
        error={"message": "Error running tool", "data": {"error": "bad amount"}},
    )
    converted = converter.convert(span)
    attrs = dict(converted.attributes or {})
    assert converted.status.status_code is StatusCode.ERROR
    assert converted.status.description == "Error running tool"
    assert attrs[sc.ERROR_TYPE] == "Error running tool"
    assert json.loads(str(attrs[sc.AFR_ERROR_DATA])) == {"error": "bad amount"}
    (event,) = converted.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.message"] == "Error running tool: bad amount"


class FutureSpanData(SpanData):
    """A span type a future SDK might add."""

    @property
    def type(self) -> str:
        return "realtime_session"

    def export(self) -> dict[str, Any]:
        return {"type": self.type, "session": "s1"}


def test_unknown_span_types_are_kept_generically(converter: SpanConverter) -> None:
    converted = converter.convert(make_span(FutureSpanData()))
    attrs = dict(converted.attributes or {})
    assert converted.name == "realtime_session"
    assert attrs[sc.AFR_SPAN_TYPE] == "realtime_session"
    assert json.loads(str(attrs[sc.AFR_SPAN_DATA])) == {"type": "realtime_session", "session": "s1"}


def test_content_off_drops_content_but_keeps_structure() -> None:
    converter = SpanConverter(Resource.create({}), capture_content=False)
    attrs = dict(
        converter.convert(make_span(FunctionSpanData("f", '{"ssn": "x"}', "secret"))).attributes
        or {}
    )
    assert sc.GEN_AI_TOOL_CALL_ARGUMENTS not in attrs and sc.GEN_AI_TOOL_CALL_RESULT not in attrs
    assert attrs[sc.GEN_AI_TOOL_NAME] == "f"
    assert attrs[sc.AFR_CONTENT_CAPTURED] is False


def test_workflow_root_encloses_children_and_links_to_its_source_run(
    converter: SpanConverter,
) -> None:
    source = "trace_" + "ab" * 16
    trace = TraceImpl(
        "replay of refund-desk",
        TRACE_ID,
        "g1",
        {sc.METADATA_RUN_KIND: "replay", sc.METADATA_SOURCE_RUN_ID: source},
        RecordingProcessor(),  # type: ignore[arg-type]
    )
    child = make_span(AgentSpanData(name="A"))
    converter.trace_started(trace, iso_to_ns(child.started_at) or 0)
    converter.convert(child)
    root = converter.trace_ended(trace, 0)  # an end stamp earlier than the child's end
    attrs = dict(root.attributes or {})
    assert root.start_time is not None and root.end_time is not None
    assert root.start_time <= (iso_to_ns(child.started_at) or 0)
    assert root.end_time >= (iso_to_ns(child.ended_at) or 0)
    assert attrs[sc.AFR_RUN_KIND] == "replay"
    assert attrs[sc.AFR_SOURCE_RUN_ID] == "ab" * 16
    (link,) = root.links
    assert link.context.trace_id == otel_trace_id(source)
    assert link.context.span_id == workflow_span_id(source)
