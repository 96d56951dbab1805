"""Every dialect, model API and batching, through the real collector (gRPC and HTTP, the
embedded ClickHouse, the read API): the run a user or the replay worker reads back is the same
whether the trace came in one request or one span per request in shuffled order, root last;
and it is the same run whatever instrumentation recorded it."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from afr.incident import ModelApi
from collector.decode import decode_json
from collector.store.schema import SPANS_TABLE
from replay_worker.replay.fixture import build_fixture
from tests.dialects import (
    PLAIN_GENAI,
    PLAIN_GENAI_PREVIOUS,
    RECORDINGS,
    SDK_TOOL_ERROR,
    SDK_TYPES,
    Recording,
    afr_run_body,
    one_request_per_span,
    request_body,
    with_trace_id,
)
from tests.integration.conftest import Running, start_collector

AFR = {
    "responses": Recording("afr (live)", "afr", "responses", SDK_TYPES, "refund-desk"),
    "chat": Recording("afr (live)", "afr", "chat", SDK_TYPES, "refund-desk"),
}
CASES = [*RECORDINGS, PLAIN_GENAI, PLAIN_GENAI_PREVIOUS, *AFR.values()]
AGENTS = ["Refund Agent", "Triage Agent"]
# Ids the tool spans carry themselves (handoff tool calls included).
NATIVE = {"genai": {"call_handoff_1"}}.get


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    thread, running = start_collector(Path(tmp_path_factory.mktemp("dialects")) / "data")
    yield running
    thread.stop()


@pytest.fixture(scope="module")
def afr_bodies() -> dict[str, dict[str, Any]]:
    apis: tuple[ModelApi, ...] = ("responses", "chat")
    return {api: afr_run_body(api) for api in apis}


def body_of(recording: Recording, afr_bodies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return afr_bodies[recording.api] if recording.dialect == "afr" else request_body(recording)


def export_grpc(running: Running, body: dict[str, Any]) -> None:
    request = decode_json(json.dumps(body).encode())
    with grpc.insecure_channel(f"127.0.0.1:{running.collector.grpc_port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.Export(request, metadata=(("authorization", f"Bearer {running.key}"),))
    assert not answer.HasField("partial_success")


def export_http(running: Running, body: dict[str, Any]) -> None:
    answer = httpx.post(
        running.http_url + "/v1/traces", json=body, headers=running.headers(), timeout=10
    )
    assert answer.status_code == 200, answer.text


def ingest(running: Running, body: dict[str, Any], batching: str) -> str:
    """Sends the run under a fresh trace id (acknowledged: durable, maybe not inserted yet);
    returns the run id."""
    run_id = uuid.uuid4().hex
    body = with_trace_id(body, run_id)
    if batching == "whole trace, gRPC":
        export_grpc(running, body)
    else:
        for request in one_request_per_span(body, seed=int(run_id[:8], 16)):
            export_http(running, request)
    return run_id


def view(run: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a user sees of each span, keyed by span id (stable across trace ids)."""
    return sorted(
        (
            s["span_id"],
            s["name"],
            s["span_type"],
            s["agent_name"],
            s["tool_name"],
            s["tool_call_id"],
            s["error_type"],
            s["input"],
            s["output"],
        )
        for s in run["spans"]
    )


def stored(running: Running, run_id: str) -> dict[str, tuple[str, str]]:
    """SpanType and ToolCallId per span as stored: what Grafana reads, not the run view
    (everything acknowledged is inserted first: the writer inserts about once a second)."""
    running.collector.flush()
    table = SPANS_TABLE  # a constant; the trace id is a bound parameter
    sql = f"SELECT SpanId, SpanType, ToolCallId FROM {{db}}.{table} FINAL WHERE TraceId = {{t:String}}"  # noqa: S608
    return {
        span_id: (kind, call) for span_id, kind, call in running.store.query(sql, {"t": run_id})
    }


@pytest.mark.parametrize("recording", CASES, ids=[f"{c.name}-{c.api}" for c in CASES])
def test_the_run_reads_back_the_same_whatever_the_batching(
    collector: Running, afr_bodies: dict[str, dict[str, Any]], recording: Recording
) -> None:
    body = body_of(recording, afr_bodies)
    whole = ingest(collector, body, "whole trace, gRPC")
    split = ingest(collector, body, "one span per request, shuffled, root last, HTTP")
    runs = {run_id: collector.run(run_id) for run_id in (whole, split)}
    assert view(runs[whole]) == view(runs[split])
    stored_whole, stored_split = stored(collector, whole), stored(collector, split)
    assert {k: t for k, (t, _) in stored_whole.items()} == {
        k: t for k, (t, _) in stored_split.items()
    }
    # Ingest joins what its request holds: the whole trace, not a lone tool span.
    assert {c for _, c in stored_whole.values()} == {
        "",
        "call_refund_1",
        *NATIVE(recording.dialect, set()),
    }
    assert {c for _, c in stored_split.values()} <= {
        "",
        "call_refund_1",
        *NATIVE(recording.dialect, set()),
    }

    for run in runs.values():
        summary, spans = run["run"], run["spans"]
        assert Counter(s["span_type"] for s in spans) == recording.span_types
        assert {s["dialect"] for s in spans} == {recording.dialect}
        assert summary["agents"] == AGENTS
        assert summary["workflow"] == recording.workflow
        assert all("{" not in s["name"] for s in spans), "rendered names, never templates"
        (tool,) = [s for s in spans if s["span_type"] == "tool"]
        assert (tool["tool_name"], tool["tool_call_id"]) == ("refund_order", "call_refund_1")
        assert all(s["input"] for s in spans if s["span_type"] == "llm")
        if recording not in (PLAIN_GENAI, PLAIN_GENAI_PREVIOUS):
            assert summary["failing_error_type"] == SDK_TOOL_ERROR
            assert tool["error_type"] == SDK_TOOL_ERROR


def _messages(text: str) -> list[tuple[str, str, str]]:
    """A span body's messages as (role, part type, what it says), whatever the generation."""
    return [
        (
            str(m["role"]),
            str(p.get("type")),
            json.dumps(
                p.get("content") or p.get("arguments") or p.get("result") or p.get("response"),
                sort_keys=True,
            ),
        )
        for m in json.loads(text)
        for p in m["parts"]
        if m["role"] != "system"
    ]


def test_both_generations_of_the_genai_conventions_give_the_same_run(collector: Running) -> None:
    """The current names (gen_ai.provider.name, content in gen_ai.input/output.messages) and
    the ones before (gen_ai.system, prompt/completion token names, content as span events in
    chat format): one span model, span by span, and the same messages."""
    runs = [
        collector.run(ingest(collector, request_body(recording), "whole trace, gRPC"))
        for recording in (PLAIN_GENAI, PLAIN_GENAI_PREVIOUS)
    ]
    current, previous = ({s["span_id"]: s for s in run["spans"]} for run in runs)
    assert current.keys() == previous.keys()
    fields = ("span_type", "agent_name", "tool_name", "tool_call_id", "model", "error_type")
    for span_id, span in current.items():
        before = previous[span_id]
        assert {f: before[f] for f in fields} == {f: span[f] for f in fields}, span["name"]
        assert (before["input_tokens"], before["output_tokens"]) == (
            span["input_tokens"],
            span["output_tokens"],
        )
        if span["span_type"] == "llm":
            assert _messages(before["input"]) == _messages(span["input"])
            assert _messages(before["output"]) == _messages(span["output"])
    summary = ("workflow", "agents", "input_tokens", "output_tokens", "status", "signature")
    assert {k: runs[1]["run"][k] for k in summary} == {k: runs[0]["run"][k] for k in summary}
    # What a replay takes from it: the same agents (instructions from the system message
    # where the earlier conventions had no attribute for them) and tool calls.
    now, then = (build_fixture(run) for run in runs)
    assert then.agents == now.agents
    assert then.tool_calls == now.tool_calls


def test_the_placeholder_agent_is_no_agent(
    collector: Running, afr_bodies: dict[str, dict[str, Any]]
) -> None:
    contrib = [r for r in RECORDINGS if r.dialect == "otel-contrib-v2"]
    for recording in contrib:
        ingest(collector, body_of(recording, afr_bodies), "whole trace, gRPC")
        ingest(collector, body_of(recording, afr_bodies), "one span per request")
    collector.collector.flush()
    listed = collector.api("/api/v1/runs", agent="OpenAI Agent", limit=100).json()["runs"]
    assert listed == []
    assert collector.api("/api/v1/runs", agent="Refund Agent", limit=100).json()["runs"]


def test_the_joined_tool_call_id_reaches_the_replay_fixture(
    collector: Running, afr_bodies: dict[str, dict[str, Any]]
) -> None:
    # One span per request: ingest cannot join, the run view the worker reads does.
    (recording,) = [r for r in RECORDINGS if r.dialect == "openllmetry" and r.api == "responses"]
    run_id = ingest(collector, body_of(recording, afr_bodies), "one span per request")
    assert {call for _, call in stored(collector, run_id).values()} == {""}
    fixture = build_fixture(collector.run(run_id))
    assert [(c.tool, c.call_id) for c in fixture.tool_calls] == [("refund_order", "call_refund_1")]


def test_the_exporter_under_the_latest_conventions_gives_the_same_run(
    collector: Running, afr_bodies: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``, as the OTel
    instrumentations read it: the bridge's workflow root is an ``invoke_agent`` span and its
    agents carry ``gen_ai.agent.id``; the collector reads the same run either way."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    latest = afr_run_body("responses")
    roots = [s for s in _spans_of(latest) if not s.get("parentSpanId")]
    (root,) = roots
    attributes = {a["key"]: a["value"].get("stringValue") for a in root["attributes"]}
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root["name"] == "invoke_agent refund-desk"
    agents = [
        {a["key"]: a["value"].get("stringValue") for a in s["attributes"]}
        for s in _spans_of(latest)
        if any(a["key"] == "gen_ai.agent.name" for a in s["attributes"])
        and any(a["value"].get("stringValue") == "invoke_agent" for a in s["attributes"])
        and s.get("parentSpanId")
    ]
    assert {a["gen_ai.agent.id"] for a in agents} == {"Triage Agent", "Refund Agent"}
    today = afr_bodies["responses"]
    assert not any(
        a["key"] == "gen_ai.agent.id" for s in _spans_of(today) for a in s["attributes"]
    ), "today's names without the opt-in"
    runs = [collector.run(ingest(collector, body, "whole trace, gRPC")) for body in (today, latest)]
    shape = [
        sorted((s["span_type"], s["agent_name"], s["tool_name"], s["model"]) for s in r["spans"])
        for r in runs
    ]
    assert shape[0] == shape[1]
    keys = ("workflow", "agents", "root_agent", "status", "input_tokens", "output_tokens")
    assert {k: runs[1]["run"][k] for k in keys} == {k: runs[0]["run"][k] for k in keys}


def _spans_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for r in body["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]]
