"""afr's four Grafana dashboards, built as Grafana's JSON model.

``dashboards/*.json`` are these, written by ``python -m afr.grafana.dashboards`` (a test
fails when they are stale); ``afr grafana push`` sends the same JSON.

- ``afr-runs``  Agent runs: runs, failures, error rate, tokens and cost over time; recent runs.
- ``afr-run``   Run timeline: one run in the trace view, its spans, the selected span's input
  and output, its source, replays and evals.
- ``afr-tools`` Tools and failures: per tool and model calls, errors and latency; error
  types; guardrail trips; handoff paths; the failing spans behind the numbers.
- ``afr-evals`` Replays and evals: verdicts over time, sweeps' pass rates, failing evals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from afr.grafana.panels import (
    DEFAULT_DATABASE,
    FORMAT_TABLE,
    FORMAT_TIME_SERIES,
    FORMAT_TRACE,
    Grid,
    constant,
    custom_variable,
    dashboard,
    datasource_variable,
    link,
    override,
    panel,
    query_variable,
    target,
    textbox,
)
from afr.grafana.queries import (
    COST,
    ERRORS,
    EVAL_STATUSES,
    KIND,
    PRICES,
    RUN_ID,
    RUN_SPANS_FINAL,
    RUNS,
    SPAN_ID,
    SPANS,
    SUMMARY,
    TRACE_BOUNDS,
    TRACE_SEARCH_LIMIT,
    TRACE_SPAN_LIMIT,
    TRACES,
    USAGE,
    VERDICT,
    VERDICTS,
    WORKFLOW_OF_ROW,
    all_or,
    eval_outcome,
    in_projects,
    picked_runs,
    values,
    window_runs,
    window_spans,
)
from afr_exporter import semconv as sc
from collector.store.schema import SERVICE_NAME, TRACES_VIEW

__all__ = ["EVALS_UID", "RUNS_UID", "RUN_UID", "TOOLS_UID", "build_all", "main", "write_all"]

RUNS_UID = "afr-runs"
RUN_UID = "afr-run"
TOOLS_UID = "afr-tools"
EVALS_UID = "afr-evals"
RECENT_RUNS = 200
"""Rows of a table of runs: the newest ones of the window."""

PROJECT = "${project:queryparam}"
OPEN_RUN = "var-run_id=${__value.raw}&var-span_id="


ROW_PROJECT = "var-project=${__data.fields.project}"


def run_link(title: str = "Open the run timeline", *, row_project: bool = True) -> dict[str, Any]:
    """To the run timeline of the run id in the cell; in the row's ``project`` when the table
    has that column, else in the projects selected here."""
    return link(title, RUN_UID, OPEN_RUN, ROW_PROJECT if row_project else PROJECT)


def _project_variable() -> dict[str, Any]:
    return query_variable(
        "project",
        "Project",
        f"SELECT DISTINCT ProjectId FROM {RUNS} WHERE $__timeFilter(Start) ORDER BY ProjectId",
    )


def _common_variables() -> list[dict[str, Any]]:
    return [datasource_variable(), constant("database", DEFAULT_DATABASE), _project_variable()]


# -- shared field settings ------------------------------------------------------------------

_STATUS_COLOURS = {
    "type": "value",
    "options": {
        "ok": {"color": "green", "index": 0},
        "error": {"color": "red", "index": 1},
    },
}
_VERDICT_COLOURS = {
    "type": "value",
    "options": {
        "FAILURE_FIXED": {"color": "green", "index": 0},
        "UNCHANGED": {"color": "blue", "index": 1},
        "STILL_FAILING": {"color": "red", "index": 2},
        "REGRESSED": {"color": "dark-red", "index": 3},
        "INCONCLUSIVE": {"color": "orange", "index": 4},
        "passed": {"color": "green", "index": 5},
        "failed": {"color": "red", "index": 6},
        "inconclusive": {"color": "orange", "index": 7},
        "errored": {"color": "dark-red", "index": 8},
    },
}
_COLOUR_TEXT = {"type": "color-text"}


def _coloured(column: str, mapping: dict[str, Any], width: int = 120) -> dict[str, Any]:
    return override(column, mappings=[mapping], custom_cellOptions=_COLOUR_TEXT, custom_width=width)


def _timeseries(title: str, sql: str, unit: str, description: str, **custom: Any) -> dict[str, Any]:
    return panel(
        "timeseries",
        title,
        [target(sql, FORMAT_TIME_SERIES)],
        description=description,
        defaults={
            "unit": unit,
            "min": 0,
            "custom": {"drawStyle": "line", "lineWidth": 2, "fillOpacity": 10, **custom},
        },
        options={
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
    )


def _table(
    title: str,
    sql: str,
    description: str,
    overrides: list[dict[str, Any]],
    *,
    defaults: dict[str, Any] | None = None,
    fmt_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return panel(
        "table",
        title,
        [target(sql, FORMAT_TABLE, **(fmt_extra or {}))],
        description=description,
        defaults={
            "custom": {"align": "auto", "inspect": True, "filterable": True},
            **(defaults or {}),
        },
        overrides=overrides,
        options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
    )


def _stat(
    title: str, sql: str, description: str, overrides: list[dict[str, Any]]
) -> dict[str, Any]:
    return panel(
        "stat",
        title,
        [target(sql, FORMAT_TABLE)],
        description=description,
        defaults={"color": {"mode": "fixed", "fixedColor": "text"}},
        overrides=overrides,
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "/.*/", "values": False},
            "textMode": "value_and_name",
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "vertical",
            "wideLayout": True,
        },
    )


def _named(column: str, name: str, **more: Any) -> dict[str, Any]:
    return override(column, displayName=name, **more)


# -- Agent runs -----------------------------------------------------------------------------


def agent_runs() -> dict[str, Any]:
    variables = [
        *_common_variables(),
        query_variable(
            "workflow",
            "Workflow",
            f"SELECT DISTINCT {WORKFLOW_OF_ROW} AS workflow FROM {RUNS}\n"
            f"WHERE {in_projects()} AND $__timeFilter(Start) AND workflow != ''\n"
            "ORDER BY workflow",
        ),
        query_variable(
            "agent",
            "Agent",
            f"SELECT DISTINCT arrayJoin(Agents) AS agent FROM {RUNS}\n"
            f"WHERE {in_projects()} AND $__timeFilter(Start)\nORDER BY agent",
        ),
        custom_variable("status", "Status", ("ok", "error")),
        custom_variable("kind", "Kind", sc.RUN_KINDS),
    ]
    per_run = window_runs([f"{ERRORS} AS errors", f"{USAGE} AS usage"])
    grid = Grid()
    grid.add(
        _stat(
            "Runs in the window",
            f"WITH {PRICES}\n"
            "SELECT count() AS runs,\n"
            "    countIf(errors > 0) AS failed_runs,\n"
            "    if(runs > 0, failed_runs / runs, 0) AS error_rate,\n"
            "    sum(arraySum(usage.2)) AS input_tokens,\n"
            "    sum(arraySum(usage.3)) AS output_tokens,\n"
            f"    sum({COST}) AS cost_usd\n"
            f"FROM (\n{per_run}\n)",
            "Runs that started in the time range and pass the filters. A failed run has at "
            "least one errored span. Cost prices each model call's tokens with the store's "
            "model_prices (models without a price cost nothing here).",
            [
                _named("runs", "Runs"),
                _named("failed_runs", "Failed runs", color={"mode": "fixed", "fixedColor": "red"}),
                _named("error_rate", "Error rate", unit="percentunit", decimals=1),
                _named("input_tokens", "Input tokens", unit="short"),
                _named("output_tokens", "Output tokens", unit="short"),
                _named("cost_usd", "Cost", unit="currencyUSD", decimals=4),
            ],
        ),
        24,
        4,
    )
    series = f"FROM (\n{per_run}\n)\nGROUP BY time\nORDER BY time"
    grid.add(
        _timeseries(
            "Runs and failed runs",
            "SELECT $__timeInterval(start) AS time,\n"
            "    count() AS runs,\n    countIf(errors > 0) AS failed\n" + series,
            "short",
            "Runs by the time they started.",
            drawStyle="bars",
            fillOpacity=60,
        ),
        12,
        8,
    )
    grid.add(
        _timeseries(
            "Error rate",
            "SELECT $__timeInterval(start) AS time,\n"
            "    countIf(errors > 0) / count() AS error_rate\n" + series,
            "percentunit",
            "Share of the runs started in each interval that have an errored span.",
        ),
        12,
        8,
    )
    grid.add(
        _timeseries(
            "Tokens",
            "SELECT $__timeInterval(start) AS time,\n"
            "    sum(arraySum(usage.2)) AS input_tokens,\n"
            "    sum(arraySum(usage.3)) AS output_tokens\n" + series,
            "short",
            "Model tokens of the runs started in each interval (each model call counted once).",
        ),
        12,
        8,
    )
    grid.add(
        _timeseries(
            "Cost",
            f"WITH {PRICES}\n"
            f"SELECT $__timeInterval(start) AS time,\n    sum({COST}) AS cost_usd\n" + series,
            "currencyUSD",
            "USD, from each model call's tokens and the store's model_prices.",
            drawStyle="bars",
            fillOpacity=60,
        ),
        12,
        8,
    )
    candidates = window_runs([])
    grid.add(
        _table(
            "Recent runs",
            "SELECT start, status, workflow, root_agent, duration_ms, span_count, error_count,\n"
            "    input_tokens, output_tokens, cost_usd, kind,\n"
            "    failing_span_name, failing_error_type,\n"
            f"    if(kind = 'eval', {eval_outcome('verdict', 'error_count')}, verdict) AS verdict,\n"
            "    run_id, source_run_id, project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(candidates, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            f"The newest {RECENT_RUNS} runs of the time range that pass the filters. A run id "
            "opens its timeline; a replay's or eval's source run opens the run it came from.",
            [
                override("start", custom_width=180),
                _coloured("status", _STATUS_COLOURS, 80),
                _named("root_agent", "root agent"),
                _named("duration_ms", "duration", unit="ms", decimals=0, custom_width=90),
                _named("span_count", "spans", custom_width=70),
                _named("error_count", "errors", custom_width=70),
                _named("input_tokens", "tokens in", custom_width=90),
                _named("output_tokens", "tokens out", custom_width=90),
                _named("cost_usd", "cost", unit="currencyUSD", decimals=4, custom_width=90),
                _named("failing_span_name", "failing span"),
                _named("failing_error_type", "error"),
                _coloured("verdict", _VERDICT_COLOURS),
                _named("run_id", "run", links=[run_link()]),
                _named("source_run_id", "source run", links=[run_link("Open the source run")]),
            ],
        ),
        24,
        12,
    )
    return dashboard(
        RUNS_UID,
        "afr · Agent runs",
        "Every run afr recorded: captured, replayed, evaluated and swept.",
        variables,
        grid,
    )


# -- Run timeline ---------------------------------------------------------------------------

_RUN = (
    f"(SELECT min(ProjectId) FROM {TRACE_BOUNDS} WHERE {in_projects()} AND TraceId = {RUN_ID})"
    " AS run_project,\n"
    f"(SELECT min(Start) FROM {TRACE_BOUNDS} WHERE ProjectId = run_project"
    f" AND TraceId = {RUN_ID}) AS run_start,\n"
    f"(SELECT max(End) FROM {TRACE_BOUNDS} WHERE ProjectId = run_project"
    f" AND TraceId = {RUN_ID}) AS run_end"
)
"""The run's project (the first selected one holding it: a trace id is a run per project)
and its time bounds, as the store keeps them."""
_FAILING_SPAN = (
    f"(SELECT min(FirstError).2 FROM {RUNS} WHERE ProjectId = run_project AND TraceId = {RUN_ID})"
)
_RUN_SPANS = (
    f"ProjectId = run_project AND TraceId = {RUN_ID}\n"
    "  AND Timestamp >= run_start AND Timestamp <= run_end\n"
    "  AND run_end >= $__fromTime AND run_start <= $__toTime"
)
"""The run's spans: between its own bounds, when it overlaps the dashboard's time range."""


def _tags(column: str) -> str:
    return f"arrayMap(key -> map('key', key, 'value', {column}[key]), mapKeys({column}))"


_TRACE_SQL = f"""
WITH {_RUN}
SELECT
    TraceId AS traceID,
    SpanId AS spanID,
    ParentSpanId AS parentSpanID,
    ServiceName AS serviceName,
    SpanName AS operationName,
    multiply(toUnixTimestamp64Nano(Timestamp), 0.000001) AS startTime,
    multiply(Duration, 0.000001) AS duration,
    {_tags("SpanAttributes")} AS tags,
    {_tags("ResourceAttributes")} AS serviceTags,
    if(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2, 0) AS statusCode,
    arrayMap((name, timestamp, attributes) -> tuple(name,
        toString(toUnixTimestamp64Milli(timestamp)), {_tags("attributes")})::Tuple(name String,
        timestamp String, fields Array(Map(String, String))),
        Events.Name, Events.Timestamp, Events.Attributes) AS logs,
    arrayMap((traceID, spanID, attributes) -> tuple(traceID, spanID,
        {_tags("attributes")})::Tuple(traceID String, spanID String,
        tags Array(Map(String, String))), Links.TraceId, Links.SpanId, Links.Attributes)
        AS references,
    SpanKind AS kind,
    StatusMessage AS statusMessage,
    ScopeName AS instrumentationLibraryName,
    ScopeVersion AS instrumentationLibraryVersion,
    TraceState AS traceState
FROM {TRACES}
WHERE {_RUN_SPANS}
ORDER BY startTime
LIMIT {TRACE_SPAN_LIMIT}
"""
"""The plugin's trace-ID query in OTel mode (sqlGenerator.ts ``generateTraceIdQuery``) on the
trace view (each span once; a span's service is its agent, as in Explore), within the run's
project and time bounds, and bounded."""

# How the plugin's query builder describes the same trace query: kept on the target so that
# switching the panel to the builder opens the OTel trace-ID mode on the trace view.
_TRACE_META: dict[str, Any] = {
    "isTraceIdMode": True,
    "traceId": "${run_id}",
    "otelEnabled": True,
    "otelVersion": "latest",
    "traceDurationUnit": "nanoseconds",
    "hasTraceTimestampTable": True,
    "traceTimestampTableSuffix": "_trace_id_ts",
    "flattenNested": False,
    "traceEventsColumnPrefix": "Events",
    "traceLinksColumnPrefix": "Links",
}
_TRACE_BUILDER: dict[str, Any] = {
    "database": "${database}",
    "table": TRACES_VIEW,
    "queryType": "traces",
    "mode": "list",
    "meta": _TRACE_META,
}


_TRACE_SEARCH_SQL = f"""
SELECT traceID, serviceName, operationName, startTime, duration, project
FROM {
    window_spans(
        "TraceId AS traceID, "
        f"{SERVICE_NAME} AS serviceName, "
        "SpanName AS operationName, "
        "Timestamp AS startTime, "
        "multiply(Duration, 0.000001) AS duration, "
        "ProjectId AS project",
        "ParentSpanId = '' AND Duration > 0",
    )
}
ORDER BY startTime DESC, duration DESC, traceID, project
LIMIT {TRACE_SEARCH_LIMIT}
"""
"""The plugin's trace search (sqlGenerator.ts ``generateTraceSearchQuery``: its columns,
default filters, order and limit) for the selected projects, with the project the link to
the run needs. Explore's builder sends the same on the trace view; this reads the root
spans of the window once each (``LIMIT 1 BY``) under the view's service-name rule, and is
faster than the view's ``FINAL`` over a whole window. Ties (a run in two projects) are
broken by id, so the same rows come in the same order every time."""

_TRACE_SEARCH_BUILDER = {
    **_TRACE_BUILDER,
    "columns": [
        {"name": column, "hint": hint}
        for column, hint in (
            ("Timestamp", "time"),
            ("TraceId", "trace_id"),
            ("SpanId", "trace_span_id"),
            ("ParentSpanId", "trace_parent_span_id"),
            ("ServiceName", "trace_service_name"),
            ("SpanName", "trace_operation_name"),
            ("Duration", "trace_duration_time"),
            ("SpanAttributes", "trace_tags"),
            ("ResourceAttributes", "trace_service_tags"),
            ("StatusCode", "trace_status_code"),
            ("SpanKind", "trace_kind"),
            ("StatusMessage", "trace_status_message"),
            ("TraceState", "trace_state"),
        )
    ],
    "filters": [
        {
            "type": "datetime",
            "operator": "WITH IN DASHBOARD TIME RANGE",
            "filterType": "custom",
            "key": "",
            "hint": "time",
            "condition": "AND",
        },
        {
            "type": "string",
            "operator": "IS EMPTY",
            "filterType": "custom",
            "key": "",
            "hint": "trace_parent_span_id",
            "condition": "AND",
            "value": "",
        },
        {
            "type": "UInt64",
            "operator": ">",
            "filterType": "custom",
            "key": "",
            "hint": "trace_duration_time",
            "condition": "AND",
            "value": 0,
        },
    ],
    "orderBy": [
        {"name": "", "hint": "time", "dir": "DESC", "default": True},
        {"name": "", "hint": "trace_duration_time", "dir": "DESC", "default": True},
    ],
    "limit": TRACE_SEARCH_LIMIT,
    "meta": {**_TRACE_META, "isTraceIdMode": False, "traceId": ""},
}


def run_timeline() -> dict[str, Any]:
    variables = [
        *_common_variables(),
        textbox("run_id", "Run id", "The run's trace id: 32 hex digits."),
        textbox(
            "span_id",
            "Span",
            "The span whose input and output are shown (set by a click in the span table); "
            "empty: the failing span, else the root.",
        ),
    ]
    grid = Grid()
    outcome = f"if(kind = 'eval', {eval_outcome('verdict', 'error_count')}, verdict)"
    grid.add(
        _stat(
            "Run",
            f"WITH {_RUN}\n"
            f"SELECT status, kind, {outcome} AS verdict, workflow, root_agent,\n"
            "    duration_ms, span_count, error_count, input_tokens, output_tokens, cost_usd\n"
            f"FROM {SUMMARY}\n"
            f"WHERE project = run_project AND run_id = {RUN_ID}\n"
            "  AND end >= $__fromTime AND start <= $__toTime",
            "The run's summary as the store keeps it.",
            [
                override("status", mappings=[_STATUS_COLOURS]),
                override("verdict", mappings=[_VERDICT_COLOURS]),
                _named("root_agent", "root agent"),
                _named("duration_ms", "duration", unit="ms", decimals=0),
                _named("span_count", "spans"),
                _named("error_count", "errors"),
                _named("input_tokens", "tokens in"),
                _named("output_tokens", "tokens out"),
                _named("cost_usd", "cost", unit="currencyUSD", decimals=4),
            ],
        ),
        24,
        4,
    )
    grid.add(
        panel(
            "traces",
            "Trace",
            [target(_TRACE_SQL, FORMAT_TRACE, meta={"builderOptions": _TRACE_BUILDER})],
            description="The run in Grafana's trace view (the plugin's OTel trace mode); "
            "spans are coloured by agent.",
        ),
        24,
        14,
    )
    grid.add(
        _table(
            "Spans",
            f"WITH {_RUN},\n{_FAILING_SPAN} AS failing_span_id\n"
            "SELECT\n"
            "    round((toUnixTimestamp64Nano(Timestamp) - toUnixTimestamp64Nano(run_start))"
            " / 1e6, 1) AS at_ms,\n"
            "    SpanName AS span, SpanType AS type, AgentName AS agent, ToolName AS tool,\n"
            "    Model AS model,\n"
            "    if(SpanId = failing_span_id, 'FAILING', StatusCode) AS status,\n"
            "    ErrorType AS error, StatusMessage AS message,\n"
            "    Duration / 1e6 AS duration_ms,\n"
            "    InputTokens AS input_tokens, OutputTokens AS output_tokens,\n"
            "    SpanId AS span_id\n"
            f"FROM {RUN_SPANS_FINAL}\n"
            f"WHERE {_RUN_SPANS}\n"
            "ORDER BY Timestamp, SpanId",
            "Every span of the run in start order; the failing span (the first errored one) "
            "in red. A span's name shows its input and output below.",
            [
                _named("at_ms", "at", unit="ms", custom_width=80),
                override(
                    "span",
                    links=[
                        link(
                            "Show its input and output",
                            RUN_UID,
                            "${run_id:queryparam}",
                            "var-span_id=${__data.fields.span_id}",
                            PROJECT,
                        )
                    ],
                ),
                override(
                    "status",
                    custom_width=90,
                    mappings=[
                        {
                            "type": "value",
                            "options": {
                                "FAILING": {"color": "red", "index": 0, "text": "FAILING"},
                                "Error": {"color": "orange", "index": 1},
                                "Ok": {"color": "green", "index": 2},
                                "Unset": {"color": "transparent", "index": 3, "text": "-"},
                            },
                        }
                    ],
                    custom_cellOptions={
                        "type": "color-background",
                        "mode": "basic",
                        "applyToRow": True,
                    },
                ),
                _named("duration_ms", "duration", unit="ms", decimals=1, custom_width=90),
                _named("input_tokens", "tokens in", custom_width=80),
                _named("output_tokens", "tokens out", custom_width=80),
                override("span_id", custom_width=150),
            ],
        ),
        24,
        11,
    )
    grid.add(
        _table(
            "Selected span: input and output",
            f"WITH {_RUN},\n"
            f"if({SPAN_ID} != '', {SPAN_ID}, {_FAILING_SPAN}) AS selected\n"
            "SELECT span, part, attribute, body\n"
            "FROM (\n"
            "    SELECT SpanName AS span,\n"
            "        ['input', 'output', 'error', 'attributes'] AS parts,\n"
            "        [InputKey, OutputKey, ErrorType, ''] AS attributes,\n"
            "        [Input, Output, StatusMessage,\n"
            "            toJSONString(mapUpdate(SpanAttributes, BodyAttributes))] AS bodies\n"
            f"    FROM {RUN_SPANS_FINAL}\n"
            f"    WHERE {_RUN_SPANS.replace(chr(10), chr(10) + '    ')}\n"
            "      AND (SpanId = selected OR (selected = '' AND ParentSpanId = ''))\n"
            ")\n"
            "ARRAY JOIN parts AS part, attributes AS attribute, bodies AS body",
            "What the selected span received and returned (redacted and truncated as "
            "stored), its error and its attributes.",
            [
                override("span", custom_width=200),
                override("part", custom_width=90),
                override("attribute", custom_width=200),
                override("body", custom_cellOptions={"type": "json-view"}),
            ],
        ),
        24,
        10,
    )
    grid.add(
        _table(
            "Source, replays and evals",
            f"WITH {_RUN},\n"
            f"(SELECT max(SourceRunId) FROM {RUNS} WHERE ProjectId = run_project"
            f" AND TraceId = {RUN_ID}) AS source_id\n"
            "SELECT if(run_id = source_id, 'source', kind) AS relation,\n"
            f"    start, status, {outcome} AS verdict, workflow, eval_name, sweep_id, run_id,\n"
            "    project\n"
            f"FROM {SUMMARY}\n"
            "WHERE project = run_project\n"
            "  AND (run_id = source_id OR run_id IN (\n"
            f"    SELECT TraceId FROM {RUNS}\n"
            "    WHERE ProjectId = run_project AND Start >= run_start AND Start <= $__toTime\n"
            "      AND run_end >= $__fromTime AND run_start <= $__toTime\n"
            f"    GROUP BY TraceId HAVING max(SourceRunId) = {RUN_ID}))\n"
            "ORDER BY relation != 'source', start, run_id",
            "The run this one replays or evaluates, and the replays and eval runs made from "
            "this one (up to the end of the time range), with their verdicts.",
            [
                override("relation", custom_width=90),
                override("start", custom_width=180),
                _coloured("status", _STATUS_COLOURS, 80),
                _coloured("verdict", _VERDICT_COLOURS),
                _named("eval_name", "eval"),
                _named("sweep_id", "sweep"),
                _named("run_id", "run", links=[run_link()]),
            ],
        ),
        24,
        7,
    )
    grid.add(
        _table(
            "Trace search",
            _TRACE_SEARCH_SQL,
            "Root spans of the selected projects in the time range, newest first, as the "
            "plugin's trace search lists them (Explore's query builder gives the same on the "
            "datasource's trace view). A trace id opens that run here, or in Grafana's trace "
            "view.",
            [
                _named("traceID", "run", links=[run_link()]),
                _named("serviceName", "agent"),
                _named("operationName", "root span"),
                _named("duration", "duration", unit="ms", decimals=1),
            ],
            fmt_extra={"queryType": "traces", "meta": {"builderOptions": _TRACE_SEARCH_BUILDER}},
        ),
        24,
        8,
    )
    return dashboard(
        RUN_UID,
        "afr · Run timeline",
        "One run: its trace, its spans, what the failing span got and returned, and what "
        "was done about it.",
        variables,
        grid,
        time_from="now-7d",
    )


# -- Tools and failures ---------------------------------------------------------------------

_SPANS_IN_WINDOW = f"{in_projects()} AND $__timeFilter(Timestamp)"


def _span_option(name: str, label: str, column: str, condition: str) -> dict[str, Any]:
    return query_variable(
        name,
        label,
        f"SELECT DISTINCT {column} FROM {SPANS}\n"
        f"WHERE {_SPANS_IN_WINDOW} AND {condition} AND {column} != ''\nORDER BY {column}",
    )


_TOOL = all_or(f"ToolName IN ({values('tool')})", "tool")
_MODEL = all_or(f"Model IN ({values('model')})", "model")
_ERROR_TYPE = all_or(f"ErrorType IN ({values('error_type')})", "error_type")
_LATENCY = (
    "quantiles(0.5, 0.95, 0.99)(Duration / 1e6) AS latency_ms,\n"
    "    latency_ms[1] AS p50_ms, latency_ms[2] AS p95_ms, latency_ms[3] AS p99_ms"
)


def _select_this(variable: str) -> dict[str, Any]:
    return link(
        f"Show only this {variable.replace('_', ' ')}",
        TOOLS_UID,
        f"var-{variable}=${{__value.raw}}",
        PROJECT,
    )


def tools_and_failures() -> dict[str, Any]:
    variables = [
        *_common_variables(),
        _span_option("tool", "Tool", "ToolName", "SpanType = 'tool'"),
        _span_option("model", "Model", "Model", "SpanType = 'llm'"),
        _span_option("error_type", "Error type", "ErrorType", "StatusCode = 'Error'"),
    ]
    latency = [
        _named("p50_ms", "p50", unit="ms", decimals=1),
        _named("p95_ms", "p95", unit="ms", decimals=1),
        _named("p99_ms", "p99", unit="ms", decimals=1),
        _named("error_rate", "error rate", unit="percentunit", decimals=1),
        override("latency_ms", custom_hidden=True),
    ]
    grid = Grid()
    grid.add(
        _table(
            "Tools",
            "SELECT ToolName AS tool, count() AS calls,\n"
            "    countIf(StatusCode = 'Error') AS errors, errors / calls AS error_rate,\n"
            f"    {_LATENCY},\n"
            "    uniqExact(TraceId) AS runs,\n"
            "    argMaxIf(TraceId, Timestamp, StatusCode = 'Error') AS last_failed_run\n"
            "FROM "
            + window_spans(
                "ToolName, StatusCode, Duration, TraceId, Timestamp",
                f"SpanType = 'tool' AND {_TOOL}",
            )
            + "\nGROUP BY tool\nORDER BY calls DESC, tool\nLIMIT 100",
            "Tool calls in the time range. A tool's name shows only its failing spans "
            "below; the last failed run opens its timeline.",
            [
                override("tool", links=[_select_this("tool")]),
                *latency,
                _named("last_failed_run", "last failed run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        9,
    )
    grid.add(
        _timeseries(
            "Tool calls and errors",
            "SELECT $__timeInterval(Timestamp) AS time,\n"
            "    count() AS calls, countIf(StatusCode = 'Error') AS errors\n"
            "FROM "
            + window_spans("Timestamp, StatusCode", f"SpanType = 'tool' AND {_TOOL}")
            + "\nGROUP BY time\nORDER BY time",
            "short",
            "Tool calls per interval, and how many failed.",
        ),
        12,
        9,
    )
    grid.add(
        _table(
            "Models",
            "SELECT Model AS model, count() AS calls,\n"
            "    countIf(StatusCode = 'Error') AS errors, errors / calls AS error_rate,\n"
            f"    {_LATENCY},\n"
            "    sum(InputTokens) AS input_tokens, sum(OutputTokens) AS output_tokens,\n"
            "    uniqExact(TraceId) AS runs\n"
            "FROM "
            + window_spans(
                "Model, StatusCode, Duration, TraceId, InputTokens, OutputTokens",
                f"SpanType = 'llm' AND {_MODEL}",
            )
            + "\nGROUP BY model\nORDER BY calls DESC, model\nLIMIT 100",
            "Model calls in the time range: latency, failures, tokens.",
            [
                override("model", links=[_select_this("model")]),
                *latency,
                _named("input_tokens", "tokens in"),
                _named("output_tokens", "tokens out"),
            ],
        ),
        12,
        8,
    )
    grid.add(
        _table(
            "Top error types",
            "SELECT ErrorType AS error_type,\n"
            "    arrayStringConcat(arraySort(groupUniqArray(SpanType)), ', ') AS span_types,\n"
            "    count() AS errors, uniqExact(TraceId) AS runs,\n"
            "    argMax(TraceId, Timestamp) AS last_run\n"
            "FROM "
            + window_spans(
                "ErrorType, SpanType, TraceId, Timestamp", f"StatusCode = 'Error' AND {_ERROR_TYPE}"
            )
            + "\nGROUP BY error_type\nORDER BY errors DESC, error_type\nLIMIT 50",
            "Errored spans by error type (the SDK's error message or the span's error.type). "
            "An error type shows only its failing spans below.",
            [
                _named("error_type", "error type", links=[_select_this("error_type")]),
                _named("span_types", "span types"),
                _named("last_run", "last run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        8,
    )
    guardrail = f"SpanAttributes['{sc.AFR_GUARDRAIL_NAME}']"
    tripped = f"SpanAttributes['{sc.AFR_GUARDRAIL_TRIGGERED}'] = 'true'"
    grid.add(
        _table(
            "Guardrail trips",
            f"SELECT if({guardrail} != '', {guardrail}, SpanName) AS guardrail,\n"
            f"    count() AS checks, countIf({tripped}) AS trips,\n"
            "    trips / checks AS trip_rate,\n"
            f"    uniqExactIf(TraceId, {tripped}) AS runs_tripped,\n"
            f"    argMaxIf(TraceId, Timestamp, {tripped}) AS last_tripped_run\n"
            "FROM "
            + window_spans("SpanAttributes, SpanName, TraceId, Timestamp", "SpanType = 'guardrail'")
            + "\nGROUP BY guardrail\nORDER BY trips DESC, checks DESC, guardrail\nLIMIT 50",
            f"Guardrail spans and how often they tripped ({sc.AFR_GUARDRAIL_TRIGGERED}).",
            [
                _named("trip_rate", "trip rate", unit="percentunit", decimals=1),
                _named("runs_tripped", "runs tripped"),
                _named("last_tripped_run", "last tripped run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        7,
    )
    grid.add(
        _table(
            "Handoff paths",
            f"SELECT SpanAttributes['{sc.AFR_HANDOFF_FROM}'] AS from_agent,\n"
            f"    SpanAttributes['{sc.AFR_HANDOFF_TO}'] AS to_agent,\n"
            "    count() AS handoffs, uniqExact(TraceId) AS runs,\n"
            "    argMax(TraceId, Timestamp) AS last_run\n"
            "FROM "
            + window_spans("SpanAttributes, TraceId, Timestamp", "SpanType = 'handoff'")
            + "\nGROUP BY from_agent, to_agent\nORDER BY handoffs DESC, from_agent, to_agent\nLIMIT 50",
            f"Which agent handed off to which ({sc.AFR_HANDOFF_FROM} → {sc.AFR_HANDOFF_TO}).",
            [
                _named("from_agent", "from"),
                _named("to_agent", "to"),
                _named("last_run", "last run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        7,
    )
    grid.add(
        _table(
            "Failing spans",
            "SELECT Timestamp AS time, SpanName AS span, SpanType AS type,\n"
            "    ToolName AS tool, Model AS model, AgentName AS agent,\n"
            "    ErrorType AS error, StatusMessage AS message,\n"
            "    Duration / 1e6 AS duration_ms, TraceId AS run_id, SpanId AS span_id,\n"
            "    ProjectId AS project\n"
            "FROM "
            + window_spans(
                "Timestamp, SpanName, SpanType, ToolName, Model, AgentName, ErrorType,\n"
                "        StatusMessage, Duration, TraceId, SpanId, ProjectId",
                f"StatusCode = 'Error'\n      AND {_TOOL} AND {_MODEL} AND {_ERROR_TYPE}",
            )
            + f"\nORDER BY time DESC, project, run_id, span_id\nLIMIT {RECENT_RUNS}",
            "The errored spans behind the numbers above (filtered by tool, model and error "
            "type), newest first; a run opens its timeline at that span.",
            [
                override("time", custom_width=180),
                _named("duration_ms", "duration", unit="ms", decimals=1),
                _named(
                    "run_id",
                    "run",
                    links=[
                        link(
                            "Open the run at this span",
                            RUN_UID,
                            "var-run_id=${__value.raw}",
                            "var-span_id=${__data.fields.span_id}",
                            ROW_PROJECT,
                        )
                    ],
                ),
            ],
        ),
        24,
        10,
    )
    return dashboard(
        TOOLS_UID,
        "afr · Tools and failures",
        "Which tools and models fail, how slow they are, what trips the guardrails and where "
        "agents hand off.",
        variables,
        grid,
    )


# -- Replays and evals ----------------------------------------------------------------------


def _kind_is(kind: str) -> str:
    if kind not in sc.RUN_KINDS:
        raise ValueError(f"no run kind {kind!r}")
    return f"{KIND} = '{kind}'"


def replays_and_evals() -> dict[str, Any]:
    variables = [
        *_common_variables(),
        query_variable(
            "workflow",
            "Workflow",
            f"SELECT DISTINCT {WORKFLOW_OF_ROW} AS workflow FROM {RUNS}\n"
            f"WHERE {in_projects()} AND $__timeFilter(Start) AND workflow != ''\n"
            "ORDER BY workflow",
        ),
    ]
    only_workflow = ("workflow",)
    outcome = eval_outcome("verdict", "errors")
    judged = window_runs(
        [f"{KIND} AS kind", f"{VERDICT} AS verdict", f"{ERRORS} AS errors"],
        filters=only_workflow,
    )
    grid = Grid()
    grid.add(
        _stat(
            "Replays and evals in the window",
            "SELECT countIf(kind = 'replay') AS replays,\n"
            "    countIf(kind = 'replay' AND verdict = 'FAILURE_FIXED') AS fixed,\n"
            "    countIf(kind = 'eval') AS eval_runs,\n"
            f"    countIf(kind = 'eval' AND {outcome} = 'passed') AS evals_passed,\n"
            f"    countIf(kind = 'eval' AND {outcome} != 'passed') AS evals_not_passed,\n"
            "    countIf(kind = 'sweep') AS sweeps\n"
            f"FROM (\n{judged}\n)",
            "Replays, eval runs and sweeps started in the time range.",
            [
                _named("replays", "Replays"),
                _named("fixed", "FAILURE_FIXED", color={"mode": "fixed", "fixedColor": "green"}),
                _named("eval_runs", "Eval runs"),
                _named(
                    "evals_passed", "Evals passed", color={"mode": "fixed", "fixedColor": "green"}
                ),
                _named(
                    "evals_not_passed",
                    "Evals not passed",
                    color={"mode": "fixed", "fixedColor": "red"},
                ),
                _named("sweeps", "Sweeps"),
            ],
        ),
        24,
        4,
    )
    verdicts = _timeseries(
        "Replay verdicts",
        "SELECT $__timeInterval(start) AS time,\n"
        + _count_each("verdict", VERDICTS)
        + f"FROM (\n{judged}\n)\nWHERE kind = 'replay'\nGROUP BY time\nORDER BY time",
        "short",
        "Replays by the time they ran, by verdict.",
        drawStyle="bars",
        fillOpacity=70,
        stacking={"mode": "normal", "group": "A"},
    )
    verdicts["fieldConfig"]["overrides"] = _series_colours(_VERDICT_COLOURS, VERDICTS)
    grid.add(verdicts, 12, 8)
    outcomes = _timeseries(
        "Eval outcomes",
        "SELECT $__timeInterval(start) AS time,\n"
        + _count_each(outcome, EVAL_STATUSES)
        + f"FROM (\n{judged}\n)\nWHERE kind = 'eval'\nGROUP BY time\nORDER BY time",
        "short",
        "Eval runs (afr eval run, sweeps) by the time they ran, by outcome.",
        drawStyle="bars",
        fillOpacity=70,
        stacking={"mode": "normal", "group": "A"},
    )
    outcomes["fieldConfig"]["overrides"] = _series_colours(_VERDICT_COLOURS, EVAL_STATUSES)
    grid.add(outcomes, 12, 8)
    sweeps = window_runs(
        [
            f"{KIND} AS kind",
            f"{VERDICT} AS verdict",
            f"{ERRORS} AS errors",
            "max(SweepId) AS sweep_id",
        ],
        filters=only_workflow,
        having=("sweep_id != ''",),
    )
    per_sweep = (
        "SELECT sweep_id, min(start) AS started,\n"
        "    countIf(kind = 'eval') AS evals,\n"
        + "".join(
            f"    countIf(kind = 'eval' AND {outcome} = '{status}') AS {status},\n"
            for status in EVAL_STATUSES
        )
        + "    if(evals > 0, passed / evals, 0) AS pass_rate,\n"
        "    anyIf(TraceId, kind = 'sweep') AS sweep_run_id\n"
        f"FROM (\n{sweeps}\n)\nGROUP BY sweep_id"
    )
    grid.add(
        _timeseries(
            "Sweep pass rate",
            f"SELECT started AS time, pass_rate\nFROM (\n{per_sweep}\n)\nORDER BY time, sweep_id",
            "percentunit",
            "Each sweep's share of passed evals, at the time it started.",
            drawStyle="line",
            showPoints="always",
            pointSize=8,
        ),
        8,
        8,
    )
    grid.add(
        _table(
            "Sweeps",
            f"SELECT * FROM (\n{per_sweep}\n)\nORDER BY started DESC, sweep_id\nLIMIT 100",
            "Each sweep's evals by outcome; its summary run opens its timeline.",
            [
                override("sweep_id", custom_width=200),
                override("started", custom_width=180),
                override(
                    "pass_rate",
                    unit="percentunit",
                    min=0,
                    max=1,
                    decimals=0,
                    custom_cellOptions={"type": "gauge", "mode": "basic"},
                    thresholds={
                        "mode": "absolute",
                        "steps": [
                            {"color": "red", "value": None},
                            {"color": "orange", "value": 0.5},
                            {"color": "green", "value": 1},
                        ],
                    },
                ),
                _named("sweep_run_id", "summary run", links=[run_link(row_project=False)]),
            ],
        ),
        16,
        8,
    )
    failing = window_runs(
        [],
        filters=only_workflow,
        having=(
            _kind_is(sc.RUN_KIND_EVAL),
            f"{eval_outcome(VERDICT, ERRORS)} != 'passed'",
        ),
    )
    grid.add(
        _table(
            "Failing evals",
            f"SELECT start, eval_name, {eval_outcome('verdict', 'error_count')} AS outcome,\n"
            "    failing_span_name, failing_error_type, sweep_id, run_id, source_run_id,\n"
            "    project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(failing, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            "Eval runs that did not pass, newest first, with the span that failed; the eval "
            "run and the run it was made from open their timelines.",
            [
                override("start", custom_width=180),
                _named("eval_name", "eval"),
                _coloured("outcome", _VERDICT_COLOURS, 110),
                _named("failing_span_name", "failing span"),
                _named("failing_error_type", "error"),
                _named("sweep_id", "sweep"),
                _named("run_id", "eval run", links=[run_link()]),
                _named("source_run_id", "source run", links=[run_link("Open the source run")]),
            ],
        ),
        24,
        9,
    )
    replays = window_runs([], filters=only_workflow, having=(_kind_is(sc.RUN_KIND_REPLAY),))
    grid.add(
        _table(
            "Replays",
            "SELECT start, verdict, status, workflow, duration_ms, run_id, source_run_id,\n"
            "    project\n"
            f"FROM {SUMMARY}\n"
            f"WHERE {picked_runs(replays, RECENT_RUNS)}\n"
            "ORDER BY start DESC, run_id, project",
            "Replays, newest first, with their verdicts; the replay and its source open "
            "their timelines.",
            [
                override("start", custom_width=180),
                _coloured("verdict", _VERDICT_COLOURS, 140),
                _coloured("status", _STATUS_COLOURS, 80),
                _named("duration_ms", "duration", unit="ms", decimals=0),
                _named("run_id", "replay run", links=[run_link()]),
                _named("source_run_id", "source run", links=[run_link("Open the source run")]),
            ],
        ),
        24,
        9,
    )
    return dashboard(
        EVALS_UID,
        "afr · Replays and evals",
        "What replays found and whether the evals made from them still pass.",
        variables,
        grid,
        time_from="now-7d",
    )


def _count_each(expression: str, values: tuple[str, ...]) -> str:
    """One column per value (a wide frame: a series each, coloured by name)."""
    return ",\n".join(f"    countIf({expression} = '{v}') AS {v}" for v in values) + "\n"


def _series_colours(mapping: dict[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """A fixed colour for each series named after a mapped value (a verdict, an outcome)."""
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [
                {
                    "id": "color",
                    "value": {"mode": "fixed", "fixedColor": mapping["options"][name]["color"]},
                }
            ],
        }
        for name in names
    ]


# -- files ----------------------------------------------------------------------------------


def build_all() -> dict[str, dict[str, Any]]:
    """The dashboards by uid."""
    built = [agent_runs(), run_timeline(), tools_and_failures(), replays_and_evals()]
    return {d["uid"]: d for d in built}


def render(dashboard_json: dict[str, Any]) -> str:
    return json.dumps(dashboard_json, indent=2, ensure_ascii=False) + "\n"


FILE_NAMES = {
    RUNS_UID: "agent-runs.json",
    RUN_UID: "run-timeline.json",
    TOOLS_UID: "tools-and-failures.json",
    EVALS_UID: "replays-and-evals.json",
}


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for uid, built in build_all().items():
        path = directory / FILE_NAMES[uid]
        path.write_text(render(built))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else Path("dashboards")
    for path in write_all(directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
