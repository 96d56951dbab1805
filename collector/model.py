"""The canonical span the pipeline carries, and its mapping onto ClickHouse columns.

Every OTel ``otel_traces`` column (docs/reference.md §5) keeps its name and meaning; the agent
columns sit beside them (docs/architecture.md, decision 2). Large bodies never live in the attribute
maps: the normalizer moves the run's input/output into ``Input``/``Output`` (remembering
which attribute each came from) and any other oversized attribute into ``BodyAttributes``,
so the original attributes can always be put back together (``original_attributes``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import orjson

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "ROW_FORMAT",
    "SPAN_TYPES",
    "SpanRecord",
    "encode_rows",
    "escape_surrogates",
    "merged_attributes",
]

SPAN_TYPES = (
    "workflow",
    "agent",
    "llm",
    "tool",
    "handoff",
    "guardrail",
    "mcp",
    "turn",
    "task",
    "custom",
    "other",
)


@dataclass(slots=True)
class SpanRecord:
    project_id: str
    timestamp_ns: int
    trace_id: str
    span_id: str
    parent_span_id: str
    trace_state: str
    span_name: str
    span_kind: str
    service_name: str
    resource_attributes: dict[str, str]
    scope_name: str
    scope_version: str
    span_attributes: dict[str, str]
    duration_ns: int
    status_code: str
    status_message: str
    event_timestamps: list[int]
    event_names: list[str]
    event_attributes: list[dict[str, str]]
    link_trace_ids: list[str]
    link_span_ids: list[str]
    link_trace_states: list[str]
    link_attributes: list[dict[str, str]]
    ingested_ns: int
    # Normalized agent fields (processors/normalize.py).
    span_type: str = "other"
    dialect: str = ""
    agent_name: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    model: str = ""
    error_type: str = ""
    failure_cause: str = ""
    """An errored span's part of its run's failure signature (processors/signature.py)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    """Of ``input_tokens``: those read from the provider's prompt cache."""
    cache_creation_tokens: int = 0
    """Of ``input_tokens``: those written to the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``: those spent reasoning."""
    input: str = ""
    output: str = ""
    input_key: str = ""
    output_key: str = ""
    body_attributes: dict[str, str] = field(default_factory=dict)
    run_kind: str = "capture"
    source_run_id: str = ""
    # Provenance of the privacy processors (redact, truncate).
    redactions: list[str] = field(default_factory=list)
    truncated: bool = False

    def original_attributes(self) -> dict[str, str]:
        """The span's attributes as they arrived (after redaction/truncation)."""
        return merged_attributes(
            self.span_attributes,
            self.body_attributes,
            self.input_key,
            self.input,
            self.output_key,
            self.output,
        )


def merged_attributes(
    span_attributes: dict[str, str],
    body_attributes: dict[str, str],
    input_key: str,
    input_body: str,
    output_key: str,
    output_body: str,
) -> dict[str, str]:
    """Puts back together what normalization split: the map, the moved bodies, Input/Output."""
    merged = dict(span_attributes)
    merged.update(body_attributes)
    if input_key:
        merged[input_key] = input_body
    if output_key:
        merged[output_key] = output_body
    return merged


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written back as its JSON escape (``\\ud800``).

    JSON (and Python literals) may carry one escaped in perfectly valid UTF-8; parsed, it is
    a str that is not UTF-8, which no row, log line or response can hold. Whatever a processor
    derives from parsed text passes through here; in JSON text the escape means the same."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


# (ClickHouse column, SpanRecord field). The order is the insert order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("Timestamp", "timestamp_ns"),
    ("TraceId", "trace_id"),
    ("SpanId", "span_id"),
    ("ParentSpanId", "parent_span_id"),
    ("TraceState", "trace_state"),
    ("SpanName", "span_name"),
    ("SpanKind", "span_kind"),
    ("ServiceName", "service_name"),
    ("ResourceAttributes", "resource_attributes"),
    ("ScopeName", "scope_name"),
    ("ScopeVersion", "scope_version"),
    ("SpanAttributes", "span_attributes"),
    ("Duration", "duration_ns"),
    ("StatusCode", "status_code"),
    ("StatusMessage", "status_message"),
    ("Events.Timestamp", "event_timestamps"),
    ("Events.Name", "event_names"),
    ("Events.Attributes", "event_attributes"),
    ("Links.TraceId", "link_trace_ids"),
    ("Links.SpanId", "link_span_ids"),
    ("Links.TraceState", "link_trace_states"),
    ("Links.Attributes", "link_attributes"),
    ("ProjectId", "project_id"),
    ("SpanType", "span_type"),
    ("Dialect", "dialect"),
    ("AgentName", "agent_name"),
    ("ToolName", "tool_name"),
    ("ToolCallId", "tool_call_id"),
    ("Model", "model"),
    ("ErrorType", "error_type"),
    ("InputTokens", "input_tokens"),
    ("OutputTokens", "output_tokens"),
    ("Input", "input"),
    ("Output", "output"),
    ("InputKey", "input_key"),
    ("OutputKey", "output_key"),
    ("BodyAttributes", "body_attributes"),
    ("RunKind", "run_kind"),
    ("SourceRunId", "source_run_id"),
    ("Redactions", "redactions"),
    ("Truncated", "truncated"),
    ("IngestedAt", "ingested_ns"),
    # Added by migration 4, last: a log record written before it has one value less, which
    # the insert reads as the column's default (input_format_json_compact_allow_variable_...).
    ("FailureCause", "failure_cause"),
    # Added by migration 5 (ADR 39), after it for the same reason.
    ("CacheReadTokens", "cache_read_tokens"),
    ("CacheCreationTokens", "cache_creation_tokens"),
    ("ReasoningTokens", "reasoning_tokens"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)


ROW_FORMAT = "JSONCompactEachRow"
_FIELDS = tuple(attr for _, attr in COLUMNS)
_TIMESTAMP = _FIELDS.index("timestamp_ns")
_EVENT_TIMESTAMPS = _FIELDS.index("event_timestamps")
_INGESTED = _FIELDS.index("ingested_ns")
_row_of = attrgetter(*_FIELDS)


def _datetime64(ns: int) -> str:
    # DateTime64(9) text input: unix seconds with nine fractional digits, exact to the ns.
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def encode_rows(records: list[SpanRecord]) -> bytes:
    """The records as ``JSONCompactEachRow`` in ``COLUMN_NAMES`` order.

    The ingest workers write Native blocks (``blocks.encode_block``, ADR 54). JSON rows are
    what the write-ahead log held before (still read and inserted), what a batch the store
    refuses is bisected into, and the dead-letter file's lines (``blocks.json_lines``).
    """
    lines = []
    for record in records:
        row: list[Any] = list(_row_of(record))
        row[_TIMESTAMP] = _datetime64(row[_TIMESTAMP])
        row[_INGESTED] = _datetime64(row[_INGESTED])
        if row[_EVENT_TIMESTAMPS]:
            row[_EVENT_TIMESTAMPS] = [_datetime64(t) for t in row[_EVENT_TIMESTAMPS]]
        lines.append(orjson.dumps(row))
    lines.append(b"")
    return b"\n".join(lines)
