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
"""

from __future__ import annotations

from afr_exporter.semconv import RUN_KINDS
from collector.store.schema import (
    MODEL_PRICES_TABLE,
    RUN_SUMMARY_VIEW,
    RUNS_TABLE,
    SERVICE_NAME,
    SPANS_TABLE,
    TRACE_ID_TS_TABLE,
    TRACES_VIEW,
)
from replay_worker.replay.verdict import VERDICTS
from replay_worker.sweeps import STATUSES as EVAL_STATUSES

__all__ = [
    "AGENTS",
    "COST",
    "ERRORS",
    "EVAL_STATUSES",
    "KIND",
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
    "USAGE",
    "VERDICT",
    "VERDICTS",
    "WORKFLOW",
    "WORKFLOW_OF_ROW",
    "all_or",
    "eval_outcome",
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
PRICES = (
    "(SELECT CAST((groupArray(Model), groupArray((InputUsdPerMTok, OutputUsdPerMTok))), "
    f"'Map(String, Tuple(Float64, Float64))') FROM {MODEL_PRICES} FINAL) AS prices"
)
_MODEL_OF_KEY = "substring(k, position(k, ':') + 1)"
COST = (
    f"arraySum(arrayMap((k, i, o) -> (i * prices[{_MODEL_OF_KEY}].1 + "
    f"o * prices[{_MODEL_OF_KEY}].2) / 1e6, usage.1, usage.2, usage.3))"
)
"""A run's cost from its merged ``usage`` (keyed ``<span id>:<model>``) and ``prices``: the
view's formula (a test compares the two)."""

RUN_SLACK = "INTERVAL 1 HOUR"
"""How long before the window a run's rows are read: a run that started in the window is
seen whole (its start exact) when it lasted less than this."""

FILTERS = {
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


def picked_runs(candidates: str, limit: int) -> str:
    """``run_id IN (...)`` for the newest ``limit`` of ``candidates`` (a ``window_runs``)."""
    return (
        f"{in_projects('project')}\n"
        f"  AND run_id IN (SELECT TraceId FROM (\n{candidates}\n"
        f"ORDER BY start DESC, TraceId, ProjectId LIMIT {limit}))"
    )
