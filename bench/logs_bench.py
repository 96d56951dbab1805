"""OTLP logs ingest beside traces: records/s acknowledged durable against spans/s, same run.

``afr up`` (the collector bench's, on the embedded store) is fed, in alternating rounds, the
collector bench's realistic trace requests (a fresh e-mail, phone, key or IP about every
2 KB) and log requests carrying the same content: one log record per span, with the span's
ids, its attributes as the record's attributes and its largest text value as the body, as an
instrumentation that moved content into log records sends it. Both over OTLP/gRPC on the
same streams, fresh ids per round. Reported: each one's acknowledged rate, the ratio of
their medians, and the inserted rate after the drain.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.logs.v1 import logs_pb2

from bench.collector_bench import (
    REALISTIC_SECRET_EVERY_BYTES,
    TRACES_PER_REQUEST,
    _collector,
    _send,
    make_requests,
)

__all__ = ["main", "to_log_requests"]

TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
ROUNDS = 3


def to_log_requests(span_requests: list[bytes]) -> list[bytes]:
    """Each span request as a log request of one record per span, the same content."""
    out = []
    for raw in span_requests:
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(raw)
        resource_logs = []
        for resource_spans in request.resource_spans:
            records = []
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = list(span.attributes)
                    texts = [a for a in attributes if a.value.WhichOneof("value") == "string_value"]
                    body = max(texts, key=lambda a: len(a.value.string_value), default=None)
                    record = logs_pb2.LogRecord(
                        time_unix_nano=span.start_time_unix_nano,
                        observed_time_unix_nano=span.end_time_unix_nano,
                        trace_id=span.trace_id,
                        span_id=span.span_id,
                        event_name="gen_ai.client.inference.operation.details",
                        attributes=[a for a in attributes if a is not body],
                    )
                    if body is not None:
                        record.body.string_value = body.value.string_value
                    records.append(record)
            resource_logs.append(
                logs_pb2.ResourceLogs(
                    resource=resource_spans.resource,
                    scope_logs=[logs_pb2.ScopeLogs(log_records=records)],
                )
            )
        logs = logs_service_pb2.ExportLogsServiceRequest(resource_logs=resource_logs)
        out.append(logs.SerializeToString())
    return out


def _inserted(http_port: int) -> int:
    health = httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=10).json()
    return int(health["inserted_rows"])


def run(requests_per_round: int = 40) -> dict[str, Any]:
    per_request = TRACES_PER_REQUEST * 9
    spans_rates: list[float] = []
    logs_rates: list[float] = []
    with _collector({}) as (_, key, grpc_port, http_port):
        warm = make_requests(2, seed=99)
        asyncio.run(_send(warm, grpc_port, key, None, TRACES))
        asyncio.run(_send(to_log_requests(warm), grpc_port, key, None, LOGS))
        sent = 4 * per_request
        for round_ in range(ROUNDS):
            spans = make_requests(
                requests_per_round,
                seed=100 + round_,
                secret_every_bytes=REALISTIC_SECRET_EVERY_BYTES,
            )
            logs = to_log_requests(
                make_requests(
                    requests_per_round,
                    seed=200 + round_,
                    secret_every_bytes=REALISTIC_SECRET_EVERY_BYTES,
                )
            )
            total = requests_per_round * per_request
            spans_rates.append(total / asyncio.run(_send(spans, grpc_port, key, None, TRACES))[0])
            logs_rates.append(total / asyncio.run(_send(logs, grpc_port, key, None, LOGS))[0])
            sent += 2 * total
        started = time.perf_counter()
        while _inserted(http_port) < sent and time.perf_counter() - started < 300:
            time.sleep(0.1)
        inserted = _inserted(http_port)
    return {
        "spans_per_s": statistics.median(spans_rates),
        "log_records_per_s": statistics.median(logs_rates),
        "logs_to_spans": statistics.median(logs_rates) / statistics.median(spans_rates),
        "rounds": list(zip(spans_rates, logs_rates, strict=True)),
        "all_inserted": inserted >= sent,
    }


def main() -> dict[str, Any]:
    figures = run()
    print("logs ingest (realistic content, afr up over OTLP/gRPC, medians of rounds)")
    print(f"  traces: {figures['spans_per_s']:,.0f} spans/s acknowledged durable")
    print(f"  logs:   {figures['log_records_per_s']:,.0f} records/s acknowledged durable")
    print(f"  logs / traces: {figures['logs_to_spans']:.2f}x (the same content, the same run)")
    for spans, logs in figures["rounds"]:
        print(f"    round: {spans:,.0f} spans/s, {logs:,.0f} records/s ({logs / spans:.2f}x)")
    print(f"  everything inserted after the drain: {figures['all_inserted']}")
    return figures
