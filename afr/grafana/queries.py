"""The SQL the dashboards share: tables, the runs table's merges, the dashboard filters.

How the queries stay fast as data grows (docs/adr/0019):

- Runs come from the ``runs`` table (one row per run and insert block), merged with the
  functions the ``run_summary`` view uses, in one pass over the window's rows
  (``window_runs``). The view itself is read only for runs already picked by id
  (``run_id IN (...)``, pushed below its GROUP BY), never for a whole window: a time filter
  on the view's ``start`` cannot be pushed below its GROUP BY, so it would merge every run
  of the project.
- Spans are read from the spans table for the selected projects and the time window (its
  partitions are days, its key starts with the project), each once: ``LIMIT 1 BY`` the
  span's key over a window, ``FINAL`` over one run's key range.
- Every query is bounded by the dashboard's time range through the plugin's macros
  (``$__timeFilter``, ``$__fromTime``, ``$__toTime``); a run's own spans by the run's time
  bounds, kept by the store in ``otel_traces_trace_id_ts``.
- Failure clusters (``failure_clusters``) are the read API's (``collector/store/failures.py``)
  in SQL: the window's failing production runs merged whole and grouped by signature, the
  replays and eval runs linked to them at any time, and the same status rules.
"""

from __future__ import annotations

from afr_exporter.semconv import RUN_KINDS
from collector.store.failures import FAILURE_STATUSES
from collector.store.schema import (
    FAILURE_PATH_SQL,
    LOGS_VIEW,
    MODEL_PRICES_TABLE,
    RUN_SUMMARY_VIEW,
    RUNS_TABLE,
    SERVICE_NAME,
    SIGNATURE_SQL,
    SPANS_TABLE,
    TRACE_ID_TS_TABLE,
    TRACES_VIEW,
    call_costs_sql,
    priced_cost_sql,
    prices_sql,
    unpriced_models_sql,
)
from replay_worker.replay.verdict import VERDICTS
from replay_worker.sweeps import STATUSES as EVAL_STATUSES

__all__ = [
    "AGENTS",
    "CONVERSATION",
    "CONVERSATION_ID",
    "COST",
    "DETAILS",
    "ERRORS",
    "EVAL_STATUSES",
    "FAILURE_STATUSES",
    "KIND",
    "LOGS",
    "PRICES",
    "RUNS",
    "RUN_ID",
    "RUN_SLACK",
    "RUN_SPANS_FINAL",
    "SERVICE_NAME",
    "SPANS",
    "SPAN_ID",
    "STATUS",
    "SUMMARY",
    "TRACES",
    "TRACE_BOUNDS",
    "TRACE_SEARCH_LIMIT",
    "TRACE_SPAN_LIMIT",
    "UNPRICED",
    "USAGE",
    "VERDICT",
    "VERDICTS",
    "WORKFLOW",
    "WORKFLOW_OF_ROW",
    "all_or",
    "conversation_runs",
    "eval_outcome",
    "failure_clusters",
    "failure_title",
    "in_projects",
    "picked_runs",
    "values",
    "window_runs",
    "window_spans",
]

DB = "${database}"
RUNS = f"{DB}.{RUNS_TABLE}"
SUMMARY = f"{DB}.{RUN_SUMMARY_VIEW}"
SPANS = f"{DB}.{SPANS_TABLE}"
TRACE_BOUNDS = f"{DB}.{TRACE_ID_TS_TABLE}"
MODEL_PRICES = f"{DB}.{MODEL_PRICES_TABLE}"

RUN_ID = "${run_id:singlequote}"
SPAN_ID = "${span_id:singlequote}"
RUN_SPANS_FINAL = f"{SPANS} FINAL"
"""One run's spans, each once: ``FINAL`` over one (project, trace) key range is cheap."""
TRACES = f"{DB}.{TRACES_VIEW}"
LOGS = f"{DB}.{LOGS_VIEW}"
"""The log records, each once (the plugin's OTel logs mode reads the same view)."""
"""The spans as the plugin's OTel trace mode reads them: each once, ``ServiceName`` by the one
service-name rule (``SERVICE_NAME``). The trace panels read it, as Explore does."""
TRACE_SPAN_LIMIT = 10_000
"""A trace panel's spans at most: Grafana's trace view renders no more usefully, and a
trace query is bounded like every other one."""
TRACE_SEARCH_LIMIT = 1000
"""Traces a trace search lists: the plugin's own default."""


def window_spans(columns: str, condition: str) -> str:
    """The selected projects' spans of the dashboard's window that meet ``condition``, each
    once: ``LIMIT 1 BY`` the span's key (a duplicate delivery is the same row again). Over a
    window it is several times faster than ``FINAL``, which would need a query-level setting
    (``do_not_merge_across_partitions_select_final``) that a read-only user cannot send."""
    return (
        f"(\n    SELECT {columns}\n    FROM {SPANS}\n"
        f"    WHERE {in_projects()} AND $__timeFilter(Timestamp)\n      AND {condition}\n"
        "    LIMIT 1 BY ProjectId, TraceId, SpanId\n)"
    )


def values(variable: str) -> str:
    """A variable's values as a list of SQL strings (Grafana's ``singlequote`` format)."""
    return "${" + variable + ":singlequote}"


def all_or(condition: str, variable: str) -> str:
    """``condition``, or ``1=1`` when ``variable`` is All or empty (the plugin's
    ``$__conditionalAll``, which splits its arguments at commas outside parentheses: keep
    brackets and strings of the condition inside a function call)."""
    return f"$__conditionalAll({condition}, ${variable})"


def in_projects(column: str = "ProjectId") -> str:
    return f"{column} IN ({values('project')})"


# -- the runs table, merged as the run_summary view merges it (collector/store/schema.py) --

ERRORS = "length(groupUniqArrayArray(ErrorSpans))"
STATUS = f"if({ERRORS} > 0, 'error', 'ok')"
WORKFLOW = "min(Workflow).2"
"""The root span's workflow name (a run's earliest root, as the view takes it)."""
WORKFLOW_OF_ROW = "Workflow.2"
AGENTS = "groupUniqArrayArray(Agents)"
USAGE = "maxMap(Usage)"
VERDICT = "max(Verdict)"
KIND_CODES = {"capture": 0, "sweep": 1, "eval": 2, "replay": 3}
"""``KindCode`` of each run kind: the order of the view's ``['capture', 'sweep', 'eval',
'replay'][max(KindCode) + 1]``."""
if set(KIND_CODES) != set(RUN_KINDS):
    raise RuntimeError("a run kind the dashboards cannot name: update KIND_CODES")
KIND = (
    f"transform(max(KindCode), [{', '.join(str(c) for c in KIND_CODES.values())}], "
    f"[{', '.join(repr(k) for k in KIND_CODES)}], '')"
)
DETAILS = "maxMap(UsageDetails)"
"""Each model call's cache-read, cache-creation and reasoning tokens (migration 5)."""
PRICES = f"{prices_sql(MODEL_PRICES)} AS prices"
_CALL_COSTS = call_costs_sql("usage", "details", "prices")
COST = priced_cost_sql(_CALL_COSTS)
"""The cost of a run's priced model calls from its merged ``usage`` and ``details`` (keyed
``<span id>:<model>``) and ``prices``, each token kind at its rate: the view's formula (a
test compares the two). A call whose model has no price is not in it: see ``UNPRICED``."""
UNPRICED = unpriced_models_sql("usage", _CALL_COSTS)
"""The models of a run's calls that no price knows: its cost is unknown (ADR 39)."""
UNPRICED_TEXT = "unpriced"
"""What a cost panel shows for a cost that is unknown (every call of a model no price knows)."""

RUN_SLACK = "INTERVAL 1 HOUR"
"""How long before the window a run's rows are read: a run that started in the window is
seen whole (its start exact) when it lasted less than this."""

CONVERSATION_ID = "${conversation:singlequote}"
"""The conversation textbox (a conversation id; empty: every run)."""
CONVERSATION = "max(Conversation)"
"""A run's conversation (``gen_ai.conversation.id``), from its merged ``runs`` rows."""

FILTERS = {
    "conversation": f"({CONVERSATION_ID} = '' OR {CONVERSATION} = {CONVERSATION_ID})",
    "workflow": all_or(f"{WORKFLOW} IN ({values('workflow')})", "workflow"),
    "agent": all_or(f"hasAny({AGENTS}, [{values('agent')}])", "agent"),
    "status": all_or(f"{STATUS} IN ({values('status')})", "status"),
    "kind": all_or(f"{KIND} IN ({values('kind')})", "kind"),
}


def eval_outcome(verdict: str, errors: str) -> str:
    """An eval run's outcome (passed, failed, inconclusive, errored).

    The store's verdict of an eval run should be its ``afr.eval.status``; while it holds the
    replay verdict instead (the root's metadata has both and the view prefers
    ``afr.verdict``), the outcome is inferred: an eval that did not pass ends with an errored
    span, and an ``INCONCLUSIVE`` replay is an inconclusive eval."""
    statuses = ", ".join(repr(s) for s in EVAL_STATUSES)
    return (
        f"multiIf({verdict} IN ({statuses}), {verdict}, {verdict} = 'INCONCLUSIVE', "
        f"'inconclusive', {errors} = 0, 'passed', 'failed')"
    )


def window_runs(
    columns: list[str],
    *,
    filters: tuple[str, ...] = ("workflow", "agent", "status", "kind"),
    having: tuple[str, ...] = (),
) -> str:
    """The runs of the selected projects that started in the dashboard's window and pass its
    filters, one row each (``ProjectId, TraceId, start`` and ``columns``): one pass over the
    runs table, merged with the view's merge functions."""
    selected = "".join(f",\n    {column}" for column in columns)
    conditions = ["start >= $__fromTime", *(FILTERS[f] for f in filters), *having]
    return (
        f"SELECT ProjectId, TraceId, min(Start) AS start{selected}\n"
        f"FROM {RUNS}\n"
        f"WHERE {in_projects()}\n"
        f"  AND Start >= $__fromTime - {RUN_SLACK} AND Start <= $__toTime\n"
        "GROUP BY ProjectId, TraceId\n"
        "HAVING " + "\n  AND ".join(conditions)
    )


def conversation_runs(conversation: str, limit: int) -> str:
    """The runs of the selected projects in the conversation ``conversation`` (a SQL
    string) that started before the end of the time range, however long before: a
    conversation's runs are few and the earlier ones are the context of the later. In start
    order (``start, run_id, project, status, kind, verdict, workflow, error``), each once."""
    return (
        "SELECT start, run_id, project, status, kind,\n"
        f"    if(kind = 'eval', {eval_outcome('verdict', 'error_count')}, verdict) AS verdict,\n"
        "    workflow, failing_error_type AS error, duration_ms\n"
        f"FROM {SUMMARY}\n"
        f"WHERE {in_projects('project')} AND run_id IN (\n"
        f"    SELECT DISTINCT TraceId FROM {RUNS}\n"
        f"    WHERE {in_projects()} AND Conversation = {conversation} AND {conversation} != ''\n"
        "      AND Start <= $__toTime)\n"
        f"ORDER BY start, run_id, project\nLIMIT {limit}"
    )


def picked_runs(candidates: str, limit: int) -> str:
    """``run_id IN (...)`` for the newest ``limit`` of ``candidates`` (a ``window_runs``)."""
    return (
        f"{in_projects('project')}\n"
        f"  AND run_id IN (SELECT TraceId FROM (\n{candidates}\n"
        f"ORDER BY start DESC, TraceId, ProjectId LIMIT {limit}))"
    )


# -- failure clusters, as collector/store/failures.py reads them (ADR 34) ------------------

_FIXED = "FAILURE_FIXED"
_PASSED = "passed"
_KIND_REPLAY = KIND_CODES["replay"]
_KIND_EVAL = KIND_CODES["eval"]
_KIND_CAPTURE = KIND_CODES["capture"]
_RANKS = {"recurring": 0, "open": 1, "guarded": 2, "fixed": 2}
"""The read API's order (``failures._RANK``): recurring, then open, then the rest."""
if set(_RANKS) != set(FAILURE_STATUSES):
    raise RuntimeError("a failure status the dashboards cannot rank: update _RANKS")


def failure_title(cause: str, path: str) -> str:
    """``failures.failure_title`` in SQL: ``tool:refund_order: /amount: string where number,
    after Triage Agent → Refund Agent``, from a cause (``[span type, subject, error type,
    shape]`` as JSON, else the shape itself) and the path of agents (an array)."""
    parts = f"JSONExtract({cause}, 'Array(String)')"
    whole = f"length({parts}) = 4"
    span_type = f"if({whole}, {parts}[1], '')"
    subject = f"if({whole}, {parts}[2], '')"
    error_type = f"if({whole}, {parts}[3], '')"
    shape = f"if({whole}, {parts}[4], {cause})"
    return (
        f"concat(multiIf({subject} != '', {subject}, {span_type} != '', {span_type}, 'run'),\n"
        f"        ': ', multiIf({shape} != '', {shape}, {error_type} != '', {error_type}, 'error'),\n"
        f"        if({error_type} != '' AND {shape} != '' AND position({shape}, {error_type}) = 0,\n"
        f"            concat(' (', {error_type}, ')'), ''),\n"
        f"        if(notEmpty({path}), concat(', after ', arrayStringConcat({path}, ' → ')), ''))"
    )


def failure_clusters(
    *,
    projects: str | None = None,
    filters: tuple[str, ...] = ("workflow", "agent"),
    having: tuple[str, ...] = (),
) -> str:
    """Common table expressions (for a ``WITH``) ending in ``failure_clusters``: one row per
    project and signature over the failing production runs that started in the dashboard's
    window (``failing_runs``, one row each, merged whole), with the read API's figures and
    status (``collector/store/failures.py``; a test compares the two):

    - ``fixed``: a replay (kind replay) of a member reached FAILURE_FIXED; ``fixed_by`` is the
      first such replay;
    - ``guarded``: an eval run (kind eval, with an eval name) of a member exists; the guard
      shown is the eval whose newest run is newest, with that run's outcome;
    - ``recurring``: of those evals, taken in that order, the first whose newest run passed
      and after whose first run a member started: ``recurring_since`` is that first run,
      ``runs_since_guard`` the members after it.

    The replays and eval runs (``failure_links``) are read at any time, as the API reads
    them. ClickHouse runs a common table expression again wherever it is read, so the runs
    are read in one pass: each member and each run linked to it become rows of its
    ``anchor`` (the member's id), grouped by it, then by signature; the fixes and guards are
    worked out from the cluster's array of linked runs (they are few).

    ``projects`` is the condition on ``ProjectId`` (default: the selected projects);
    ``filters`` the run filters a member must pass; ``having`` more conditions on a member
    (``signature``)."""
    where = projects or in_projects()
    window = "Start >= $__fromTime AND Start < $__toTime"
    conditions = [
        "start >= $__fromTime AND start < $__toTime",
        f"max(KindCode) = {_KIND_CAPTURE} AND signature != ''",
        *(FILTERS[f] for f in filters),
        *having,
    ]
    member_having = "\n      AND ".join(conditions)
    ranks = ", ".join(f"'{s}'" for s in _RANKS)
    rank_values = ", ".join(str(r) for r in _RANKS.values())
    # A linked run: (start, run id, kind, verdict, eval name). A guard: (eval name, its newest
    # run's outcome, that run, its first run's start, its runs, members after its first run,
    # its newest run's start, its first run's id).
    return f"""failing_runs AS (
    SELECT ProjectId AS project, TraceId AS run_id, min(Start) AS start,
        min(Failure) AS failure, failure.2 AS cause,
        {FAILURE_PATH_SQL.format(failure="failure")} AS path,
        {SIGNATURE_SQL.format(cause="cause", path="path")} AS signature,
        {WORKFLOW} AS workflow, {AGENTS} AS agents
    FROM {RUNS}
    WHERE {where}
      AND (ProjectId, TraceId) IN (
        SELECT ProjectId, TraceId FROM {RUNS}
        WHERE {where} AND Failure.2 != '' AND {window})
    GROUP BY ProjectId, TraceId
    HAVING {member_having}
),
failure_links AS (
    SELECT ProjectId AS project, TraceId AS run_id, min(Start) AS start,
        max(KindCode) AS kind, max(SourceRunId) AS source_run_id,
        max(Verdict) AS verdict, max(EvalName) AS eval_name
    FROM {RUNS}
    WHERE {where}
      AND (ProjectId, TraceId) IN (
        SELECT ProjectId, TraceId FROM {RUNS}
        WHERE {where} AND (ProjectId, SourceRunId) IN (SELECT project, run_id FROM failing_runs))
    GROUP BY ProjectId, TraceId
    HAVING kind IN ({_KIND_EVAL}, {_KIND_REPLAY})
),
failure_anchors AS (
    SELECT project, anchor, max(member) AS is_member,
        anyIf(signature, member = 1) AS signature, anyIf(cause, member = 1) AS cause,
        anyIf(path, member = 1) AS path, anyIf(start, member = 1) AS start,
        anyIf(workflow, member = 1) AS workflow, anyIf(agents, member = 1) AS agents,
        groupArrayIf(link, member = 0) AS links
    FROM (
        SELECT project, run_id AS anchor, 1 AS member, signature, cause, path, start,
            workflow, agents, (start, '', toUInt8(0), '', '') AS link
        FROM failing_runs
        UNION ALL
        SELECT project, source_run_id AS anchor, 0 AS member, '' AS signature, '' AS cause,
            CAST([], 'Array(String)') AS path, start, '' AS workflow,
            CAST([], 'Array(String)') AS agents, (start, run_id, kind, verdict, eval_name) AS link
        FROM failure_links
    )
    GROUP BY project, anchor
    HAVING is_member = 1
),
failure_members AS (
    SELECT project, signature, any(cause) AS cause, any(path) AS path, count() AS runs,
        min(start) AS first_seen, max(start) AS last_seen,
        max((start, anchor)).2 AS newest_run, groupArray(start) AS starts,
        sumMap([toStartOfDay(start, 'UTC')], [toUInt64(1)]) AS per_day,
        arrayFilter(w -> w != '', arraySort(groupUniqArray(workflow))) AS workflows,
        arraySort(groupUniqArrayArray(agents)) AS agents,
        groupArrayArray(links) AS linked
    FROM failure_anchors
    GROUP BY project, signature
),
failure_clusters AS (
    SELECT project, signature,
        {failure_title("cause", "path")} AS title,
        runs, first_seen, last_seen, newest_run, workflows, agents, per_day,
        arraySort(arrayMap(l -> (l.1, l.2),
            arrayFilter(l -> l.3 = {_KIND_REPLAY} AND l.4 = '{_FIXED}', linked))) AS fixes,
        if(empty(fixes), '', fixes[1].2) AS fixed_by,
        arrayFilter(l -> l.3 = {_KIND_EVAL} AND l.5 != '', linked) AS eval_links,
        arrayMap(name -> arraySort(l -> (l.1, l.2), arrayFilter(l -> l.5 = name, eval_links)),
            arrayDistinct(arrayMap(l -> l.5, eval_links))) AS by_eval,
        arraySort(g -> (-toUnixTimestamp64Nano(g.7), g.4, g.8),
            arrayMap(r -> (r[-1].5, r[-1].4, r[-1].2, r[1].1, length(r),
                arrayCount(s -> s > r[1].1, starts), r[-1].1, r[1].2), by_eval)) AS guards,
        arrayFilter(g -> g.2 = '{_PASSED}' AND g.6 > 0, guards) AS recurred,
        multiIf(notEmpty(recurred), 'recurring', notEmpty(guards), 'guarded',
            fixed_by != '', 'fixed', 'open') AS status,
        transform(status, [{ranks}], [{rank_values}], 9) AS rank,
        if(notEmpty(recurred), recurred[1], guards[1]) AS guard,
        guard.1 AS guard_eval, guard.2 AS guard_outcome, guard.3 AS guard_run,
        guard.5 AS eval_runs,
        if(notEmpty(recurred), guard.4, NULL) AS recurring_since,
        if(notEmpty(recurred), guard.6, 0) AS runs_since_guard
    FROM failure_members
)"""
