"""``afr-run``, Run timeline: one run in the trace view, its spans, the selected span's input and
output, the cluster of its failure, its source, replays and evals, and a replay's or eval's
tool calls against its source's."""

from __future__ import annotations

from typing import Any

from afr.grafana.dashboards.common import (
    FAILURE_STATUS_COLOURS,
    PROJECT,
    RUN_UID,
    STATUS_COLOURS,
    VERDICT_COLOURS,
    coloured,
    common_variables,
    failure_link,
    named,
    run_link,
    stat,
    table,
)
from afr.grafana.dashboards.runs import CONVERSATION_FIELDS, CONVERSATION_RUNS
from afr.grafana.panels import (
    FORMAT_LOGS,
    FORMAT_TRACE,
    Grid,
    dashboard,
    link,
    override,
    panel,
    target,
    textbox,
)
from afr.grafana.queries import (
    LOGS,
    RUN_ID,
    RUN_SPANS_FINAL,
    RUNS,
    SPAN_ID,
    SUMMARY,
    TRACE_BOUNDS,
    TRACE_SEARCH_LIMIT,
    TRACE_SPAN_LIMIT,
    TRACES,
    UNPRICED_TEXT,
    conversation_runs,
    eval_outcome,
    failure_clusters,
    in_projects,
    window_spans,
)
from collector.store.schema import SERVICE_NAME, TRACES_VIEW

__all__ = ["run_timeline"]

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


LOG_LIMIT = 1000
_LOGS_SQL = f"""
WITH {_RUN}
SELECT Timestamp AS timestamp, Body AS body, SeverityText AS level, TraceId AS traceID,
    SpanId AS spanID, EventName AS event, ServiceName AS service, LogAttributes AS labels
FROM {LOGS}
WHERE ProjectId = run_project AND TraceId = {RUN_ID}
  AND run_end >= $__fromTime AND run_start <= $__toTime
ORDER BY Timestamp, LogId
LIMIT {LOG_LIMIT}
"""
"""The run's log records (keyed by run: no time bound of their own), each once."""

_THIS_FAILURE_SQL = f"""
WITH {_RUN},
(SELECT any(signature) FROM {SUMMARY} WHERE project = run_project AND run_id = {RUN_ID})
    AS run_signature,
{failure_clusters(projects="ProjectId = run_project", filters=(), having=("signature = run_signature",))}
SELECT status, title, runs AS seen, first_seen AS since, last_seen, fixed_by,
    guard_eval, guard_outcome, guard_run, runs_since_guard, recurring_since, signature, project
FROM failure_clusters
"""
"""The cluster of the run's failure signature over the time range (``failure_clusters``,
as ``GET /api/v1/failures/{{signature}}`` gives it): the run's project's production runs."""

_TOOL_CALLS = """
    SELECT row_number() OVER (ORDER BY Timestamp, SpanId) - 1 AS step,
        if(ToolName != '', ToolName, SpanName) AS tool, Input AS arguments, Output AS output,
        StatusCode = 'Error' AS failed, ErrorType AS error, SpanId AS span_id, 1 AS present
    FROM {spans}
    WHERE {where}
      AND SpanType = 'tool'"""
_CHANGED_KEYS = (
    "arraySort(arrayFilter(k -> JSONExtractRaw(s.arguments, k) != JSONExtractRaw(r.arguments, k),"
    "\n        arrayDistinct(arrayConcat(JSONExtractKeys(s.arguments),"
    " JSONExtractKeys(r.arguments)))))"
)
_SOURCE_CALLS = _TOOL_CALLS.format(
    spans=RUN_SPANS_FINAL,
    where="ProjectId = run_project AND TraceId = source_id\n"
    "      AND Timestamp >= source_start AND Timestamp <= source_end",
)
_THIS_CALLS = _TOOL_CALLS.format(spans=RUN_SPANS_FINAL, where=_RUN_SPANS.replace("\n", "\n    "))
_SOURCE_SQL = f"""
WITH {_RUN},
(SELECT max(SourceRunId) FROM {RUNS} WHERE ProjectId = run_project AND TraceId = {RUN_ID})
    AS source_id,
(SELECT min(Start) FROM {TRACE_BOUNDS} WHERE ProjectId = run_project AND TraceId = source_id)
    AS source_start,
(SELECT max(End) FROM {TRACE_BOUNDS} WHERE ProjectId = run_project AND TraceId = source_id)
    AS source_end
SELECT step, s.tool AS source_tool, r.tool AS tool,
    {_CHANGED_KEYS} AS changed,
    multiIf(s.present = 0 OR r.present = 0, '', s.arguments = r.arguments, 'same',
        notEmpty(changed), concat('different at ', arrayStringConcat(arrayMap(k ->
            concat('/', replaceAll(replaceAll(k, '~', '~0'), '/', '~1')), changed), ', ')),
        JSONType(s.arguments) = 'Object' AND JSONType(r.arguments) = 'Object', 'same',
        'different') AS arguments,
    multiIf(s.present = 0 OR r.present = 0, '', s.output = r.output, 'same', 'different')
        AS output,
    if(s.present = 1, if(s.failed, 'error', 'ok'), '') AS source_status,
    if(r.present = 1, if(r.failed, 'error', 'ok'), '') AS status,
    multiIf(r.present = 0, 'only in the source', s.present = 0, 'only in this run',
        s.tool != r.tool, 'another tool', arguments != 'same', 'other arguments',
        output != 'same', 'another output',
        s.failed != r.failed, if(s.failed, 'error in the source only', 'error in this run only'),
        s.error != r.error, 'another error', 'same') AS difference,
    s.error AS source_error, r.error AS error, s.span_id AS source_span_id, r.span_id AS span_id,
    source_id AS source_run_id, run_project AS project
FROM ({_SOURCE_CALLS}
) AS s
FULL OUTER JOIN ({_THIS_CALLS}
) AS r USING (step)
WHERE source_id != '' AND run_end >= $__fromTime AND run_start <= $__toTime
ORDER BY step
"""
"""A replay's or eval's tool calls against its source run's, paired by position (the n-th
call with the n-th, in start order), as the replay verdict pairs them."""


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
        *common_variables(),
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
        stat(
            "Run",
            f"WITH {_RUN}\n"
            f"SELECT status, kind, {outcome} AS verdict, workflow, root_agent,\n"
            "    duration_ms, span_count, error_count, input_tokens, output_tokens, cost_usd\n"
            f"FROM {SUMMARY}\n"
            f"WHERE project = run_project AND run_id = {RUN_ID}\n"
            "  AND end >= $__fromTime AND start <= $__toTime",
            "The run's summary as the store keeps it.",
            [
                override("status", mappings=[STATUS_COLOURS]),
                override("verdict", mappings=[VERDICT_COLOURS]),
                named("root_agent", "root agent"),
                named("duration_ms", "duration", unit="ms", decimals=0),
                named("span_count", "spans"),
                named("error_count", "errors"),
                named("input_tokens", "tokens in"),
                named("output_tokens", "tokens out"),
                named("cost_usd", "cost", unit="currencyUSD", decimals=4, noValue=UNPRICED_TEXT),
            ],
        ),
        24,
        4,
    )
    grid.add(
        table(
            "This failure",
            _THIS_FAILURE_SQL,
            "The run's failure signature and its cluster over the time range, as the "
            "Failures dashboard and GET /api/v1/failures give it: seen N times since (the "
            "production runs with this signature in the run's project), the replay that fixed "
            "it, the eval that guards it with its newest outcome, and its status (recurring: "
            "the eval passes, yet the failure came back after it first ran). Nothing for a run "
            "without a failure signature, or whose signature no production run of the range "
            "has.",
            [
                coloured("status", FAILURE_STATUS_COLOURS, 90),
                named("title", "failure", custom_minWidth=300),
                named("seen", "seen (runs)", custom_width=90),
                named("since", "since", custom_width=170),
                named("last_seen", "last seen", custom_width=170),
                named("fixed_by", "fixed by", links=[run_link("Open the replay that fixed it")]),
                named("guard_eval", "guarded by"),
                named("guard_outcome", "last eval outcome", custom_width=110),
                named(
                    "guard_run",
                    "eval's newest run",
                    links=[run_link("Open the eval's newest run")],
                ),
                named("runs_since_guard", "runs since the eval", custom_width=110),
                named("recurring_since", "eval first ran", custom_width=170),
                named("signature", "signature", links=[failure_link()], custom_width=150),
            ],
        ),
        24,
        3,
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
        table(
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
                named("at_ms", "at", unit="ms", custom_width=80),
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
                named("duration_ms", "duration", unit="ms", decimals=1, custom_width=90),
                named("input_tokens", "tokens in", custom_width=80),
                named("output_tokens", "tokens out", custom_width=80),
                override("span_id", custom_width=150),
            ],
        ),
        24,
        11,
    )
    grid.add(
        panel(
            "logs",
            "Log records",
            [target(_LOGS_SQL, FORMAT_LOGS)],
            description="The run's OTLP log records (GenAI content events and any record "
            "with the run's trace id), redacted as stored, in time order: its level, event "
            "and span; each links to the run's trace.",
            options={
                "showTime": True,
                "wrapLogMessage": True,
                "enableLogDetails": True,
                "sortOrder": "Ascending",
                "dedupStrategy": "none",
            },
        ),
        24,
        8,
    )
    grid.add(
        table(
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
        table(
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
                coloured("status", STATUS_COLOURS, 80),
                coloured("verdict", VERDICT_COLOURS),
                named("eval_name", "eval"),
                named("sweep_id", "sweep"),
                named("run_id", "run", links=[run_link()]),
            ],
        ),
        24,
        7,
    )
    grid.add(
        table(
            "This conversation",
            f"WITH {_RUN},\n"
            f"(SELECT max(Conversation) FROM {RUNS} WHERE ProjectId = run_project"
            f" AND TraceId = {RUN_ID}) AS run_conversation\n"
            + conversation_runs("run_conversation", CONVERSATION_RUNS),
            "The runs of this run's conversation (gen_ai.conversation.id, the Agents SDK's "
            "group_id) in the order they started, this one among them: what came before it "
            "and after. Empty for a run without a conversation.",
            CONVERSATION_FIELDS,
        ),
        24,
        6,
    )
    grid.add(
        table(
            "Tool calls against the source run",
            _SOURCE_SQL,
            "For a replay or an eval run: its tool calls and its source run's, paired by "
            "position (the n-th call of each, in start order; step 0 is the first), as the "
            "replay verdict pairs them. Arguments are compared by top-level JSON field, each "
            "value as JSON text without whitespace (2 and 2.0 differ here, not in the diff); "
            "outputs and errors as stored (redacted and truncated alike). The first row that "
            "differs in tool or arguments, or has a call only one run made, is the verdict's "
            "first divergence. Model calls, handoffs and guardrails, and an alignment that "
            "skips a call only one run made, are in `afr runs diff` (GET /api/v1/runs/diff).",
            [
                override("step", custom_width=60),
                named("source_tool", "source's tool"),
                override("changed", custom_hidden=True),
                override(
                    "difference",
                    custom_width=170,
                    mappings=[
                        {
                            "type": "value",
                            "options": {"same": {"color": "green", "index": 0}},
                        },
                        {
                            "type": "regex",
                            "options": {
                                "pattern": ".+",
                                "result": {"color": "orange", "index": 1},
                            },
                        },
                    ],
                    custom_cellOptions={"type": "color-text"},
                ),
                coloured("source_status", STATUS_COLOURS, 100),
                coloured("status", STATUS_COLOURS, 80),
                named("source_error", "source's error"),
                named("source_run_id", "source run", links=[run_link("Open the source run")]),
                named(
                    "source_span_id",
                    "source's span",
                    links=[
                        link(
                            "Open the source run at this span",
                            RUN_UID,
                            "var-run_id=${__data.fields.source_run_id}",
                            "var-span_id=${__value.raw}",
                            PROJECT,
                        )
                    ],
                ),
                named(
                    "span_id",
                    "span",
                    links=[
                        link(
                            "Show its input and output",
                            RUN_UID,
                            "${run_id:queryparam}",
                            "var-span_id=${__value.raw}",
                            PROJECT,
                        )
                    ],
                ),
            ],
        ),
        24,
        8,
    )
    grid.add(
        table(
            "Trace search",
            _TRACE_SEARCH_SQL,
            "Root spans of the selected projects in the time range, newest first, as the "
            "plugin's trace search lists them (Explore's query builder gives the same on the "
            "datasource's trace view). A trace id opens that run here, or in Grafana's trace "
            "view.",
            [
                named("traceID", "run", links=[run_link()]),
                named("serviceName", "agent"),
                named("operationName", "root span"),
                named("duration", "duration", unit="ms", decimals=1),
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
