"""Real OTLP clients into the real collector (gRPC + HTTP) and the embedded ClickHouse."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import grpc
import httpx
import pytest
from agents import gen_trace_id
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import afr_exporter
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from tests.integration.conftest import Running

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _otel_sdk_spans(span_exporter: Any) -> tuple[str, dict[str, Any]]:
    """Makes a small trace with the official OTel SDK: every kind of field a span has."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "checkout", "deployment.environment": "test"})
    )
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = provider.get_tracer("shop.instrumentation", "1.2.3")
    with tracer.start_as_current_span("checkout", kind=SpanKind.SERVER) as parent:
        parent.set_attributes({"order.id": "A-1001", "items": 3, "vip": True, "total": 12.5})
        other = parent.get_span_context()
        with tracer.start_as_current_span(
            "charge card", kind=SpanKind.CLIENT, links=[Link(other, {"link.reason": "retry-of"})]
        ) as child:
            child.set_attribute("tags", ["a", "b"])
            child.add_event("card declined", {"attempt": 2, "code": "51"})
            child.set_status(Status(StatusCode.ERROR, "card declined"))
    provider.force_flush()
    provider.shutdown()
    trace_id = f"{other.trace_id:032x}"
    return trace_id, {"parent_span_id": f"{other.span_id:016x}"}


def _assert_every_field(run: dict[str, Any], parent_span_id: str) -> None:
    spans = {s["name"]: s for s in run["spans"]}
    assert set(spans) == {"checkout", "charge card"}
    parent, child = spans["checkout"], spans["charge card"]
    assert parent["span_id"] == parent_span_id
    assert parent["parent_span_id"] == ""
    assert child["parent_span_id"] == parent_span_id
    assert parent["kind"] == "Server"
    assert child["kind"] == "Client"
    assert parent["attributes"] == {
        "order.id": "A-1001",
        "items": "3",
        "vip": "true",
        "total": "12.5",
    }
    assert json.loads(child["attributes"]["tags"]) == ["a", "b"]
    assert child["status"] == {"code": "Error", "message": "card declined"}
    assert parent["status"]["code"] == "Unset"
    (event,) = child["events"]
    assert event["name"] == "card declined"
    assert event["attributes"] == {"attempt": "2", "code": "51"}
    assert parent["start_time_unix_nano"] <= event["time_unix_nano"] <= parent["end_time_unix_nano"]
    (link,) = child["links"]
    assert link["span_id"] == parent_span_id
    assert link["attributes"] == {"link.reason": "retry-of"}
    assert parent["resource_attributes"]["service.name"] == "checkout"
    assert parent["resource_attributes"]["deployment.environment"] == "test"
    assert parent["service_name"] == "checkout"
    assert parent["scope"] == {"name": "shop.instrumentation", "version": "1.2.3"}
    assert child["start_time_unix_nano"] >= parent["start_time_unix_nano"]
    assert child["end_time_unix_nano"] <= parent["end_time_unix_nano"]
    assert run["run"]["status"] == "error"
    assert run["run"]["span_count"] == 2


def test_official_grpc_exporter_stores_every_field(running: Running) -> None:
    trace_id, expected = _otel_sdk_spans(
        GrpcExporter(endpoint=running.grpc_endpoint, insecure=True, headers=running.headers())
    )
    _assert_every_field(running.run(trace_id), expected["parent_span_id"])


def test_official_http_exporter_stores_every_field(running: Running) -> None:
    trace_id, expected = _otel_sdk_spans(
        HttpExporter(endpoint=running.http_url + "/v1/traces", headers=running.headers())
    )
    _assert_every_field(running.run(trace_id), expected["parent_span_id"])


def _json_request(trace_id: str, span_ids: list[str]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "raw"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "curl"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": f"step {n}",
                                "kind": 1,
                                "startTimeUnixNano": str(1_764_000_000_000_000_000 + n),
                                "endTimeUnixNano": str(1_764_000_000_500_000_000 + n),
                                "attributes": [{"key": "n", "value": {"intValue": str(n)}}],
                                "unknownField": "ignored",
                            }
                            for n, span_id in enumerate(span_ids)
                        ],
                    }
                ],
            }
        ]
    }


def test_raw_otlp_json_post(running: Running) -> None:
    trace_id = "5b8efff798038103d269b633813fc60c"
    body = _json_request(trace_id, ["eee19b7ec3c1b174", "eee19b7ec3c1b175"])
    response = httpx.post(
        running.http_url + "/v1/traces", json=body, headers=running.headers(), timeout=10
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert "partialSuccess" not in response.json()
    run = running.run(trace_id)
    spans = {s["span_id"]: s for s in run["spans"]}
    assert set(spans) == {"eee19b7ec3c1b174", "eee19b7ec3c1b175"}
    assert spans["eee19b7ec3c1b175"]["start_time_unix_nano"] == 1_764_000_000_000_000_001
    assert spans["eee19b7ec3c1b175"]["attributes"] == {"n": "1"}


def test_seeded_failing_run_reads_back_as_one_failed_run(running: Running) -> None:
    trace_id = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
        asyncio.run(run_incident(build_model("chat", model.base_url), trace_id=trace_id))
        assert processor.force_flush(10)
    run_id = trace_id.removeprefix("trace_")
    body = running.run(run_id)
    summary = body["run"]
    assert summary["status"] == "error"
    assert summary["span_count"] == 13
    assert summary["error_count"] == 1
    assert summary["failing_span_name"] == "execute_tool refund_order"
    assert summary["failing_error_type"] == "Error running tool (non-fatal)"
    assert summary["workflow"] == "refund-desk"
    assert summary["root_agent"] == "Triage Agent"
    assert summary["kind"] == "capture"
    failing = next(s for s in body["spans"] if s["span_id"] == summary["failing_span_id"])
    assert failing["span_type"] == "tool"
    assert failing["tool_name"] == "refund_order"
    assert failing["tool_call_id"] == "call_refund_1"
    assert json.loads(failing["input"]) == {"order_id": "A-1001", "amount": "12.OO"}
    types = sorted(s["span_type"] for s in body["spans"])
    assert types.count("handoff") == 1
    assert types.count("guardrail") == 1
    assert types.count("llm") == 3
    listed = running.api("/api/v1/runs", status="error").json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]


# --- raw gRPC client for the protocol edge cases ---------------------------------------------


def _span(trace_id: bytes, span_id: bytes, name: str, parent: bytes = b"") -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=1_764_000_000_000_000_000,
        end_time_unix_nano=1_764_000_001_000_000_000,
    )


def _request(
    *spans: trace_pb2.Span, big_attribute: str = ""
) -> trace_service_pb2.ExportTraceServiceRequest:
    scope_spans = trace_pb2.ScopeSpans(spans=list(spans))
    if big_attribute:
        for span in scope_spans.spans:
            span.attributes.append(
                common_pb2.KeyValue(
                    key="blob", value=common_pb2.AnyValue(string_value=big_attribute)
                )
            )
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[scope_spans])]
    )


def _grpc_export(
    running: Running, request: Any, key: str | None = "default", compression: Any = None
) -> tuple[grpc.StatusCode, Any, Any]:
    with grpc.insecure_channel(f"127.0.0.1:{running.collector.grpc_port}") as channel:
        call = channel.unary_unary(EXPORT)
        metadata = (
            []
            if key is None
            else [("authorization", f"Bearer {running.key if key == 'default' else key}")]
        )
        raw = request if isinstance(request, bytes) else request.SerializeToString()
        try:
            answer, info = call.with_call(
                raw, metadata=metadata, timeout=10, compression=compression
            )
        except grpc.RpcError as error:
            return error.code(), error, error.trailing_metadata()
        response = trace_service_pb2.ExportTraceServiceResponse()
        response.ParseFromString(answer)
        return grpc.StatusCode.OK, response, info.trailing_metadata()


TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


@pytest.mark.parametrize("inserts", ["three inserts", "one insert"])
def test_duplicate_delivery_keeps_runs_exact(running: Running, inserts: str) -> None:
    """Each span delivered three times: in three exports and inserts (three parts), or in
    one export, whose batch goes in as one insert and one part that holds every copy (an
    insert does not merge its own block: ADR 44)."""
    spans = (
        _span(TRACE, bytes.fromhex("00f067aa0ba902b7"), "root"),
        _span(TRACE, bytes.fromhex("00f067aa0ba902b8"), "child", bytes.fromhex("00f067aa0ba902b7")),
    )
    if inserts == "three inserts":
        for _ in range(3):
            code, _response, _ = _grpc_export(running, _request(*spans))
            assert code == grpc.StatusCode.OK
            running.collector.flush()
    else:
        code, _response, _ = _grpc_export(running, _request(*spans * 3))
        assert code == grpc.StatusCode.OK
        running.collector.flush()
        stored = running.collector.store.query(
            "SELECT count() FROM {db}.otel_traces WHERE TraceId = %(trace)s",
            {"trace": TRACE.hex()},
        )
        assert stored == [(6,)]  # one part cannot have been merged: the reads remove copies
    body = running.run(TRACE.hex())
    assert body["run"]["span_count"] == 2
    assert len(body["spans"]) == 2
    (listed,) = running.api("/api/v1/runs", since=1_700_000_000).json()["runs"]
    assert listed["span_count"] == 2


def test_partial_success_rejects_only_the_bad_spans(running: Running) -> None:
    request = _request(
        _span(TRACE, bytes.fromhex("1111111111111111"), "good"),
        _span(TRACE[:8], bytes.fromhex("2222222222222222"), "short trace id"),
        _span(TRACE, b"\x00" * 8, "zero span id"),
    )
    code, response, _ = _grpc_export(running, request)
    assert code == grpc.StatusCode.OK
    assert response.partial_success.rejected_spans == 2
    assert "trace_id" in response.partial_success.error_message
    assert [s["name"] for s in running.run(TRACE.hex())["spans"]] == ["good"]

    body = _json_request(TRACE.hex(), ["3333333333333333", "zz"])
    answer = httpx.post(running.http_url + "/v1/traces", json=body, headers=running.headers())
    assert answer.status_code == 200
    assert answer.json()["partialSuccess"]["rejectedSpans"] == "1"


def test_empty_request_is_success(running: Running) -> None:
    code, response, _ = _grpc_export(running, trace_service_pb2.ExportTraceServiceRequest())
    assert code == grpc.StatusCode.OK
    assert not response.HasField("partial_success")
    answer = httpx.post(
        running.http_url + "/v1/traces",
        content=b"",
        headers={**running.headers(), "content-type": "application/x-protobuf"},
    )
    assert answer.status_code == 200


def test_undecodable_bodies_are_invalid_argument(running: Running) -> None:
    code, _error, _ = _grpc_export(running, b"\xff\xff not protobuf")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    answer = httpx.post(
        running.http_url + "/v1/traces",
        content=b"\xff\xff not protobuf",
        headers={**running.headers(), "content-type": "application/x-protobuf"},
    )
    assert answer.status_code == 400
    status = status_pb2.Status()
    status.ParseFromString(answer.content)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    broken = httpx.post(
        running.http_url + "/v1/traces",
        content=b'{"resourceSpans": [',
        headers={**running.headers(), "content-type": "application/json"},
    )
    assert broken.status_code == 400
    assert "not JSON" in broken.json()["message"]
    wrong_type = httpx.post(
        running.http_url + "/v1/traces",
        content=b"x",
        headers={**running.headers(), "content-type": "text/plain"},
    )
    assert wrong_type.status_code == 415


def test_gzip_is_accepted_on_both_transports(running: Running) -> None:
    request = _request(_span(TRACE, bytes.fromhex("4444444444444444"), "zipped-grpc"))
    code, _, _ = _grpc_export(running, request, compression=grpc.Compression.Gzip)
    assert code == grpc.StatusCode.OK
    raw = _request(
        _span(TRACE, bytes.fromhex("5555555555555555"), "zipped-http")
    ).SerializeToString()
    answer = httpx.post(
        running.http_url + "/v1/traces",
        content=gzip.compress(raw),
        headers={
            **running.headers(),
            "content-type": "application/x-protobuf",
            "content-encoding": "gzip",
        },
    )
    assert answer.status_code == 200
    names = {s["name"] for s in running.run(TRACE.hex())["spans"]}
    assert names == {"zipped-grpc", "zipped-http"}


def test_missing_and_wrong_keys_are_refused_without_echo(running: Running) -> None:
    request = _request(_span(TRACE, bytes.fromhex("6666666666666666"), "sneaky"))
    code, error, _ = _grpc_export(running, request, key=None)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    wrong = "afr_wrong-key-0123456789"
    code, error, _ = _grpc_export(running, request, key=wrong)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert wrong not in error.details()
    for headers in ({}, {"authorization": f"Bearer {wrong}"}, {"authorization": wrong}):
        answer = httpx.post(
            running.http_url + "/v1/traces",
            content=request.SerializeToString(),
            headers={**headers, "content-type": "application/x-protobuf"},
        )
        assert answer.status_code == 401
        assert wrong.encode() not in answer.content
    assert running.api("/api/v1/runs", key=wrong).status_code == 401
    running.collector.flush()
    assert running.api("/api/v1/runs").json()["runs"] == []


def test_other_projects_runs_are_invisible(running: Running) -> None:
    other_key = running.collector.keys.create("other-shop")
    request = _request(_span(TRACE, bytes.fromhex("7777777777777777"), "private"))
    code, _, _ = _grpc_export(running, request)
    assert code == grpc.StatusCode.OK
    assert running.run(TRACE.hex())["spans"][0]["name"] == "private"
    assert running.api(f"/api/v1/runs/{TRACE.hex()}", key=other_key).status_code == 404
    assert running.api(f"/api/v1/runs/{TRACE.hex()}/otlp", key=other_key).status_code == 404
    assert running.api("/api/v1/runs", key=other_key, since=1_700_000_000).json()["runs"] == []
    assert len(running.api("/api/v1/runs", since=1_700_000_000).json()["runs"]) == 1


def test_store_down_acknowledged_spans_arrive_after_recovery(running: Running) -> None:
    running.store.failing = True
    request = _request(_span(TRACE, bytes.fromhex("8888888888888888"), "while down"))
    code, _, _ = _grpc_export(running, request)
    assert code == grpc.StatusCode.OK, "durable in the write-ahead log, so acknowledged"
    assert not running.collector.flush()
    for _ in range(5):
        assert not running.collector.flush(), "retried, still failing"
    segments = list((running.settings.data_dir / "wal").glob("segment-*.wal"))
    assert len(segments) <= 2, "retries do not pile up empty log segments"
    health = httpx.get(running.http_url + "/healthz")
    assert health.status_code == 503
    assert health.json()["pending_rows"] == 1
    running.store.failing = False
    assert running.run(TRACE.hex())["spans"][0]["name"] == "while down"
    assert running.store.failed_inserts >= 1


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_log_full_answers_unavailable_with_a_short_retry_hint(
    tmp_path: Any, transport: str
) -> None:
    from tests.integration.conftest import start_collector

    thread, running = start_collector(tmp_path / "data", wal_max_bytes=1024 * 1024, retry_after_s=2)
    try:
        running.store.failing = True
        blob = "x" * (200 * 1024)  # under the 256 KiB body limit: stored whole
        outcome: Any = None
        for n in range(16):
            request = _request(_span(TRACE, bytes([n + 1]) * 8, f"s{n}"), big_attribute=blob)
            if transport == "grpc":
                code, _error, trailers = _grpc_export(running, request)
                if code != grpc.StatusCode.OK:
                    outcome = (code, dict(trailers))
                    break
            else:
                answer = httpx.post(
                    running.http_url + "/v1/traces",
                    content=request.SerializeToString(),
                    headers={**running.headers(), "content-type": "application/x-protobuf"},
                )
                if answer.status_code != 200:
                    outcome = (answer.status_code, answer.headers)
                    break
        assert outcome is not None, "a full log must refuse more data"
        if transport == "grpc":
            code, trailers = outcome
            assert code == grpc.StatusCode.UNAVAILABLE
            info = error_details_pb2.RetryInfo()
            info.ParseFromString(trailers["google.rpc.retryinfo-bin"])
            assert info.retry_delay.seconds == 2
        else:
            status, headers = outcome
            assert status == 503
            assert headers["retry-after"] == "2"
        accepted = n
        running.store.failing = False
        body = running.run(TRACE.hex())
        assert len(body["spans"]) == accepted, "every acknowledged span is stored"
    finally:
        running.store.failing = False
        thread.stop()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_request_larger_than_the_whole_log_is_refused_for_good(
    tmp_path: Any, transport: str
) -> None:
    """UNAVAILABLE/503 would have the client retry forever: no draining makes room for it."""
    from tests.integration.conftest import start_collector

    thread, running = start_collector(tmp_path / "data", wal_max_bytes=1024 * 1024)
    try:
        blob = "z" * (200 * 1024)  # under the body limit, so stored whole: 6 make > 1 MiB
        spans = [_span(TRACE, bytes([n + 1]) * 8, f"s{n}") for n in range(6)]
        request = _request(*spans, big_attribute=blob)
        if transport == "grpc":
            code, error, trailers = _grpc_export(running, request)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "more than the whole log holds" in error.details()
            assert "google.rpc.retryinfo-bin" not in dict(trailers)
        else:
            answer = httpx.post(
                running.http_url + "/v1/traces",
                content=request.SerializeToString(),
                headers={**running.headers(), "content-type": "application/x-protobuf"},
                timeout=60,  # 1.2 MB through the pipeline: seconds on a loaded machine
            )
            assert answer.status_code == 413
            assert "retry-after" not in answer.headers
        # Nothing else is lost: the next, smaller request is stored.
        small = _request(_span(TRACE, bytes([99]) * 8, "small"))
        if transport == "grpc":
            assert _grpc_export(running, small)[0] == grpc.StatusCode.OK
        else:
            assert (
                httpx.post(
                    running.http_url + "/v1/traces",
                    content=small.SerializeToString(),
                    headers={**running.headers(), "content-type": "application/x-protobuf"},
                    timeout=60,
                ).status_code
                == 200
            )
        assert [span["name"] for span in running.run(TRACE.hex())["spans"]] == ["small"]
    finally:
        thread.stop()


def test_oversize_requests_are_refused(tmp_path: Any) -> None:
    from tests.integration.conftest import start_collector

    thread, running = start_collector(tmp_path / "data", max_request_bytes=1024 * 1024)
    try:
        big = _request(
            _span(TRACE, bytes.fromhex("9999999999999999"), "big"),
            big_attribute="y" * (2 * 1024 * 1024),
        )
        code, _, _ = _grpc_export(running, big)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Small on the wire, huge inflated: refused, not buffered.
        code, _, _ = _grpc_export(running, big, compression=grpc.Compression.Gzip)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        raw = big.SerializeToString()
        answer = httpx.post(
            running.http_url + "/v1/traces",
            content=raw,
            headers={**running.headers(), "content-type": "application/x-protobuf"},
        )
        assert answer.status_code == 413
        bomb = gzip.compress(b"\x00" * (200 * 1024 * 1024))
        assert len(bomb) < 1024 * 1024
        answer = httpx.post(
            running.http_url + "/v1/traces",
            content=bomb,
            headers={
                **running.headers(),
                "content-type": "application/x-protobuf",
                "content-encoding": "gzip",
            },
        )
        assert answer.status_code == 413
        small = _request(_span(TRACE, bytes.fromhex("aaaaaaaaaaaaaaaa"), "small"))
        code, _, _ = _grpc_export(running, small)
        assert code == grpc.StatusCode.OK, "the collector still serves after refusing"
    finally:
        thread.stop()


def test_spans_without_a_usable_start_time_are_rejected_alone(running: Running) -> None:
    no_start = trace_pb2.Span(
        trace_id=TRACE, span_id=bytes.fromhex("abababababababab"), name="no start"
    )
    ancient = _span(TRACE, bytes.fromhex("cdcdcdcdcdcdcdcd"), "1970")
    ancient.start_time_unix_nano = 5
    good = _span(TRACE, bytes.fromhex("efefefefefefefef"), "good")
    good.events.append(trace_pb2.Span.Event(name="no time"))  # an event without a time is clamped
    code, response, _ = _grpc_export(running, _request(no_start, ancient, good))
    assert code == grpc.StatusCode.OK
    assert response.partial_success.rejected_spans == 2
    assert "start_time" in response.partial_success.error_message
    (stored,) = running.run(TRACE.hex())["spans"]
    assert stored["name"] == "good"
    assert stored["events"][0]["time_unix_nano"] == stored["start_time_unix_nano"]


def test_rows_the_store_refuses_are_dead_lettered_and_the_rest_still_flow(
    running: Running, tmp_path: Any
) -> None:
    running.store.poison = b"poison-row"
    request = _request(
        _span(TRACE, bytes.fromhex("1010101010101010"), "fine one"),
        _span(TRACE, bytes.fromhex("2020202020202020"), "poison-row"),
        _span(TRACE, bytes.fromhex("3030303030303030"), "fine two"),
    )
    code, _, _ = _grpc_export(running, request)
    assert code == grpc.StatusCode.OK
    assert running.collector.flush()
    names = {s["name"] for s in running.run(TRACE.hex())["spans"]}
    assert names == {"fine one", "fine two"}
    health = httpx.get(running.http_url + "/healthz").json()
    assert health["dead_lettered_rows"] == 1
    assert health["store"] == "ok"
    dead = (running.settings.data_dir / "wal" / "dead-letter.jsonl").read_text()
    assert "poison-row" in dead
    later = _request(_span(TRACE, bytes.fromhex("4040404040404040"), "after"))
    assert _grpc_export(running, later)[0] == grpc.StatusCode.OK
    assert "after" in {s["name"] for s in running.run(TRACE.hex())["spans"]}


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":' * 100_000,
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": "0af7651916cd43dd8448eb211c80319c",
                                        "spanId": "b7ad6b7169203331",
                                        "startTimeUnixNano": "1764000000000000000",
                                        "name": "x",
                                        "attributes": [
                                            {
                                                "key": "afr.span.type",
                                                "value": {"stringValue": "response"},
                                            },
                                            {
                                                "key": "gen_ai.usage.input_tokens",
                                                "value": {"stringValue": "1e999"},
                                            },
                                        ],
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        ).encode(),
    ],
    ids=["deeply-nested", "huge-token-count"],
)
def test_hostile_bodies_get_4xx_or_are_stored_never_500(running: Running, body: bytes) -> None:
    answer = httpx.post(
        running.http_url + "/v1/traces",
        content=body,
        headers={**running.headers(), "content-type": "application/json"},
    )
    assert answer.status_code in (200, 400)


def test_fail_closed_and_truncation_are_counted_on_healthz(running: Running) -> None:
    deep: Any = "write to jane@example.com"
    for _ in range(200):
        deep = [deep]
    request = _request(_span(TRACE, bytes.fromhex("5050505050505050"), "deep"))
    request.resource_spans[0].scope_spans[0].spans[0].attributes.append(
        common_pb2.KeyValue(
            key="payload",
            value=common_pb2.AnyValue(string_value=json.dumps(deep)),
        )
    )
    big = _request(
        _span(TRACE, bytes.fromhex("6060606060606060"), "big"), big_attribute="z" * (300 * 1024)
    )
    assert _grpc_export(running, request)[0] == grpc.StatusCode.OK
    assert _grpc_export(running, big)[0] == grpc.StatusCode.OK
    stats = httpx.get(running.http_url + "/healthz").json()["pipeline"]
    assert stats["failed_closed"] == 1, "nested too deeply to vouch for: replaced, counted"
    assert stats["truncated_spans"] == 1
    assert stats["spans_accepted"] == 2
    spans = {s["name"]: s for s in running.run(TRACE.hex())["spans"]}
    assert spans["big"]["truncated"] is True
    assert spans["deep"]["attributes"]["payload"] == "<redaction_failed>"


def test_healthz_says_where_a_spans_time_goes(running: Running) -> None:
    """Each stage's cost per span, measured where it runs, and the insert's per row: what an
    operator sizing a collector reads, and what the benchmark reports from inside."""
    before = httpx.get(running.http_url + "/healthz").json()
    trace = bytes.fromhex("7" * 32)
    request = _request(*(_span(trace, bytes([0x70, i] * 4), f"timed-{i}") for i in range(5)))
    assert _grpc_export(running, request)[0] == grpc.StatusCode.OK
    assert len(running.run(trace.hex())["spans"]) == 5  # inserted by now
    health = httpx.get(running.http_url + "/healthz").json()
    stages = health["pipeline"]["stage_us_per_span"]
    assert list(stages) == [
        "decode",
        "records",
        "redact",
        "normalize",
        "signature",
        "truncate",
        "encode",
        "wal",
    ]
    assert all(us > 0 for us in stages.values()), stages
    assert health["pipeline"]["spans_accepted"] == before["pipeline"]["spans_accepted"] + 5
    assert health["insert_us_per_row"] > 0
    assert not any(name.startswith("_") for name in health["pipeline"])
