"""OTLP logs: request bytes -> LogRecords -> the privacy processors -> encoded rows.

The same promises as spans (ADR 40): OTLP's per-record rejection rules (a record with
malformed ids, or a time outside the accepted window, is rejected on its own and counted in
``partial_success``), redaction and truncation by the very processors that treat spans, and
rows that go through the write-ahead log before the acknowledgement.

The processors work on ``SpanRecord``s: each log record is carried through them as one
(``_carrier``), its body where a span's input is (so a JSON body is redacted key by key as
a span's is), its attributes as the span's, its scope attributes as an event's, its event
name as the span name, then read back. No second redactor, no second truncator: a secret in
a log body is found by exactly what finds it in a span.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from collector.decode import (
    MAX_TIME_NS,
    MIN_TIME_NS,
    PARSE_ERRORS,
    attributes_of,
    protobuf_json_document,
    value_to_str,
)
from collector.errors import InvalidRequest
from collector.log_model import LogRecord, encode_log_rows, log_id
from collector.model import SpanRecord

__all__ = [
    "LOG_PROCESSORS",
    "LogDecodeResult",
    "ProcessedLogs",
    "decode_logs_json",
    "decode_logs_protobuf",
    "process_logs_request",
    "to_log_records",
]

LOG_PROCESSORS = frozenset({"redact", "truncate"})
"""The span processors a log record goes through (normalization is the spans' own)."""
_SCOPE_EVENT = "scope"


@dataclass
class LogDecodeResult:
    records: list[LogRecord]
    rejected: int
    error_message: str


@dataclass(frozen=True)
class ProcessedLogs:
    payload: bytes
    rows: int
    rejected: int
    error_message: str
    redactions: int
    failed_closed: int
    truncated: int
    stage_ns: tuple[tuple[str, int], ...] = ()


def decode_logs_protobuf(raw: bytes) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        raise InvalidRequest(f"body is not an OTLP ExportLogsServiceRequest: {exc}") from None
    return request


def decode_logs_json(raw: bytes) -> ExportLogsServiceRequest:
    document = protobuf_json_document(raw)
    request = ExportLogsServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except PARSE_ERRORS:
        # The parser quotes the offending value back: never pass its message on.
        raise InvalidRequest(
            "body is not an OTLP/JSON ExportLogsServiceRequest: a field has a value of the "
            "wrong type or form"
        ) from None
    return request


def _bad(record: Any, stamp: int, earliest_ns: int, latest_ns: int) -> str | None:
    if not MIN_TIME_NS <= stamp < MAX_TIME_NS:
        return "time_unix_nano and observed_time_unix_nano are missing or out of range"
    if not earliest_ns <= stamp <= latest_ns:
        return "the record's time is outside the accepted window (a broken clock?)"
    trace_id, span_id = record.trace_id, record.span_id
    if len(trace_id) not in (0, 16) or (trace_id and not any(trace_id)):
        return "trace_id must be empty or 16 non-zero bytes"
    if len(span_id) not in (0, 8) or (span_id and not any(span_id)):
        return "span_id must be empty or 8 non-zero bytes"
    if span_id and not trace_id:
        return "a span_id needs its trace_id"
    return None


def to_log_records(
    request: ExportLogsServiceRequest,
    project_id: str,
    ingested_ns: int,
    window: tuple[int, int] | None = None,
) -> LogDecodeResult:
    earliest_ns, latest_ns = window or (MIN_TIME_NS, MAX_TIME_NS)
    records: list[LogRecord] = []
    rejected = 0
    first_reason = ""
    for resource_logs in request.resource_logs:
        resource = attributes_of(resource_logs.resource.attributes)
        service = resource.get("service.name", "unknown_service")
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            scope_attributes = attributes_of(scope.attributes)
            for log in scope_logs.log_records:
                stamp = log.time_unix_nano or log.observed_time_unix_nano
                reason = _bad(log, stamp, earliest_ns, latest_ns)
                if reason is not None:
                    rejected += 1
                    first_reason = first_reason or reason
                    continue
                attributes = attributes_of(log.attributes)
                observed = log.observed_time_unix_nano
                records.append(
                    LogRecord(
                        project_id=project_id,
                        timestamp_ns=stamp,
                        observed_ns=observed if MIN_TIME_NS <= observed < MAX_TIME_NS else stamp,
                        trace_id=log.trace_id.hex(),
                        span_id=log.span_id.hex(),
                        trace_flags=log.flags & 0xFF,
                        severity_text=log.severity_text,
                        severity_number=max(0, min(255, log.severity_number)),
                        service_name=service,
                        body=value_to_str(log.body) if log.HasField("body") else "",
                        event_name=log.event_name or attributes.get("event.name", ""),
                        resource_schema_url=resource_logs.schema_url,
                        resource_attributes=resource,
                        scope_schema_url=scope_logs.schema_url,
                        scope_name=scope.name,
                        scope_version=scope.version,
                        scope_attributes=scope_attributes,
                        log_attributes=attributes,
                        ingested_ns=ingested_ns,
                    )
                )
    message = f"{rejected} log records rejected: {first_reason}" if rejected else ""
    return LogDecodeResult(records, rejected, message)


def _carrier(log: LogRecord) -> SpanRecord:
    return SpanRecord(
        project_id=log.project_id,
        timestamp_ns=log.timestamp_ns,
        trace_id=log.trace_id,
        span_id=log.span_id,
        parent_span_id="",
        trace_state="",
        span_name=log.event_name,
        span_kind="Unspecified",
        service_name=log.service_name,
        resource_attributes=log.resource_attributes,
        scope_name=log.scope_name,
        scope_version=log.scope_version,
        span_attributes=log.log_attributes,
        duration_ns=0,
        status_code="Unset",
        status_message=log.severity_text,
        event_timestamps=[log.timestamp_ns] if log.scope_attributes else [],
        event_names=[_SCOPE_EVENT] if log.scope_attributes else [],
        event_attributes=[log.scope_attributes] if log.scope_attributes else [],
        link_trace_ids=[],
        link_span_ids=[],
        link_trace_states=[],
        link_attributes=[],
        ingested_ns=log.ingested_ns,
        input=log.body,
    )


def _read_back(log: LogRecord, carrier: SpanRecord) -> None:
    log.event_name = carrier.span_name
    log.severity_text = carrier.status_message
    log.service_name = carrier.service_name
    log.resource_attributes = carrier.resource_attributes
    log.scope_name = carrier.scope_name
    log.scope_version = carrier.scope_version
    # A body the normalizer would have moved is still the input: only the privacy
    # processors ran. Attributes a truncator moved stay in the span's maps.
    log.log_attributes = {**carrier.span_attributes, **carrier.body_attributes}
    if carrier.event_attributes:
        log.scope_attributes = carrier.event_attributes[0]
    log.body = carrier.input
    # Where a redaction was, in the record's own words: its body, not the carrier's input.
    log.redactions = [
        "body" + entry[len("input") :] if entry.startswith("input") else entry
        for entry in carrier.redactions
    ]
    log.truncated = carrier.truncated
    log.log_id = log_id(log)


def process_logs_request(
    processors: list[tuple[str, Any]],
    raw: bytes,
    as_json: bool,
    project_id: str,
    now_ns: int,
    window_ns: tuple[int, int] | None = None,
) -> ProcessedLogs:
    """Decode, redact and truncate (the span processors named in ``LOG_PROCESSORS``),
    encode. Raises InvalidRequest on an undecodable body."""
    clock = time.perf_counter_ns
    began = clock()
    request = decode_logs_json(raw) if as_json else decode_logs_protobuf(raw)
    window = (now_ns - window_ns[0], now_ns + window_ns[1]) if window_ns else None
    decoded = to_log_records(request, project_id, now_ns, window)
    stages = [("logs_decode", clock() - began)]
    carriers = [_carrier(log) for log in decoded.records]
    for name, processor in processors:
        if name in LOG_PROCESSORS and carriers:
            started = clock()
            carriers = processor(carriers)
            stages.append((f"logs_{name}", clock() - started))
    redactions = failed_closed = truncated = 0
    for log, carrier in zip(decoded.records, carriers, strict=True):
        _read_back(log, carrier)
        redactions += len(log.redactions)
        failed_closed += sum(1 for entry in log.redactions if entry.endswith(":redaction_failed"))
        truncated += log.truncated
    started = clock()
    payload = encode_log_rows(decoded.records) if decoded.records else b""
    stages.append(("logs_encode", clock() - started))
    return ProcessedLogs(
        payload,
        len(decoded.records),
        decoded.rejected,
        decoded.error_message,
        redactions,
        failed_closed,
        truncated,
        tuple(stages),
    )
