"""Read queries for runs. Parameterized SQL only; every query is scoped to one project and
bounded in time; duplicates are removed with ``FINAL`` so counts stay exact however often a
batch was delivered."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from afr_common.prices import PriceBook, Tokens
from collector.model import COLUMNS
from collector.store.client import SpanStore
from collector.store.schema import (
    FAILURE_PATH_SQL,
    LOGS_TABLE,
    RUNS_TABLE,
    SIGNATURE_SQL,
    SPANS_TABLE,
)

__all__ = ["RunFilter", "RunReader", "decode_cursor", "encode_cursor", "run_cost"]

_KIND_CODES = {"capture": 0, "sweep": 1, "eval": 2, "replay": 3}
_KINDS_BY_CODE = {code: kind for kind, code in _KIND_CODES.items()}

_MERGED = f"""
SELECT
    TraceId AS run_id,
    toUnixTimestamp64Nano(min(Start)) AS start_ns,
    toUnixTimestamp64Nano(max(End)) AS end_ns,
    length(groupUniqArrayArray(ErrorSpans)) AS error_count,
    uniqExactMerge(Spans) AS span_count,
    min(FirstError) AS first_error,
    min(Workflow).2 AS workflow,
    min(RootAgent).2 AS root_agent,
    groupUniqArrayArray(Agents) AS agents,
    maxMap(Usage) AS usage,
    maxMap(UsageDetails) AS details,
    max(KindCode) AS kind_code,
    max(SourceRunId) AS source_run_id,
    max(Verdict) AS verdict,
    max(EvalName) AS eval_name,
    max(SweepId) AS sweep_id,
    min(Failure) AS failure,
    {SIGNATURE_SQL.format(cause="failure.2", path=FAILURE_PATH_SQL.format(failure="failure"))}
        AS signature,
    max(Conversation) AS conversation_id
FROM {{db}}.{RUNS_TABLE}
WHERE ProjectId = {{project:String}} AND TraceId IN {{run_ids:Array(String)}}
GROUP BY TraceId
"""
"""A run's summary from the store-kept ``runs`` table: every partial row of the run (one per
insert block that held its spans) merged with the functions the materialized view used."""
_MERGED_FIELDS = (
    "run_id",
    "start_ns",
    "end_ns",
    "error_count",
    "span_count",
    "first_error",
    "workflow",
    "root_agent",
    "agents",
    "usage",
    "details",
    "kind_code",
    "source_run_id",
    "verdict",
    "eval_name",
    "sweep_id",
    "failure",
    "signature",
    "conversation_id",
)
_FILTER_MERGES = {
    "error_count": "length(groupUniqArrayArray(ErrorSpans)) AS error_count",
    "kind_code": "max(KindCode) AS kind_code",
    "workflow": "min(Workflow).2 AS workflow",
    "agents": "groupUniqArrayArray(Agents) AS agents",
    "source_run_id": "max(SourceRunId) AS source_run_id",
    "conversation_id": "max(Conversation) AS conversation_id",
}
"""The merges a run-list filter needs, by the name its HAVING condition uses."""

_NANO_COLUMNS = {
    "Timestamp": "toUnixTimestamp64Nano(Timestamp)",
    "IngestedAt": "toUnixTimestamp64Nano(IngestedAt)",
}
_SPAN_SELECT = ", ".join(
    _NANO_COLUMNS.get(name)
    or (
        "arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`)"
        if name == "Events.Timestamp"
        else f"`{name}`"
    )
    for name, _ in COLUMNS
)


_LOG_FIELDS = (
    ("toUnixTimestamp64Nano(Timestamp)", "time_unix_nano"),
    ("toUnixTimestamp64Nano(ObservedTimestamp)", "observed_time_unix_nano"),
    ("TraceId", "trace_id"),
    ("SpanId", "span_id"),
    ("TraceFlags", "flags"),
    ("SeverityText", "severity_text"),
    ("SeverityNumber", "severity_number"),
    ("ServiceName", "service_name"),
    ("EventName", "event_name"),
    ("Body", "body"),
    ("LogAttributes", "attributes"),
    ("ResourceAttributes", "resource_attributes"),
    ("ScopeName", "scope_name"),
    ("ScopeVersion", "scope_version"),
    ("ScopeAttributes", "scope_attributes"),
    ("Redactions", "redactions"),
    ("Truncated", "truncated"),
    ("LogId", "log_id"),
)
_LOGS = (
    f"SELECT {', '.join(sql for sql, _ in _LOG_FIELDS)} FROM {{db}}.{LOGS_TABLE} FINAL "
    "WHERE ProjectId = {project:String} AND TraceId = {run:String} "
    "ORDER BY Timestamp, LogId LIMIT {limit:UInt32}"
)
"""A run's log records (keyed by run, like its spans: no time bound needed), each once."""


@dataclass(frozen=True)
class RunFilter:
    since_ns: int
    until_ns: int
    status: str | None = None
    workflow: str | None = None
    agent: str | None = None
    kind: str | None = None
    source_run_id: str | None = None
    """Runs linked to this source run: its replays and the eval runs of the incident."""
    conversation_id: str | None = None
    """The runs of one conversation (``gen_ai.conversation.id``)."""
    limit: int = 50
    cursor: tuple[int, str] | None = None


def encode_cursor(start_ns: int, run_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([start_ns, run_id]).encode()).decode()


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        start_ns, run_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not isinstance(start_ns, int) or not isinstance(run_id, str):
            raise ValueError
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError("invalid cursor") from None
    return start_ns, run_id


def run_cost(
    calls: list[tuple[str, Tokens]], prices: PriceBook
) -> tuple[float | None, float, list[str]]:
    """(cost, priced cost, unpriced models) of a run's model calls (model, tokens): the cost
    is None when a call with tokens has a model no price knows, the priced cost counts the
    others."""
    priced = 0.0
    unpriced: set[str] = set()
    for model, tokens in calls:
        cost = prices.cost_usd(model, tokens)
        if cost is None:
            unpriced.add(model)
        else:
            priced += cost
    priced = round(priced, 9)
    return (None if unpriced else priced), priced, sorted(unpriced)


def _summary(row: tuple[Any, ...], prices: PriceBook) -> dict[str, Any]:
    merged = dict(zip(_MERGED_FIELDS, row, strict=True))
    keys, inputs, outputs = merged.pop("usage")
    detail_keys, cache_reads, cache_writes, reasonings = merged.pop("details")
    details = {
        key: (int(cr), int(cw), int(r))
        for key, cr, cw, r in zip(detail_keys, cache_reads, cache_writes, reasonings, strict=True)
    }
    error_count = int(merged["error_count"])
    _, failing_id, failing_name, failing_type = merged.pop("first_error")
    merged.pop("failure")
    calls = []
    for key, tokens_in, tokens_out in zip(keys, inputs, outputs, strict=True):
        cache_read, cache_write, reasoning = details.get(key, (0, 0, 0))
        model = key.partition(":")[2]  # "<span id>:<model>"
        calls.append(
            (model, Tokens(int(tokens_in), int(tokens_out), cache_read, cache_write, reasoning))
        )
    cost, priced_cost, unpriced = run_cost(calls, prices)
    start_ns, end_ns = int(merged["start_ns"]), int(merged["end_ns"])
    return {
        "run_id": merged["run_id"],
        "start_ns": start_ns,
        "end_ns": end_ns,
        "duration_ns": max(0, end_ns - start_ns),
        "status": "error" if error_count else "ok",
        "error_count": error_count,
        "span_count": int(merged["span_count"]),
        "failing_span_id": failing_id if error_count else None,
        "failing_span_name": failing_name if error_count else None,
        "failing_error_type": failing_type if error_count else None,
        "workflow": merged["workflow"],
        "root_agent": merged["root_agent"],
        "agents": sorted(merged["agents"]),
        "input_tokens": int(sum(inputs)),
        "output_tokens": int(sum(outputs)),
        "cache_read_tokens": int(sum(cache_reads)),
        "cache_creation_tokens": int(sum(cache_writes)),
        "reasoning_tokens": int(sum(reasonings)),
        "cost_usd": cost,
        "priced_cost_usd": priced_cost,
        "unpriced_models": unpriced,
        "kind": _KINDS_BY_CODE.get(int(merged["kind_code"]), "capture"),
        "source_run_id": merged["source_run_id"] or None,
        "verdict": merged["verdict"] or None,
        "eval_name": merged["eval_name"] or None,
        "sweep_id": merged["sweep_id"] or None,
        "signature": merged["signature"] or None,
        "conversation_id": merged["conversation_id"] or None,
    }


def _most_selective(conditions: list[str]) -> str:
    """The existential condition that picks the fewest runs: a source run's or a
    conversation's (a handful of runs), else the first."""
    narrow = [c for c in conditions if "source_run_id" in c or "conversation_id" in c]
    return narrow[-1] if narrow else conditions[0]


class RunReader:
    """Run summaries come from the store-kept ``runs`` table, never from a scan of the spans.

    The ``runs`` table holds partial rows (one per insert block that held a run's spans, until
    the engine merges them) ordered by run id, and a run list is newest first. A page is found
    in two steps, then only its runs are merged whole:

    - Without a filter that only some row of a run meets (only ``status=ok``/``kind=capture``,
      which every row of a matching run meets, or none): the newest K rows, read without a
      GROUP BY. A run missing from them has every row, its first included, at or before the
      K-th row's start: every run merged from them that starts strictly after that cutoff is
      in its exact place. When that leaves the page short, K grows.
    - With one (``status=error``, a workflow, an agent, a kind, a source run): the runs that
      have a row meeting it, grouped by run with simple merges (start, error flag, kind,
      workflow, agents, source) and filtered exactly, newest first.
    """

    _FIRST_ROWS = 256
    _MAX_ROUNDS = 4

    def __init__(
        self,
        store: SpanStore,
        *,
        query_timeout_s: float,
        max_spans: int,
        prices: PriceBook | None = None,
    ) -> None:
        self._store = store
        self._settings = f"SETTINGS max_execution_time = {int(max(1, query_timeout_s))}"
        self._max_spans = max_spans
        self._prices = prices if prices is not None else PriceBook()

    @property
    def prices(self) -> PriceBook:
        """The prices of model calls: AFR_MODEL_PRICES over the price database."""
        return self._prices

    def _merged(
        self,
        project: str,
        run_ids: list[str],
        having: str = "",
        params: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        sql = _MERGED + (f" HAVING {having}" if having else "") + f" {self._settings}"
        rows = self._store.query(sql, {**(params or {}), "project": project, "run_ids": run_ids})
        return [_summary(row, self._prices) for row in rows]

    def list_runs(self, project: str, flt: RunFilter) -> tuple[list[dict[str, Any]], str | None]:
        params: dict[str, Any] = {
            "project": project,
            "since_ns": flt.since_ns,
            "until_ns": flt.until_ns,
            "limit": flt.limit + 1,
        }
        every_row: list[str] = []  # met by every row of a matching run
        some_row: list[str] = []  # met by at least one row of a matching run
        having = ["start_ns >= {since_ns:Int64}", "start_ns < {until_ns:Int64}"]
        if flt.status == "error":
            some_row.append("notEmpty(ErrorSpans)")
            having.append("error_count > 0")
        elif flt.status == "ok":
            every_row.append("empty(ErrorSpans)")
            having.append("error_count = 0")
        if flt.kind:
            params["kind_code"] = _KIND_CODES[flt.kind]
            (every_row if flt.kind == "capture" else some_row).append(
                "KindCode = {kind_code:UInt8}"
            )
            having.append("kind_code = {kind_code:UInt8}")
        if flt.workflow:
            params["workflow"] = flt.workflow
            some_row.append("Workflow.2 = {workflow:String}")
            having.append("workflow = {workflow:String}")
        if flt.agent:
            params["agent"] = flt.agent
            some_row.append("has(Agents, {agent:String})")
            having.append("has(agents, {agent:String})")
        if flt.source_run_id:
            params["source_run_id"] = flt.source_run_id
            some_row.append("SourceRunId = {source_run_id:String}")
            having.append("source_run_id = {source_run_id:String}")
        if flt.conversation_id:
            params["conversation_id"] = flt.conversation_id
            some_row.append("Conversation = {conversation_id:String}")
            having.append("conversation_id = {conversation_id:String}")
        if flt.cursor:
            params["cursor_ns"], params["cursor_run"] = flt.cursor
            having.append("(start_ns, run_id) < ({cursor_ns:Int64}, {cursor_run:String})")
        if some_row:
            runs = self._filtered_page(params, every_row, some_row, having)
        else:
            runs = self._newest_page(project, flt, params, every_row, having)
        next_cursor = None
        if len(runs) > flt.limit:
            runs = runs[: flt.limit]
            next_cursor = encode_cursor(runs[-1]["start_ns"], runs[-1]["run_id"])
        return runs, next_cursor

    def _newest_page(
        self,
        project: str,
        flt: RunFilter,
        params: dict[str, Any],
        every_row: list[str],
        having: list[str],
    ) -> list[dict[str, Any]]:
        rows_where = [
            "ProjectId = {project:String}",
            "Start >= fromUnixTimestamp64Nano({since_ns:Int64})",
            "Start < fromUnixTimestamp64Nano({until_ns:Int64})",
            *every_row,
        ]
        if flt.cursor:
            rows_where.append("Start <= fromUnixTimestamp64Nano({cursor_ns:Int64})")
        wanted = flt.limit + 1
        first_rows = max(self._FIRST_ROWS, 4 * wanted)
        runs: list[dict[str, Any]] = []
        for attempt in range(self._MAX_ROUNDS + 1):
            unbounded = attempt == self._MAX_ROUNDS
            candidates = self._store.query(
                f"SELECT TraceId, toUnixTimestamp64Nano(Start) FROM {{db}}.{RUNS_TABLE} "
                f"WHERE {' AND '.join(rows_where)} ORDER BY Start DESC "
                f"{'' if unbounded else f'LIMIT {first_rows}'} {self._settings}",
                params,
            )
            # The newest rows until `take` runs are seen (and the rows tied with the last one):
            # a run without a row among them starts at or before the next row, the cutoff.
            take = len(candidates) if unbounded else wanted * 4**attempt
            seen: dict[str, None] = {}
            cutoff: int | None = None
            last: int | None = None
            for run_id, start_ns in candidates:
                if len(seen) >= take and start_ns != last:
                    cutoff = int(start_ns)
                    break
                seen[str(run_id)] = None
                last = int(start_ns)
            exhausted = unbounded or len(candidates) < first_rows
            if cutoff is None and not exhausted:
                cutoff = int(candidates[-1][1])
            step_having = list(having)
            params.pop("cutoff_ns", None)
            if cutoff is not None:
                params["cutoff_ns"] = cutoff
                step_having.append("start_ns > {cutoff_ns:Int64}")
            run_ids = sorted(seen)
            runs = (
                self._merged(project, run_ids, " AND ".join(step_having), params) if run_ids else []
            )
            runs.sort(key=lambda run: (run["start_ns"], run["run_id"]), reverse=True)
            if (exhausted and cutoff is None) or len(runs) >= wanted:
                break
            first_rows *= 8
        return runs[:wanted]

    def _filtered_page(
        self,
        params: dict[str, Any],
        every_row: list[str],
        some_row: list[str],
        having: list[str],
    ) -> list[dict[str, Any]]:
        # A run with a row meeting any one existential condition is a candidate; the simple
        # merges below decide every condition exactly, so only the page's runs merge whole.
        matching = " AND ".join(
            [
                "ProjectId = {project:String}",
                "Start >= fromUnixTimestamp64Nano({since_ns:Int64})",
                *every_row,
                _most_selective(some_row),
            ]
        )
        merges = ["toUnixTimestamp64Nano(min(Start)) AS start_ns"] + [
            merge for name, merge in _FILTER_MERGES.items() if name in " ".join(having)
        ]
        # The primary key does not help an IN over most of a project's runs: a plain hash
        # set does (measured 2x faster at 10k runs).
        page = self._store.query(
            f"""
SELECT TraceId AS run_id, {", ".join(merges)}
FROM {{db}}.{RUNS_TABLE}
WHERE ProjectId = {{project:String}}
  AND TraceId IN (SELECT TraceId FROM {{db}}.{RUNS_TABLE} WHERE {matching})
GROUP BY TraceId
HAVING {" AND ".join(having)}
ORDER BY start_ns DESC, run_id DESC
LIMIT {{limit:UInt32}} {self._settings}, use_index_for_in_with_subqueries = 0""",
            params,
        )
        run_ids = [str(row[0]) for row in page]
        runs = self._merged(str(params["project"]), run_ids) if run_ids else []
        runs.sort(key=lambda run: (run["start_ns"], run["run_id"]), reverse=True)
        return runs

    def newest_failing_run(self) -> tuple[str, str] | None:
        """(project, run id) of the failing run that started last, in any project."""
        rows = self._store.query(
            f"SELECT ProjectId, TraceId FROM {{db}}.{RUNS_TABLE} WHERE (ProjectId, TraceId) IN "
            f"(SELECT ProjectId, TraceId FROM {{db}}.{RUNS_TABLE} WHERE notEmpty(ErrorSpans)) "
            f"GROUP BY ProjectId, TraceId ORDER BY min(Start) DESC, TraceId DESC LIMIT 1 "
            f"{self._settings}"
        )
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def get_logs(self, project: str, run_id: str) -> list[dict[str, Any]]:
        """The run's log records in time order (at most as many as a run's spans)."""
        rows = self._store.query(
            _LOGS + f" {self._settings}",
            {"project": project, "run": run_id, "limit": self._max_spans},
        )
        names = [name for _, name in _LOG_FIELDS]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def get_run(
        self, project: str, run_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The run's summary and its spans, or None when this project has no such run."""
        summaries = self._merged(project, [run_id])
        if not summaries:
            return None
        summary = summaries[0]
        params = {
            "project": project,
            "run": run_id,
            "since_ns": summary["start_ns"],
            "until_ns": summary["end_ns"] + 1,
        }
        spans_sql = (
            f"SELECT {_SPAN_SELECT} FROM {{db}}.{SPANS_TABLE} FINAL "
            "WHERE ProjectId = {project:String} AND TraceId = {run:String} "
            "AND Timestamp >= fromUnixTimestamp64Nano({since_ns:Int64}) "
            "AND Timestamp < fromUnixTimestamp64Nano({until_ns:Int64}) "
            f"ORDER BY Timestamp, SpanId LIMIT {self._max_spans} {self._settings}"
        )
        fields = [attr for _, attr in COLUMNS]
        spans = [
            dict(zip(fields, row, strict=True)) for row in self._store.query(spans_sql, params)
        ]
        return summary, spans
