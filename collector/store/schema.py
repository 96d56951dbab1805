"""ClickHouse DDL as versioned migrations, applied in order at start-up.

The same statements run on the embedded engine (chDB) and on a ClickHouse server.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FAILURE_PATH_SQL",
    "LOGS_TABLE",
    "LOGS_VIEW",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "MIGRATIONS_TABLE_DDL",
    "MODEL_PRICES_TABLE",
    "RUNS_TABLE",
    "RUN_SUMMARY_VIEW",
    "SERVICE_NAME",
    "SIGNATURE_SQL",
    "SPANS_TABLE",
    "TOKEN_DETAIL_COLUMNS",
    "TRACES_VIEW",
    "TRACES_VIEW_TRACE_ID_TS",
    "TRACE_ID_TS_TABLE",
    "Migration",
    "call_costs_sql",
    "priced_cost_sql",
    "prices_sql",
    "unpriced_models_sql",
]

SPANS_TABLE = "otel_traces"
LOGS_TABLE = "otel_logs"
LOGS_VIEW = "logs"
"""The log records as Grafana's ClickHouse plugin reads them in its OTel logs mode (the
datasource's ``logs.defaultTable``, the Run timeline's logs panel): each record once
(``FINAL``). A project credential's reads of it are scoped."""
"""OTLP log records in the OTel ClickHouse exporter's layout (Grafana's OTel logs mode), plus
afr's columns; keyed by run like the spans (ADR 40)."""
TRACE_ID_TS_TABLE = "otel_traces_trace_id_ts"
RUNS_TABLE = "runs"
"""One row per run and insert block, merged by the engine: read it through ``RUN_SUMMARY_VIEW``
or with the same merge functions (``GROUP BY ProjectId, TraceId``)."""
RUN_SUMMARY_VIEW = "run_summary"
MODEL_PRICES_TABLE = "model_prices"
TRACES_VIEW = "traces"
"""The spans as Grafana's ClickHouse plugin reads them in its OTel trace mode (Explore's query
builder, trace-to-trace links, the trace views): each span once (``FINAL``), the OTel column
names, ``ServiceName`` by ``SERVICE_NAME``. A project credential's reads of it are scoped."""
TRACES_VIEW_TRACE_ID_TS = TRACES_VIEW + "_trace_id_ts"
"""The trace time bounds under the name the plugin derives from ``TRACES_VIEW`` (its
``traceTimestampTableSuffix``, ``_trace_id_ts``), so a trace lookup reads only its time range."""
SERVICE_NAME = "if(AgentName != '', AgentName, ServiceName)"
"""The one service-name rule: a span's service is the agent that ran it, else the OTel
resource's ``service.name``. The trace view, the dashboards' trace panels and Explore all
colour spans by it; the resource's own name stays in ``ResourceAttributes``."""
MIGRATIONS_TABLE = "schema_migrations"
"""The versions of ``migrations`` applied to the store, one row each."""
MIGRATIONS_TABLE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {{db}}.{MIGRATIONS_TABLE} "
    "(Version UInt32, Description String, AppliedAt DateTime64(3)) "
    "ENGINE = ReplacingMergeTree ORDER BY Version"
)

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


_NEVER = "toDateTime64('2262-04-01 00:00:00', 9, 'UTC')"
"""Sorts after any real time: the value of a ``min((time, ...))`` state that saw no match."""
_METADATA = (
    "if(mapContains(SpanAttributes, 'afr.trace.metadata'), SpanAttributes['afr.trace.metadata'], "
    "BodyAttributes['afr.trace.metadata'])"
)


_FAILURE_COLUMNS = f""",
    min(if(StatusCode = 'Error' AND FailureCause != '',
        (Timestamp + toIntervalNanosecond(Duration), FailureCause, Timestamp),
        ({_NEVER}, '', {_NEVER}))) AS Failure,
    groupUniqArrayIf((Timestamp, AgentName), SpanType = 'agent' AND AgentName != '')
        AS AgentStarts"""
"""Migration 4's columns of ``runs`` (ADR 34): the run's failing span -- the errored span that
ended first, the origin of an error its parents also carry, ties broken by the cause, never
by an id -- as (end, cause, start), and when each agent of the run started, from which the
summary derives the path of agents that led to the failure."""


_DETAIL_COLUMNS = """,
    maxMap(if(SpanType = 'llm', ([concat(SpanId, ':', Model)], [CacheReadTokens],
        [CacheCreationTokens], [ReasoningTokens]), ([], [], [], []))) AS UsageDetails"""
"""Migration 5's column of ``runs``: each model call's cache-read, cache-creation and
reasoning tokens, keyed as ``Usage`` is (ADR 39)."""


_CONVERSATION_COLUMN = """,
    max(SpanAttributes['gen_ai.conversation.id']) AS Conversation"""
"""Migration 7's column of ``runs``: the conversation (session, thread) the run belongs to,
``gen_ai.conversation.id`` (the Agents SDK's ``group_id``), on any of its spans."""


def _runs_select(*, failures: bool, details: bool = False, conversations: bool = False) -> str:
    extra = (
        (_FAILURE_COLUMNS if failures else "")
        + (_DETAIL_COLUMNS if details else "")
        + (_CONVERSATION_COLUMN if conversations else "")
    )
    return f"""
SELECT ProjectId, TraceId,
    min(Timestamp) AS Start,
    max(Timestamp + toIntervalNanosecond(Duration)) AS End,
    uniqExactState(SpanId) AS Spans,
    groupUniqArrayIf(SpanId, StatusCode = 'Error') AS ErrorSpans,
    min(if(StatusCode = 'Error', (Timestamp, SpanId, SpanName, ErrorType),
        ({_NEVER}, '', '', ''))) AS FirstError,
    min(if(ParentSpanId = '', (Timestamp, if(SpanAttributes['gen_ai.workflow.name'] != '',
        SpanAttributes['gen_ai.workflow.name'], SpanName)), ({_NEVER}, ''))) AS Workflow,
    min(if(SpanType = 'agent' AND AgentName != '', (Timestamp, AgentName), ({_NEVER}, '')))
        AS RootAgent,
    groupUniqArrayIf(AgentName, AgentName != '') AS Agents,
    maxMap(if(SpanType = 'llm', ([concat(SpanId, ':', Model)], [InputTokens], [OutputTokens]),
        ([], [], []))) AS Usage,
    max(multiIf(RunKind = 'replay', 3, RunKind = 'eval', 2, RunKind = 'sweep', 1, 0))
        AS KindCode,
    max(SourceRunId) AS SourceRunId,
    maxIf(if(JSONExtractString({_METADATA}, 'afr.eval.status') != '',
        JSONExtractString({_METADATA}, 'afr.eval.status'),
        JSONExtractString({_METADATA}, 'afr.verdict')), ParentSpanId = '') AS Verdict,
    maxIf(JSONExtractString({_METADATA}, 'afr.eval.name'), ParentSpanId = '') AS EvalName,
    maxIf(JSONExtractString({_METADATA}, 'afr.sweep.id'), ParentSpanId = '') AS SweepId{extra}
FROM {{db}}.{SPANS_TABLE}
"""


FAILURE_PATH_SQL = (
    "arrayCompact(arrayMap(a -> a.2, arraySort(arrayFilter(a -> a.1 <= {failure}.3, "
    "groupUniqArrayArray(AgentStarts)))))"
)
"""The path of agents that led to a run's failure, from its merged ``runs`` rows: every agent
started at or before the failing span, in start order (ties by name), repeats in a row once.
The Agents SDK runs the agents of a handoff chain as sibling spans, so the failing span's
ancestors alone would name only the last agent."""
SIGNATURE_SQL = (
    "if({cause} = '', '', lower(hex(sipHash64({cause}, arrayStringConcat({path}, '>')))))"
)
"""A run's failure signature: 16 hex digits over its failing span's cause and the agent
path; ``''`` for a run without a failure cause. One definition, used by the ``run_summary``
view and the reader."""
_FAILURE_SUMMARY = f""",
    min(Failure) AS failure,
    failure.2 AS failure_cause,
    {FAILURE_PATH_SQL.format(failure="failure")} AS failure_path,
    {SIGNATURE_SQL.format(cause="failure_cause", path="failure_path")} AS signature"""


def prices_sql(table: str) -> str:
    """The ``model_prices`` table ``table`` as one map, model -> (input, output, cache read,
    cache write, reasoning) USD per million tokens: a scalar subquery."""
    return (
        "(SELECT CAST((groupArray(Model), groupArray((InputUsdPerMTok, OutputUsdPerMTok, "
        "CacheReadUsdPerMTok, CacheWriteUsdPerMTok, ReasoningUsdPerMTok))), "
        "'Map(String, Tuple(Float64, Float64, Float64, Float64, Float64))') "
        f"FROM {table} FINAL)"
    )


_MODEL_OF_KEY = "substring(k, position(k, ':') + 1)"


def call_costs_sql(usage: str, details: str, prices: str) -> str:
    """Each model call's cost, from a run's merged ``usage`` and ``details`` (keyed
    ``<span id>:<model>``) and the ``prices`` map: NULL for a call with tokens whose model has
    no price, 0 for one without tokens. The formula of ``afr_common.prices`` (a test compares
    the two): the cached input tokens are part of the input ones, the reasoning tokens part of
    the output ones, unless they exceed them."""
    p = f"{prices}[{_MODEL_OF_KEY}]"
    cr, cw, r = (f"{details}.{n}[j]" for n in (2, 3, 4))
    cost = (
        f"(if(i >= {cr} + {cw}, i - {cr} - {cw}, i) * {p}.1 + {cr} * {p}.3 + {cw} * {p}.4"
        f" + if(o >= {r}, o - {r}, o) * {p}.2 + {r} * {p}.5) / 1e6"
    )
    return (
        f"arrayMap((k, i, o, j) -> if(i + o + {cr} + {cw} = 0, toNullable(0.), "
        f"if(mapContains({prices}, {_MODEL_OF_KEY}), {cost}, NULL)), "
        f"{usage}.1, {usage}.2, {usage}.3, arrayMap(k -> indexOf({details}.1, k), {usage}.1))"
    )


def priced_cost_sql(costs: str) -> str:
    """The cost of a run's priced calls (``costs``: ``call_costs_sql``)."""
    return f"arraySum(arrayMap(c -> ifNull(c, 0.), {costs}))"


def unpriced_models_sql(usage: str, costs: str) -> str:
    """The models of a run's unpriced calls, sorted."""
    return (
        f"arraySort(arrayDistinct(arrayFilter((k, c) -> c IS NULL, "
        f"arrayMap(k -> {_MODEL_OF_KEY}, {usage}.1), {costs})))"
    )


def _summary_view(*, failures: bool, details: bool = False, conversations: bool = False) -> str:
    create = "CREATE OR REPLACE VIEW" if failures else "CREATE VIEW IF NOT EXISTS"
    extra = (_FAILURE_SUMMARY if failures else "") + (
        ",\n    max(Conversation) AS conversation_id" if conversations else ""
    )
    if not details:
        prices = f"""(
    SELECT CAST((groupArray(Model), groupArray((InputUsdPerMTok, OutputUsdPerMTok))),
        'Map(String, Tuple(Float64, Float64))')
    FROM {{db}}.{MODEL_PRICES_TABLE} FINAL
)"""
        cost = """arraySum(arrayMap((k, i, o) -> (i * prices[substring(k, position(k, ':') + 1)].1
        + o * prices[substring(k, position(k, ':') + 1)].2) / 1e6,
        usage.1, usage.2, usage.3)) AS cost_usd"""
    else:
        prices = prices_sql(f"{{db}}.{MODEL_PRICES_TABLE}")
        costs = call_costs_sql("usage", "details", "prices")
        cost = f"""maxMap(UsageDetails) AS details,
    arraySum(details.2) AS cache_read_tokens,
    arraySum(details.3) AS cache_creation_tokens,
    arraySum(details.4) AS reasoning_tokens,
    {costs} AS call_costs,
    {priced_cost_sql("call_costs")} AS priced_cost_usd,
    {unpriced_models_sql("usage", "call_costs")} AS unpriced_models,
    if(empty(unpriced_models), priced_cost_usd, NULL) AS cost_usd"""
    return f"""
{create} {{db}}.{RUN_SUMMARY_VIEW} AS
WITH {prices} AS prices
SELECT
    ProjectId AS project,
    TraceId AS run_id,
    min(Start) AS start,
    max(End) AS end,
    (toUnixTimestamp64Nano(end) - toUnixTimestamp64Nano(start)) / 1e6 AS duration_ms,
    uniqExactMerge(Spans) AS span_count,
    length(groupUniqArrayArray(ErrorSpans)) AS error_count,
    if(error_count > 0, 'error', 'ok') AS status,
    min(FirstError) AS first_error,
    first_error.2 AS failing_span_id,
    first_error.3 AS failing_span_name,
    first_error.4 AS failing_error_type,
    min(Workflow).2 AS workflow,
    min(RootAgent).2 AS root_agent,
    arraySort(groupUniqArrayArray(Agents)) AS agents,
    maxMap(Usage) AS usage,
    arraySum(usage.2) AS input_tokens,
    arraySum(usage.3) AS output_tokens,
    {cost},
    ['capture', 'sweep', 'eval', 'replay'][max(KindCode) + 1] AS kind,
    max(SourceRunId) AS source_run_id,
    max(Verdict) AS verdict,
    max(EvalName) AS eval_name,
    max(SweepId) AS sweep_id{extra}
FROM {{db}}.{RUNS_TABLE}
GROUP BY ProjectId, TraceId
"""


def _runs_ddl(ttl_days: int | None) -> tuple[str, ...]:
    """The per-run summary, kept by the store itself.

    Every column's aggregate is idempotent (min, max, a set, a uniq state, a per-span max),
    so a span delivered twice, in one block or in two, changes nothing: the summary counts
    each span once exactly like ``FINAL`` on the spans table, without reading the spans.
    Tokens are kept per LLM span (``maxMap`` keyed by ``<span id>:<model>``; a string key
    merges twice as fast as a tuple) for the same reason, and priced at read time from
    ``model_prices``.

    Read by primary key a page (~50 runs) at a time: small granules, small LZ4 blocks (each
    run looked up decompresses one block per column: ZSTD and 64 KiB blocks made a page
    2.3x slower at 100k runs).
    """
    ttl = f"TTL toDateTime(Start) + toIntervalDay({int(ttl_days)})" if ttl_days else ""
    table = f"""
CREATE TABLE IF NOT EXISTS {{db}}.{RUNS_TABLE} (
    ProjectId LowCardinality(String),
    TraceId String,
    Start SimpleAggregateFunction(min, DateTime64(9)),
    End SimpleAggregateFunction(max, DateTime64(9)),
    Spans AggregateFunction(uniqExact, String),
    ErrorSpans SimpleAggregateFunction(groupUniqArrayArray, Array(String)),
    FirstError SimpleAggregateFunction(min, Tuple(DateTime64(9), String, String, String)),
    Workflow SimpleAggregateFunction(min, Tuple(DateTime64(9), String)),
    RootAgent SimpleAggregateFunction(min, Tuple(DateTime64(9), String)),
    Agents SimpleAggregateFunction(groupUniqArrayArray, Array(String)),
    Usage SimpleAggregateFunction(maxMap, Tuple(Array(String), Array(UInt64), Array(UInt64))),
    KindCode SimpleAggregateFunction(max, UInt8),
    SourceRunId SimpleAggregateFunction(max, String),
    Verdict SimpleAggregateFunction(max, String),
    EvalName SimpleAggregateFunction(max, String),
    SweepId SimpleAggregateFunction(max, String)
) ENGINE = AggregatingMergeTree
ORDER BY (ProjectId, TraceId)
{ttl}
SETTINGS index_granularity = 128, min_compress_block_size = 4096, max_compress_block_size = 8192
"""
    select = _runs_select(failures=False)
    view = f"""
CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.{RUNS_TABLE}_mv TO {{db}}.{RUNS_TABLE} AS
{select}
GROUP BY ProjectId, TraceId
"""
    # Runs stored before this migration: every aggregate is idempotent, so a span the
    # materialized view also saw (none, at start-up) would change nothing.
    backfill = f"INSERT INTO {{db}}.{RUNS_TABLE}\n{select}\nGROUP BY ProjectId, TraceId"
    prices = f"""
CREATE TABLE IF NOT EXISTS {{db}}.{MODEL_PRICES_TABLE} (
    Model String,
    InputUsdPerMTok Float64,
    OutputUsdPerMTok Float64,
    UpdatedAt DateTime64(3)
) ENGINE = ReplacingMergeTree(UpdatedAt)
ORDER BY Model
"""
    summary = _summary_view(failures=False)
    return table, view, backfill, prices, summary


def _failure_ddl() -> tuple[str, ...]:
    """The spans' failure causes and the summary's failure columns. Runs stored before have
    no cause (it is computed at ingest), so no signature: nothing to backfill."""
    return (
        f"ALTER TABLE {{db}}.{SPANS_TABLE} ADD COLUMN IF NOT EXISTS "
        "FailureCause LowCardinality(String) CODEC(ZSTD(1))",
        # The defaults are what the aggregates' "no match" values are, so the partial rows
        # stored before the columns existed never win a min.
        f"ALTER TABLE {{db}}.{RUNS_TABLE} ADD COLUMN IF NOT EXISTS Failure "
        "SimpleAggregateFunction(min, Tuple(DateTime64(9), String, DateTime64(9))) "
        f"DEFAULT ({_NEVER}, '', {_NEVER})",
        f"ALTER TABLE {{db}}.{RUNS_TABLE} ADD COLUMN IF NOT EXISTS AgentStarts "
        "SimpleAggregateFunction(groupUniqArrayArray, Array(Tuple(DateTime64(9), String)))",
        f"ALTER TABLE {{db}}.{RUNS_TABLE}_mv MODIFY QUERY\n{_runs_select(failures=True)}"
        "GROUP BY ProjectId, TraceId",
        _summary_view(failures=True),
    )


def _logs_ddl(ttl_days: int | None) -> str:
    ttl = f"TTL toDateTime(Timestamp) + toIntervalDay({int(ttl_days)})" if ttl_days else ""
    return f"""
CREATE TABLE IF NOT EXISTS {{db}}.{LOGS_TABLE} (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),
    ObservedTimestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    TraceFlags UInt8,
    SeverityText LowCardinality(String) CODEC(ZSTD(1)),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Body String CODEC(ZSTD(3)),
    EventName String CODEC(ZSTD(1)),
    ResourceSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP} CODEC(ZSTD(1)),
    ScopeSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion LowCardinality(String) CODEC(ZSTD(1)),
    ScopeAttributes {_MAP} CODEC(ZSTD(1)),
    LogAttributes {_MAP} CODEC(ZSTD(3)),
    ProjectId LowCardinality(String) CODEC(ZSTD(1)),
    LogId String CODEC(ZSTD(1)),
    Redactions Array(String) CODEC(ZSTD(1)),
    Truncated Bool CODEC(ZSTD(1)),
    IngestedAt DateTime64(9) CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_log_attr_key mapKeys(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = ReplacingMergeTree(IngestedAt)
PARTITION BY toDate(Timestamp)
ORDER BY (ProjectId, TraceId, SpanId, Timestamp, LogId)
{ttl}
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""


TOKEN_DETAIL_COLUMNS = ("CacheReadTokens", "CacheCreationTokens", "ReasoningTokens")
"""Migration 5's columns of the spans: a model call's cache-read and cache-creation input
tokens and reasoning output tokens (``gen_ai.usage.cache_read.input_tokens``,
``...cache_creation.input_tokens``, ``...reasoning.output_tokens``), each part of the span's
input or output tokens."""


def _token_detail_ddl() -> tuple[str, ...]:
    """Cache and reasoning tokens per span and per run, each token kind priced at its own
    rate (ADR 39). Spans stored before have none: nothing to backfill."""
    spans = tuple(
        f"ALTER TABLE {{db}}.{SPANS_TABLE} ADD COLUMN IF NOT EXISTS {column} UInt64 "
        "CODEC(T64, ZSTD(1))"
        for column in TOKEN_DETAIL_COLUMNS
    )
    # A price set before the columns existed was an input and an output price: cached
    # input at the input rate, reasoning at the output rate (the collector rewrites the
    # table at start anyway).
    prices = tuple(
        f"ALTER TABLE {{db}}.{MODEL_PRICES_TABLE} ADD COLUMN IF NOT EXISTS {column}"
        for column in (
            "CacheReadUsdPerMTok Float64 DEFAULT InputUsdPerMTok",
            "CacheWriteUsdPerMTok Float64 DEFAULT InputUsdPerMTok",
            "ReasoningUsdPerMTok Float64 DEFAULT OutputUsdPerMTok",
            "Source LowCardinality(String)",
        )
    )
    return (
        *spans,
        f"ALTER TABLE {{db}}.{RUNS_TABLE} ADD COLUMN IF NOT EXISTS UsageDetails "
        "SimpleAggregateFunction(maxMap, "
        "Tuple(Array(String), Array(UInt64), Array(UInt64), Array(UInt64)))",
        *prices,
        f"ALTER TABLE {{db}}.{RUNS_TABLE}_mv MODIFY QUERY\n"
        f"{_runs_select(failures=True, details=True)}GROUP BY ProjectId, TraceId",
        _summary_view(failures=True, details=True),
    )


def _conversation_ddl() -> tuple[str, ...]:
    """The run's conversation in the summary (ADR 41). Runs stored before have none: the
    spans still hold it, but a backfill would rewrite every summary for a filter."""
    return (
        f"ALTER TABLE {{db}}.{RUNS_TABLE} ADD COLUMN IF NOT EXISTS Conversation "
        "SimpleAggregateFunction(max, String)",
        f"ALTER TABLE {{db}}.{RUNS_TABLE}_mv MODIFY QUERY\n"
        f"{_runs_select(failures=True, details=True, conversations=True)}"
        "GROUP BY ProjectId, TraceId",
        _summary_view(failures=True, details=True, conversations=True),
    )


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
        Migration(2, "per-run summary kept by the store, model prices", _runs_ddl(ttl_days)),
        Migration(
            3,
            "deduplicated trace view for Grafana's OTel trace mode",
            (
                f"""
CREATE VIEW IF NOT EXISTS {{db}}.{TRACES_VIEW} AS
SELECT * REPLACE (toLowCardinality({SERVICE_NAME}) AS ServiceName)
FROM {{db}}.{SPANS_TABLE} FINAL
""",
                f"""
CREATE VIEW IF NOT EXISTS {{db}}.{TRACES_VIEW_TRACE_ID_TS} AS
SELECT ProjectId, TraceId, Start, End
FROM {{db}}.{TRACE_ID_TS_TABLE}
""",
            ),
        ),
        Migration(4, "failure signatures (ADR 34)", _failure_ddl()),
        Migration(5, "cache and reasoning tokens, priced per kind (ADR 39)", _token_detail_ddl()),
        Migration(
            6,
            "OTLP log records (ADR 40)",
            (
                _logs_ddl(ttl_days),
                f"CREATE VIEW IF NOT EXISTS {{db}}.{LOGS_VIEW} AS "
                f"SELECT * FROM {{db}}.{LOGS_TABLE} FINAL",
            ),
        ),
        Migration(7, "the run's conversation (ADR 41)", _conversation_ddl()),
    )


MIGRATIONS = migrations(None)
