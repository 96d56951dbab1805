"""The canonical OTLP log record the pipeline carries, and its mapping onto the ``otel_logs``
table (the layout of the OTel ClickHouse exporter, which Grafana's ClickHouse plugin reads in
its OTel logs mode), plus afr's project, identity and provenance columns.

A batch of log rows goes through the same write-ahead log and writer as spans: its payload
starts with ``LOGS_PREFIX`` (a line no span row can be: span rows are JSON arrays), so the
log and the writer carry both without a format change, and the store inserts each payload
into its table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import orjson

__all__ = [
    "LOGS_PREFIX",
    "LOG_COLUMNS",
    "LOG_COLUMN_NAMES",
    "LogRecord",
    "encode_log_rows",
    "is_log_payload",
    "log_id",
]

LOGS_PREFIX = b"\x1eotel_logs\n"
"""The first line of a payload of log rows (0x1e, ASCII record separator: no JSON row starts
with it)."""


@dataclass(slots=True)
class LogRecord:
    project_id: str
    timestamp_ns: int
    """``time_unix_nano``, else ``observed_time_unix_nano`` (OTLP: either may be unset)."""
    observed_ns: int
    trace_id: str
    span_id: str
    trace_flags: int
    severity_text: str
    severity_number: int
    service_name: str
    body: str
    """The body AnyValue as text: a string as is, anything else as JSON."""
    event_name: str
    """``event_name``, else the ``event.name`` attribute (older SDKs)."""
    resource_schema_url: str
    resource_attributes: dict[str, str]
    scope_schema_url: str
    scope_name: str
    scope_version: str
    scope_attributes: dict[str, str]
    log_attributes: dict[str, str]
    ingested_ns: int
    redactions: list[str] = field(default_factory=list)
    truncated: bool = False
    log_id: str = ""
    """What makes a record re-delivered the same row (``log_id``): set after redaction."""


LOG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("Timestamp", "timestamp_ns"),
    ("ObservedTimestamp", "observed_ns"),
    ("TraceId", "trace_id"),
    ("SpanId", "span_id"),
    ("TraceFlags", "trace_flags"),
    ("SeverityText", "severity_text"),
    ("SeverityNumber", "severity_number"),
    ("ServiceName", "service_name"),
    ("Body", "body"),
    ("EventName", "event_name"),
    ("ResourceSchemaUrl", "resource_schema_url"),
    ("ResourceAttributes", "resource_attributes"),
    ("ScopeSchemaUrl", "scope_schema_url"),
    ("ScopeName", "scope_name"),
    ("ScopeVersion", "scope_version"),
    ("ScopeAttributes", "scope_attributes"),
    ("LogAttributes", "log_attributes"),
    ("ProjectId", "project_id"),
    ("LogId", "log_id"),
    ("Redactions", "redactions"),
    ("Truncated", "truncated"),
    ("IngestedAt", "ingested_ns"),
)
LOG_COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in LOG_COLUMNS)
_FIELDS = tuple(attr for _, attr in LOG_COLUMNS)
_TIMES = tuple(_FIELDS.index(name) for name in ("timestamp_ns", "observed_ns", "ingested_ns"))
_row_of = attrgetter(*_FIELDS)


def _datetime64(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def log_id(record: LogRecord) -> str:
    """16 hex digits over everything the record says (as stored, after redaction) but when it
    was ingested: the same record delivered twice is the same row, two records that differ
    in anything are two."""
    identity = (
        record.timestamp_ns,
        record.observed_ns,
        record.trace_id,
        record.span_id,
        record.trace_flags,
        record.severity_text,
        record.severity_number,
        record.body,
        record.event_name,
        sorted(record.resource_attributes.items()),
        record.scope_name,
        record.scope_version,
        sorted(record.scope_attributes.items()),
        sorted(record.log_attributes.items()),
    )
    raw = orjson.dumps(identity, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def encode_log_rows(records: list[LogRecord]) -> bytes:
    """``LOGS_PREFIX`` and the records as ``JSONCompactEachRow`` in ``LOG_COLUMN_NAMES``
    order: the write-ahead log record and the insert body, as for spans."""
    lines = [LOGS_PREFIX.rstrip(b"\n")]
    for record in records:
        row: list[Any] = list(_row_of(record))
        for index in _TIMES:
            row[index] = _datetime64(row[index])
        lines.append(orjson.dumps(row))
    lines.append(b"")
    return b"\n".join(lines)


def is_log_payload(payload: bytes) -> bool:
    return payload.startswith(LOGS_PREFIX)
