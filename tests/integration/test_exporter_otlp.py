"""The seeded failing run, through the real Runner, the bridge and real OTLP receivers."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from agents.tracing import add_trace_processor

import afr_exporter
from afr.incident import MALFORMED_AMOUNT, ModelApi, build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from afr_exporter.convert import iso_to_ns, otel_span_id, otel_trace_id, workflow_span_id
from tests.fakes import OtlpGrpcSink, OtlpHttpSink, ReceivedSpan, RecordingProcessor

APIS: list[ModelApi] = ["responses", "chat"]


def _run_seeded(
    api: ModelApi, **install_kwargs: Any
) -> tuple[afr_exporter.AfrTracingProcessor, RecordingProcessor]:
    with ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(**install_kwargs)
        recorder = RecordingProcessor()
        add_trace_processor(recorder)  # type: ignore[arg-type]
        result = asyncio.run(run_incident(build_model(api, model.base_url)))
        assert "could not process the refund" in str(result.final_output)
        assert processor.force_flush(10)
    return processor, recorder


def _by_sdk_id(received: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {
        s.attributes["afr.sdk.span_id"]: s for s in received if "afr.sdk.span_id" in s.attributes
    }


def assert_complete_incident(received: list[ReceivedSpan], recorder: RecordingProcessor) -> None:
    sdk_spans = recorder.spans
    sdk_trace_id = sdk_spans[0].trace_id
    counts = Counter(s.attributes.get("afr.sdk.span_id") for s in received)
    # Every SDK span exactly once, plus one workflow root.
    assert {s.span_id for s in sdk_spans} == {k for k in counts if k}
    assert all(n == 1 for k, n in counts.items() if k)
    roots = [s for s in received if s.attributes["afr.span.type"] == "workflow"]
    assert len(roots) == 1
    root = roots[0]
    assert root.trace_id == sdk_trace_id.removeprefix("trace_")
    assert root.span_id == f"{workflow_span_id(sdk_trace_id):016x}"
    assert root.span.parent_span_id == b""
    assert root.attributes["gen_ai.workflow.name"] == "refund-desk"
    assert root.attributes["gen_ai.conversation.id"] == "conv_refund_desk_demo"
    assert json.loads(root.attributes["afr.trace.metadata"]) == {"customer": "cust_42"}
    assert root.resource["service.name"] == "afr-agent"

    exported = _by_sdk_id(received)
    for sdk in sdk_spans:
        got = exported[sdk.span_id]
        # Ids, parentage and timing are exact.
        assert got.trace_id == f"{otel_trace_id(sdk.trace_id):032x}"
        assert got.span_id == f"{otel_span_id(sdk.span_id):016x}"
        expected_parent = (
            otel_span_id(sdk.parent_id) if sdk.parent_id else workflow_span_id(sdk.trace_id)
        )
        assert got.parent_span_id == f"{expected_parent:016x}"
        assert got.span.start_time_unix_nano == iso_to_ns(sdk.started_at)
        assert got.span.end_time_unix_nano == iso_to_ns(sdk.ended_at)
        assert root.span.start_time_unix_nano <= got.span.start_time_unix_nano
        assert got.span.end_time_unix_nano <= root.span.end_time_unix_nano

    def of_type(kind: str) -> list[ReceivedSpan]:
        return [s for s in received if s.attributes["afr.span.type"] == kind]

    # The failing tool call: error, error.type, and the malformed arguments byte for byte.
    (tool,) = of_type("function")
    attrs = tool.attributes
    assert tool.span.name == "execute_tool refund_order"
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "refund_order"
    assert tool.span.status.code == tool.span.status.STATUS_CODE_ERROR
    assert attrs["error.type"] == "Error running tool (non-fatal)"
    assert json.loads(attrs["gen_ai.tool.call.arguments"]) == {
        "order_id": "A-1001",
        "amount": MALFORMED_AMOUNT,
    }
    assert "error occurred" in attrs["gen_ai.tool.call.result"]
    assert [e.name for e in tool.span.events] == ["exception"]

    # Handoff and guardrail keep their own types.
    (handoff,) = of_type("handoff")
    assert handoff.attributes["afr.handoff.from_agent"] == "Triage Agent"
    assert handoff.attributes["afr.handoff.to_agent"] == "Refund Agent"
    (guardrail,) = of_type("guardrail")
    assert guardrail.attributes["afr.guardrail.name"] == "abuse_screen"
    assert guardrail.attributes["afr.guardrail.triggered"] is False
    agents = {s.attributes["gen_ai.agent.name"] for s in of_type("agent")}
    assert agents == {"Triage Agent", "Refund Agent"}
    assert {s.attributes["afr.turn.number"] for s in of_type("turn")} == {1, 2, 3}
    assert len(of_type("task")) == 1

    # Model spans: instructions, tool schemas, messages, usage; tool-call ids match.
    model_spans = [s for s in received if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(model_spans) == 3
    call_ids_in_output = set()
    for span in model_spans:
        a = span.attributes
        assert a["gen_ai.request.model"] == "gpt-4.1-mini"
        assert a["gen_ai.usage.input_tokens"] > 0
        assert json.loads(a["gen_ai.system_instructions"])[0]["content"].startswith("You are the")
        definitions = {d["name"]: d for d in json.loads(a["gen_ai.tool.definitions"])}
        assert definitions, "tool definitions with schemas on every model span"
        for message in json.loads(a["gen_ai.output.messages"]):
            for part in message["parts"]:
                if part["type"] == "tool_call":
                    call_ids_in_output.add(part["id"])
        assert json.loads(a["gen_ai.input.messages"])[0]["parts"][0]["content"].startswith(
            "I was charged"
        )
    refund_schemas = [
        d
        for s in model_spans
        for d in json.loads(s.attributes["gen_ai.tool.definitions"])
        if d["name"] == "refund_order"
    ]
    assert (
        refund_schemas
        and refund_schemas[0]["parameters"]["properties"]["amount"]["type"] == "number"
    )
    assert attrs["gen_ai.tool.call.id"] == "call_refund_1"
    assert attrs["gen_ai.tool.call.id"] in call_ids_in_output


@pytest.mark.parametrize("api", APIS)
def test_seeded_run_arrives_complete_over_grpc(api: ModelApi) -> None:
    with OtlpGrpcSink() as sink:
        processor, recorder = _run_seeded(api, endpoint=sink.endpoint, protocol="grpc")
        received = sink.spans()
    assert_complete_incident(received, recorder)
    assert processor.stats.dropped == 0
    assert processor.stats.exported == len(received)


@pytest.mark.parametrize("api", APIS)
def test_seeded_run_arrives_complete_over_http(api: ModelApi) -> None:
    with OtlpHttpSink() as sink:
        processor, recorder = _run_seeded(api, endpoint=sink.endpoint, protocol="http/protobuf")
        received = sink.spans()
    assert_complete_incident(received, recorder)
    assert processor.stats.dropped == 0


def test_standard_otel_environment_configures_http_with_auth_and_gzip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpHttpSink() as sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", sink.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer afr_test_key_123")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "refund-desk-svc")
        _, recorder = _run_seeded("responses")
        received = sink.spans()
        headers = sink.recorder.headers
    assert len(received) == len(recorder.spans) + 1
    assert all(h["authorization"] == "Bearer afr_test_key_123" for h in headers)
    assert all(h["content-encoding"] == "gzip" for h in headers)
    assert received[0].resource["service.name"] == "refund-desk-svc"


def test_standard_otel_environment_configures_grpc_with_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpGrpcSink() as sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer afr_test_key_456")
        _, recorder = _run_seeded("chat")
        received = sink.spans()
        headers = sink.recorder.headers
    assert len(received) == len(recorder.spans) + 1
    assert headers and all(h["authorization"] == "Bearer afr_test_key_456" for h in headers)


def test_sdk_sensitive_data_off_keeps_structure_but_no_content() -> None:
    with OtlpGrpcSink() as sink, ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(endpoint=sink.endpoint)
        asyncio.run(
            run_incident(build_model("responses", model.base_url), include_sensitive_data=False)
        )
        assert processor.force_flush(10)
        received = sink.spans()
    blob = json.dumps([s.attributes for s in received])
    assert "I was charged twice" not in blob
    assert MALFORMED_AMOUNT not in blob
    (tool,) = [s for s in received if s.attributes["afr.span.type"] == "function"]
    assert tool.attributes["error.type"] == "Error running tool (non-fatal)"
    assert {s.attributes["afr.span.type"] for s in received} >= {
        "workflow",
        "agent",
        "handoff",
        "guardrail",
    }


def test_content_off_switch_sends_no_messages_or_arguments() -> None:
    with OtlpGrpcSink() as sink:
        _, recorder = _run_seeded("chat", endpoint=sink.endpoint, capture_content=False)
        received = sink.spans()
    blob = json.dumps([s.attributes for s in received])
    for secret_ish in (
        "I was charged twice",
        MALFORMED_AMOUNT,
        "You are the refund agent",
        "error occurred",
    ):
        assert secret_ish not in blob
    assert len(received) == len(recorder.spans) + 1
    model = [s for s in received if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert all("gen_ai.tool.definitions" in s.attributes for s in model)  # schemas are not content
    assert all(s.attributes.get("afr.content.captured") is False for s in model)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_task_span_carries_the_run_input_max_turns_and_only_the_settings_agents_set(
    api: ModelApi,
) -> None:
    from agents import Agent, ModelSettings, RunConfig, Runner

    from afr.scripted_model import ScriptedTurn

    with OtlpGrpcSink() as sink, ScriptedModelServer([ScriptedTurn(text="hi")]) as model:
        processor = afr_exporter.install(endpoint=sink.endpoint)
        specialist = Agent(
            name="Specialist",
            model=build_model(api, model.base_url),
            model_settings=ModelSettings(top_p=0.5),
        )
        agent = Agent(
            name="Greeter",
            model=build_model(api, model.base_url),
            model_settings=ModelSettings(temperature=0.3),
            handoffs=[specialist],
        )
        asyncio.run(
            Runner.run(
                agent,
                "say hi to the desk",
                max_turns=4,
                run_config=RunConfig(
                    trace_include_sensitive_data=True,
                    model_settings=ModelSettings(parallel_tool_calls=False),
                ),
            )
        )
        assert processor.force_flush(10)
        received = sink.spans()
    (task,) = [s for s in received if s.attributes["afr.span.type"] == "task"]
    assert task.attributes["afr.run.input"] == "say hi to the desk"
    assert task.attributes["afr.run.max_turns"] == 4
    definitions = json.loads(str(task.attributes["afr.agents"]))
    assert definitions["entry"] == "Greeter"
    greeter, specialist = definitions["agents"]["Greeter"], definitions["agents"]["Specialist"]
    # The server echoes temperature 1.0, top_p 1.0, tool_choice auto...: none of that.
    assert greeter["model_settings"] == {"temperature": 0.3, "parallel_tool_calls": False}
    assert specialist["model_settings"] == {"top_p": 0.5, "parallel_tool_calls": False}
    assert greeter["handoffs"] == ["Specialist"], "the specialist never ran, yet it is known"
    assert (greeter["model"], greeter["output"]) == ("gpt-4.1-mini", None)
