"""ClickHouse DDL as versioned migrations, applied in order at start-up.

The same statements run on the embedded engine (chDB) and on a ClickHouse server.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIGRATIONS", "SPANS_TABLE", "TRACE_ID_TS_TABLE", "Migration"]

SPANS_TABLE = "otel_traces"
TRACE_ID_TS_TABLE = "otel_traces_trace_id_ts"

_MAP = "Map(LowCardinality(String), String)"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


def _spans_ddl(ttl_days: int | None) -> str:
    ttl = f"TTL toDateTime(Timestamp) + toIntervalDay({int(ttl_days)})" if ttl_days else ""
    return f"""
CREATE TABLE IF NOT EXISTS {{db}}.{SPANS_TABLE} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes {_MAP} CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes {_MAP}
    ) CODEC(ZSTD(1)),
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    SpanType LowCardinality(String) CODEC(ZSTD(1)),
    Dialect LowCardinality(String) CODEC(ZSTD(1)),
    AgentName LowCardinality(String) CODEC(ZSTD(1)),
    ToolName LowCardinality(String) CODEC(ZSTD(1)),
    ToolCallId String CODEC(ZSTD(1)),
    Model LowCardinality(String) CODEC(ZSTD(1)),
    ErrorType LowCardinality(String) CODEC(ZSTD(1)),
    InputTokens UInt64 CODEC(T64, ZSTD(1)),
    OutputTokens UInt64 CODEC(T64, ZSTD(1)),
    Input String CODEC(ZSTD(3)),
    Output String CODEC(ZSTD(3)),
    InputKey LowCardinality(String) CODEC(ZSTD(1)),
    OutputKey LowCardinality(String) CODEC(ZSTD(1)),
    BodyAttributes {_MAP} CODEC(ZSTD(3)),
    RunKind LowCardinality(String) CODEC(ZSTD(1)),
    SourceRunId String CODEC(ZSTD(1)),
    Redactions Array(String) CODEC(ZSTD(1)),
    Truncated Bool CODEC(ZSTD(1)),
    IngestedAt DateTime64(9) CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = ReplacingMergeTree(IngestedAt)
PARTITION BY toDate(Timestamp)
ORDER BY (ProjectId, TraceId, SpanId)
{ttl}
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""


def migrations(ttl_days: int | None) -> tuple[Migration, ...]:
    return (
        Migration(
            1,
            "spans table, trace time bounds",
            (
                _spans_ddl(ttl_days),
                f"""
CREATE TABLE IF NOT EXISTS {{db}}.{TRACE_ID_TS_TABLE} (
    ProjectId LowCardinality(String),
    TraceId String CODEC(ZSTD(1)),
    Start SimpleAggregateFunction(min, DateTime64(9)) CODEC(ZSTD(1)),
    End SimpleAggregateFunction(max, DateTime64(9)) CODEC(ZSTD(1))
) ENGINE = AggregatingMergeTree
ORDER BY (ProjectId, TraceId)
""",
                f"""
CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.{TRACE_ID_TS_TABLE}_mv
TO {{db}}.{TRACE_ID_TS_TABLE} AS
SELECT ProjectId, TraceId,
       min(Timestamp) AS Start,
       max(Timestamp + toIntervalNanosecond(Duration)) AS End
FROM {{db}}.{SPANS_TABLE}
GROUP BY ProjectId, TraceId
""",
            ),
        ),
    )


MIGRATIONS = migrations(None)
