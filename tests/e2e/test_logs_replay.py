"""A run whose model-call content came only as log records replays like one captured with
content on its spans: the incident captured by afr's exporter through the real Runner, sent
again under a new id with every model call's messages moved off its span into a
``gen_ai.client.inference.operation.details`` log record (as the current GenAI conventions
send them), then read, fixtured and replayed through the real collector and worker."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import httpx
import pytest

from afr.incident import fixed_script
from afr.scripted_model import ScriptedModelServer
from afr_exporter import semconv as sc
from replay_worker.app import WorkerThread
from tests.e2e.test_replay import STUB, Stack, post_hook, stack, wait_job, worker_settings

__all__ = ["stack"]  # the fixture, shared with test_replay.py

pytestmark = pytest.mark.slow

_CONTENT = (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS)
_DETAILS = "gen_ai.client.inference.operation.details"


def _content_as_logs(otlp: dict[str, Any], trace_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run under ``trace_id`` with its model calls' content moved into log records: (the
    spans without it, the log records with it). Returns how many spans lost content too."""
    spans = copy.deepcopy(otlp)
    records: list[dict[str, Any]] = []
    for resource_spans in spans["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                source = span["traceId"]
                span["traceId"] = trace_id
                for attribute in span["attributes"]:
                    value = attribute["value"]
                    if "stringValue" in value:
                        value["stringValue"] = value["stringValue"].replace(source, trace_id)
                moved = [a for a in span["attributes"] if a["key"] in _CONTENT]
                if not moved:
                    continue
                span["attributes"] = [a for a in span["attributes"] if a["key"] not in _CONTENT]
                records.append(
                    {
                        "timeUnixNano": span["endTimeUnixNano"],
                        "traceId": trace_id,
                        "spanId": span["spanId"],
                        "eventName": _DETAILS,
                        "body": {},
                        "attributes": moved,
                    }
                )
    logs = {
        "resourceLogs": [
            {
                "resource": spans["resourceSpans"][0]["resource"],
                "scopeLogs": [{"scope": {"name": "genai-content"}, "logRecords": records}],
            }
        ]
    }
    return spans, logs


def _post(stack: Stack, path: str, body: dict[str, Any]) -> None:
    answer = httpx.post(
        stack.running.http_url + path, json=body, headers=stack.running.headers(), timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert "partialSuccess" not in answer.json(), answer.text


def _export_logs_grpc(stack: Stack, body: dict[str, Any]) -> None:
    """The log records as OTLP/protobuf over gRPC ``LogsService/Export``."""
    import grpc
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
        ExportLogsServiceResponse,
    )

    from collector.decode import hex_ids_to_base64

    document = copy.deepcopy(body)
    hex_ids_to_base64(document)
    request = json_format.ParseDict(document, ExportLogsServiceRequest())
    endpoint = stack.running.grpc_endpoint.removeprefix("http://")
    with grpc.insecure_channel(endpoint) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
        raw = export(
            request.SerializeToString(),
            metadata=(("authorization", f"Bearer {stack.running.key}"),),
            timeout=30,
        )
    answer = ExportLogsServiceResponse()
    answer.ParseFromString(raw)
    assert not answer.HasField("partial_success")


@pytest.mark.parametrize("transport", ["http_json", "grpc"])
def test_a_run_whose_content_came_only_from_log_records_replays_to_failure_fixed(
    stack: Stack, transport: str
) -> None:
    from replay_worker.replay.fixture import build_fixture

    source = stack.running.run(stack.run_id)
    otlp = stack.running.api(f"/api/v1/runs/{stack.run_id}/otlp").json()
    trace_id = f"{random.getrandbits(128):032x}"
    spans, logs = _content_as_logs(otlp, trace_id)
    records = logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    model_calls = [s for s in source["spans"] if s["span_type"] == "llm"]
    assert len(records) == len(model_calls) == 3
    _post(stack, "/v1/traces", spans)

    # Without its log records the run has no model-call content: it cannot be replayed as is.
    bare = stack.running.run(trace_id)
    assert all(not s["input"] for s in bare["spans"] if s["span_type"] == "llm")
    assert bare["logs"] == []

    if transport == "grpc":
        _export_logs_grpc(stack, logs)
    else:
        _post(stack, "/v1/logs", logs)
    stack.running.collector.flush()
    run = stack.running.run(trace_id)
    assert len(run["logs"]) == 3 and {e["event_name"] for e in run["logs"]} == {_DETAILS}
    by_id = {s["span_id"]: s for s in source["spans"]}
    for span in (s for s in run["spans"] if s["span_type"] == "llm"):
        original = by_id[span["span_id"]]
        assert span["content_from_logs"] is True
        assert json.loads(span["input"]) == json.loads(original["input"])
        assert json.loads(span["output"]) == json.loads(original["output"])
    assert not any(s["content_from_logs"] for s in run["spans"] if s["span_type"] != "llm")

    fixture, original_fixture = build_fixture(run), build_fixture(source)
    assert fixture.agents == original_fixture.agents
    assert fixture.model_calls == original_fixture.model_calls
    assert fixture.tool_calls == original_fixture.tool_calls

    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        answer = post_hook(
            worker, stack.secret, {"run_id": trace_id, "stubs": {"refund_order": STUB}}
        )
        assert answer.status_code == 202, answer.text
        job = wait_job(worker, answer.json()["job_id"])
    assert job["state"] == "succeeded", job
    assert job["result"]["verdict"] == "FAILURE_FIXED"
    replay = stack.running.run(job["result"]["replay_run_id"])["run"]
    assert replay["source_run_id"] == trace_id
