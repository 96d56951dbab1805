"""``afr-tools``, Tools and failures: per tool and model calls, errors and latency; error types;
guardrail trips; handoff paths; the failing spans behind the numbers."""

from __future__ import annotations

from typing import Any

from afr.grafana.dashboards.common import (
    PROJECT,
    RECENT_RUNS,
    ROW_PROJECT,
    RUN_UID,
    TOOLS_UID,
    common_variables,
    named,
    run_link,
    table,
    timeseries,
)
from afr.grafana.panels import Grid, dashboard, link, override, query_variable
from afr.grafana.queries import SPANS, all_or, in_projects, values, window_spans
from afr_exporter import semconv as sc

__all__ = ["tools_and_failures"]

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
        *common_variables(),
        _span_option("tool", "Tool", "ToolName", "SpanType = 'tool'"),
        _span_option("model", "Model", "Model", "SpanType = 'llm'"),
        _span_option("error_type", "Error type", "ErrorType", "StatusCode = 'Error'"),
    ]
    latency = [
        named("p50_ms", "p50", unit="ms", decimals=1),
        named("p95_ms", "p95", unit="ms", decimals=1),
        named("p99_ms", "p99", unit="ms", decimals=1),
        named("error_rate", "error rate", unit="percentunit", decimals=1),
        override("latency_ms", custom_hidden=True),
    ]
    grid = Grid()
    grid.add(
        table(
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
                named("last_failed_run", "last failed run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        9,
    )
    grid.add(
        timeseries(
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
        table(
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
                named("input_tokens", "tokens in"),
                named("output_tokens", "tokens out"),
            ],
        ),
        12,
        8,
    )
    grid.add(
        table(
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
                named("error_type", "error type", links=[_select_this("error_type")]),
                named("span_types", "span types"),
                named("last_run", "last run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        8,
    )
    guardrail = f"SpanAttributes['{sc.AFR_GUARDRAIL_NAME}']"
    tripped = f"SpanAttributes['{sc.AFR_GUARDRAIL_TRIGGERED}'] = 'true'"
    grid.add(
        table(
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
                named("trip_rate", "trip rate", unit="percentunit", decimals=1),
                named("runs_tripped", "runs tripped"),
                named("last_tripped_run", "last tripped run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        7,
    )
    grid.add(
        table(
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
                named("from_agent", "from"),
                named("to_agent", "to"),
                named("last_run", "last run", links=[run_link(row_project=False)]),
            ],
        ),
        12,
        7,
    )
    grid.add(
        table(
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
                named("duration_ms", "duration", unit="ms", decimals=1),
                named(
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
