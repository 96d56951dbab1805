"""OTLP logs through the real collector, both transports (the OTel SDK's own log exporters
over gRPC and HTTP/protobuf, and OTLP/JSON as sent by hand): stored in ``otel_logs``, shown
with their run in the read API, redacted with the span matrix's secrets wherever they are
planted, deduplicated on re-delivery, refused as traces are refused (bad key, bad body,
oversize, bad ids), durable across a store outage, and scoped to their project."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from tests.integration.conftest import Running, start_collector
from tests.secret_corpus import LeakScanner, Secret, all_kinds, strings_of
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

_TRANSPORTS = ("grpc", "http_protobuf", "http_json")
_LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
_NUMBERS = iter(range(1, 1 << 30))


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    thread, running = start_collector(
        tmp_path_factory.mktemp("logs") / "data", max_request_bytes=256 * 1024
    )
    yield running
    thread.stop()


def _ids() -> tuple[int, int]:
    number = next(_NUMBERS)
    return (number << 64) | random.getrandbits(64), (number << 16) | 0xA1


def _record(
    trace_id: int, span_id: int, body: Any, attributes: dict[str, Any], when: int
) -> dict[str, Any]:
    return {
        "timestamp": when,
        "trace_id": trace_id,
        "span_id": span_id,
        "body": body,
        "attributes": attributes,
    }


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, dict):
        return {
            "kvlistValue": {
                "values": [{"key": k, "value": _json_value(v)} for k, v in value.items()]
            }
        }
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_value(v) for v in value]}}
    raise TypeError(type(value))


def _otlp_json(records: list[dict[str, Any]], resource: dict[str, Any]) -> dict[str, Any]:
    def one(r: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timeUnixNano": str(r["timestamp"]),
            "observedTimeUnixNano": str(r["timestamp"]),
            "severityText": "INFO",
            "severityNumber": 9,
            "body": _json_value(r["body"]),
            "attributes": [{"key": k, "value": _json_value(v)} for k, v in r["attributes"].items()],
        }
        if r["trace_id"]:
            out["traceId"] = f"{r['trace_id']:032x}"
        if r["span_id"]:
            out["spanId"] = f"{r['span_id']:016x}"
        return out

    return {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [{"key": k, "value": _json_value(v)} for k, v in resource.items()]
                },
                "scopeLogs": [
                    {"scope": {"name": "afr.test"}, "logRecords": [one(r) for r in records]}
                ],
            }
        ]
    }


def send(
    running: Running,
    transport: str,
    records: list[dict[str, Any]],
    resource: dict[str, Any] | None = None,
    key: str | None = None,
) -> None:
    """Exports ``records`` as the transport's real client does; raises on a refusal."""
    resource = {"service.name": "afr-logs-test", **(resource or {})}
    if transport == "http_json":
        answer = httpx.post(
            running.http_url + "/v1/logs",
            json=_otlp_json(records, resource),
            headers=running.headers(key),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert "partialSuccess" not in answer.json()
        return
    exporter = (
        GrpcLogs(endpoint=running.grpc_endpoint, headers=running.headers(key), insecure=True)
        if transport == "grpc"
        else HttpLogs(endpoint=running.http_url + "/v1/logs", headers=running.headers(key))
    )
    provider = LoggerProvider(resource=Resource.create(resource))
    processor = SimpleLogRecordProcessor(exporter)
    provider.add_log_record_processor(processor)
    logger = provider.get_logger("afr.test")
    for r in records:
        logger.emit(
            ApiLogRecord(
                timestamp=r["timestamp"],
                observed_timestamp=r["timestamp"],
                trace_id=r["trace_id"],
                span_id=r["span_id"],
                severity_text="INFO",
                body=r["body"],
                attributes=r["attributes"],
            )
        )
    provider.shutdown()


def stored(running: Running, trace_hex: str, expected: int) -> list[dict[str, Any]]:
    """The trace's log rows once ``expected`` are stored (each once, ``FINAL``)."""

    def rows() -> list[dict[str, Any]] | None:
        running.collector.flush()
        found = running.store.query(
            "SELECT SpanId, Body, LogAttributes, ResourceAttributes, EventName, Redactions, "
            "LogId, ProjectId FROM {db}.otel_logs FINAL WHERE TraceId = {t:String} "
            "ORDER BY Timestamp, LogId",
            {"t": trace_hex},
        )
        if len(found) < expected:
            return None
        names = (
            "span_id",
            "body",
            "attributes",
            "resource",
            "event",
            "redactions",
            "id",
            "project",
        )
        return [dict(zip(names, row, strict=True)) for row in found]

    result = wait_until(rows, timeout_s=20, what=f"{expected} log rows", interval_s=0.1)
    assert len(result) == expected, result
    return result


@pytest.mark.parametrize("transport", _TRANSPORTS)
def test_records_with_and_without_a_span_are_stored_once_and_shown_with_their_run(
    running: Running, transport: str
) -> None:
    trace_id, span_id = _ids()
    now = time.time_ns()
    records = [
        _record(trace_id, span_id, "the refund tool was called", {"event.name": "app.note"}, now),
        _record(
            trace_id,
            span_id + 1,
            {"content": "Refund order A-1001", "role": "user"},
            {"event.name": "gen_ai.user.message", "gen_ai.system": "openai"},
            now + 1,
        ),
        _record(0, 0, "no span at all", {"n": 3}, now + 2),
    ]
    send(running, transport, records)
    send(running, transport, records)  # re-delivered: the same rows
    trace_hex = f"{trace_id:032x}"
    rows = stored(running, trace_hex, 2)
    assert [r["span_id"] for r in rows] == [f"{span_id:016x}", f"{span_id + 1:016x}"]
    assert rows[0]["body"] == "the refund tool was called"
    assert json.loads(rows[1]["body"]) == {"content": "Refund order A-1001", "role": "user"}
    assert rows[1]["event"] == "gen_ai.user.message"
    assert {r["project"] for r in rows} == {"shop"}
    orphans = running.store.query(
        "SELECT count() FROM {db}.otel_logs FINAL WHERE TraceId = '' AND Body = 'no span at all'"
    )
    assert orphans[0][0] >= 1
    # Re-delivery: the store may hold both copies until a merge; FINAL (what every read
    # uses) shows one.
    raw_ids = running.store.query(
        "SELECT LogId FROM {db}.otel_logs WHERE TraceId = {t:String}", {"t": trace_hex}
    )
    assert {r[0] for r in raw_ids} == {r["id"] for r in rows}


def test_a_runs_log_records_are_in_its_read_api_answer(running: Running) -> None:
    """A run's spans and its log records, together: the records in time order, each with
    its span id; another project's key sees neither."""
    trace_id, span_id = _ids()
    now = time.time_ns()
    trace_hex = f"{trace_id:032x}"
    span = {
        "traceId": trace_hex,
        "spanId": f"{span_id:016x}",
        "name": "chat gpt-4.1-mini",
        "kind": 3,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 10**6),
    }
    answer = httpx.post(
        running.http_url + "/v1/traces",
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
        headers=running.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    send(
        running,
        "grpc",
        [
            _record(trace_id, span_id, "second", {}, now + 2),
            _record(trace_id, span_id, "first", {}, now + 1),
        ],
    )
    stored(running, trace_hex, 2)
    body = running.run(trace_hex)
    assert [entry["body"] for entry in body["logs"]] == ["first", "second"]
    assert {entry["span_id"] for entry in body["logs"]} == {f"{span_id:016x}"}
    assert body["logs"][0]["time_unix_nano"] == now + 1
    # afr runs show: the records under the span tree, each with its span's name.
    from datetime import UTC

    from afr.runs.cli import show_lines
    from afr.runs.client import RunsClient
    from afr.runs.terminal import Terminal

    client = RunsClient(running.http_url, running.key)
    try:
        shown = show_lines(client, trace_hex, Terminal(width=100, tz=UTC))
    finally:
        client.close()
    start = shown.index("log records (2)")
    assert [line.split()[-1] for line in shown[start + 1 : start + 3]] == ["first", "second"]
    assert all("chat gpt-4.1-mini" in line for line in shown[start + 1 : start + 3])
    other = running.collector.keys.create("elsewhere-logs")
    assert running.api(f"/api/v1/runs/{trace_hex}", other).status_code == 404
    rows = running.store.query(
        "SELECT count() FROM {db}.otel_logs WHERE ProjectId = 'elsewhere-logs'"
    )
    assert rows[0][0] == 0


_KINDS = all_kinds()
_SECRETS: dict[str, Secret] = {
    name: kind.generate(random.Random(f"logs:{name}")) for name, kind in _KINDS.items()
}


@pytest.mark.parametrize("transport", _TRANSPORTS)
def test_every_secret_kind_is_redacted_wherever_a_log_record_carries_it(
    running: Running, transport: str
) -> None:
    trace_id, span_id = _ids()
    now = time.time_ns()
    records = []
    for index, (name, secret) in enumerate(sorted(_SECRETS.items())):
        records.append(
            _record(
                trace_id,
                span_id,
                f"the customer wrote: {secret.text} -- please check",
                {"note": f"seen {secret.text}", "kind": name},
                now + 3 * index,
            )
        )
        records.append(
            _record(
                trace_id,
                span_id,
                {"content": f"{secret.text}", "role": "user", "nested": {"value": secret.text}},
                {"event.name": "gen_ai.user.message"},
                now + 3 * index + 1,
            )
        )
    batches = [records[i : i + 40] for i in range(0, len(records), 40)]
    for batch in batches:
        send(running, transport, batch)
    rows = stored(running, f"{trace_id:032x}", len(records))
    scanner = LeakScanner(_SECRETS)
    leaks = {}
    for row in rows:
        for text in strings_of([row["body"], row["attributes"]]):
            found = scanner.scan(text)
            if found:
                leaks[row["attributes"].get("kind", row["body"][:40])] = found
    assert leaks == {}
    assert all(r["redactions"] for r in rows), "every record had something redacted"
    # The read API serves what was stored, never more.
    served = running.api(f"/api/v1/runs/{trace_id:032x}")
    assert served.status_code in (200, 404)  # no span of this trace was sent
    assert not scanner.scan(served.text)


# --- what is refused, and how ---------------------------------------------------------
def _grpc_export(running: Running, raw: bytes, key: str | None = None) -> tuple[Any, str, bytes]:
    with grpc.insecure_channel(running.grpc_endpoint.removeprefix("http://")) as channel:
        call = channel.unary_unary(_LOGS_EXPORT)
        metadata = (("authorization", f"Bearer {key or running.key}"),)
        try:
            answer = call(raw, metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error.code(), error.details() or "", b""
    return grpc.StatusCode.OK, "", answer


def _protobuf(records: list[dict[str, Any]]) -> bytes:
    from google.protobuf import json_format

    from collector.decode import hex_ids_to_base64

    document = _otlp_json(records, {"service.name": "afr-logs-test"})
    hex_ids_to_base64(document)
    request = ExportLogsServiceRequest()
    json_format.ParseDict(document, request)
    return bytes(request.SerializeToString())


def test_bad_ids_and_times_are_rejected_one_by_one_with_partial_success(running: Running) -> None:
    trace_id, span_id = _ids()
    now = time.time_ns()
    good = _record(trace_id, span_id, "kept", {}, now)
    no_time = _record(trace_id, span_id, "no time", {}, 0)
    document = _otlp_json([good, no_time], {"service.name": "x"})
    orphan_span = dict(document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0])
    orphan_span.pop("traceId")
    orphan_span["body"] = {"stringValue": "span without trace"}
    short = dict(orphan_span, traceId="abcd", body={"stringValue": "short trace id"})
    document["resourceLogs"][0]["scopeLogs"][0]["logRecords"] += [orphan_span, short]
    document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][1].pop("observedTimeUnixNano")
    answer = httpx.post(
        running.http_url + "/v1/logs", json=document, headers=running.headers(), timeout=30
    )
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "3"
    assert "log records rejected" in partial["errorMessage"]
    rows = stored(running, f"{trace_id:032x}", 1)
    assert [r["body"] for r in rows] == ["kept"]
    code, _, raw = _grpc_export(running, _protobuf([good, no_time]))
    assert code == grpc.StatusCode.OK
    response = ExportLogsServiceResponse()
    response.ParseFromString(raw)
    assert response.partial_success.rejected_log_records == 1


@pytest.mark.parametrize(
    ("case", "http_status", "grpc_code", "says"),
    [
        ("wrong key", 401, grpc.StatusCode.UNAUTHENTICATED, "invalid API key"),
        ("not protobuf", 400, grpc.StatusCode.INVALID_ARGUMENT, "ExportLogsServiceRequest"),
        ("oversize", 413, grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
    ],
)
def test_refusals_match_the_traces_and_store_nothing(
    running: Running, case: str, http_status: int, grpc_code: grpc.StatusCode, says: str
) -> None:
    trace_id, span_id = _ids()
    record = _record(trace_id, span_id, "x" * (300 * 1024 if case == "oversize" else 10), {}, 0)
    record["timestamp"] = time.time_ns()
    raw = b"\x0a\xff\xff" if case == "not protobuf" else _protobuf([record])
    key = "afr_wrong" if case == "wrong key" else None
    answer = httpx.post(
        running.http_url + "/v1/logs",
        content=raw,
        headers={**running.headers(key), "content-type": "application/x-protobuf"},
        timeout=30,
    )
    assert answer.status_code == http_status
    code, details, _ = _grpc_export(running, raw, key)
    assert code == grpc_code
    assert says in details
    running.collector.flush()
    count = running.store.query(
        "SELECT count() FROM {db}.otel_logs WHERE TraceId = {t:String}", {"t": f"{trace_id:032x}"}
    )
    assert count[0][0] == 0
    # A JSON body that is not JSON, and one that is not an object.
    for bad, fragment in ((b"{not json", "not JSON"), (b"[1]", "OTLP/JSON object")):
        answer = httpx.post(
            running.http_url + "/v1/logs",
            content=bad,
            headers={**running.headers(), "content-type": "application/json"},
        )
        assert answer.status_code == 400 and fragment in answer.json()["message"]


def test_acknowledged_records_survive_a_store_outage(running: Running) -> None:
    trace_id, span_id = _ids()
    now = time.time_ns()
    before = running.store.failed_inserts
    running.store.failing = True
    try:
        # Acknowledged (durable in the log) while no insert can succeed.
        send(running, "grpc", [_record(trace_id, span_id, "during the outage", {}, now)])
        assert not running.collector.flush()
        assert running.store.failed_inserts > before
    finally:
        running.store.failing = False
    rows = stored(running, f"{trace_id:032x}", 1)
    assert rows[0]["body"] == "during the outage"
