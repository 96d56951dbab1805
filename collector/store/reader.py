"""Read queries for runs. Parameterized SQL only; every query is scoped to one project and
bounded in time; duplicates are removed with ``FINAL`` so counts stay exact however often a
batch was delivered."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from collector.model import COLUMNS
from collector.store.client import SpanStore
from collector.store.schema import SPANS_TABLE, TRACE_ID_TS_TABLE

__all__ = ["RunFilter", "RunReader", "decode_cursor", "encode_cursor"]

_SUMMARY = f"""
SELECT
    TraceId AS run_id,
    toUnixTimestamp64Nano(min(Timestamp)) AS start_ns,
    toUnixTimestamp64Nano(max(Timestamp + toIntervalNanosecond(Duration))) AS end_ns,
    countIf(StatusCode = 'Error') AS error_count,
    count() AS span_count,
    argMinIf(SpanId, Timestamp, StatusCode = 'Error') AS failing_span_id,
    argMinIf(SpanName, Timestamp, StatusCode = 'Error') AS failing_span_name,
    argMinIf(ErrorType, Timestamp, StatusCode = 'Error') AS failing_error_type,
    argMinIf(
        if(SpanAttributes['gen_ai.workflow.name'] != '', SpanAttributes['gen_ai.workflow.name'], SpanName),
        Timestamp, ParentSpanId = '') AS workflow,
    argMinIf(AgentName, Timestamp, SpanType = 'agent' AND AgentName != '') AS root_agent,
    groupUniqArrayIf(AgentName, AgentName != '') AS agents,
    sumIf(InputTokens, SpanType = 'llm') AS input_tokens,
    sumIf(OutputTokens, SpanType = 'llm') AS output_tokens,
    multiIf(countIf(RunKind = 'replay') > 0, 'replay', countIf(RunKind = 'eval') > 0, 'eval',
        countIf(RunKind = 'sweep') > 0, 'sweep', 'capture') AS kind,
    anyIf(SourceRunId, SourceRunId != '') AS source_run_id
FROM {{db}}.{SPANS_TABLE} FINAL
WHERE ProjectId = {{project:String}}
  AND Timestamp >= fromUnixTimestamp64Nano({{since_ns:Int64}})
  AND Timestamp < fromUnixTimestamp64Nano({{until_ns:Int64}})
  {{run_clause}}
GROUP BY TraceId
"""
_SUMMARY_FIELDS = (
    "run_id",
    "start_ns",
    "end_ns",
    "error_count",
    "span_count",
    "failing_span_id",
    "failing_span_name",
    "failing_error_type",
    "workflow",
    "root_agent",
    "agents",
    "input_tokens",
    "output_tokens",
    "kind",
    "source_run_id",
)

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


def _summary(row: tuple[Any, ...]) -> dict[str, Any]:
    summary = dict(zip(_SUMMARY_FIELDS, row, strict=True))
    summary["status"] = "error" if summary["error_count"] else "ok"
    summary["duration_ns"] = max(0, summary["end_ns"] - summary["start_ns"])
    summary["agents"] = sorted(summary["agents"])
    if not summary["error_count"]:
        summary["failing_span_id"] = summary["failing_span_name"] = summary[
            "failing_error_type"
        ] = None
    return summary


class RunReader:
    def __init__(self, store: SpanStore, *, query_timeout_s: float, max_spans: int) -> None:
        self._store = store
        self._settings = f"SETTINGS max_execution_time = {int(max(1, query_timeout_s))}"
        self._max_spans = max_spans

    def list_runs(self, project: str, flt: RunFilter) -> tuple[list[dict[str, Any]], str | None]:
        having: list[str] = []
        params: dict[str, Any] = {
            "project": project,
            "since_ns": flt.since_ns,
            "until_ns": flt.until_ns,
            "limit": flt.limit + 1,
        }
        if flt.status == "error":
            having.append("error_count > 0")
        elif flt.status == "ok":
            having.append("error_count = 0")
        if flt.workflow:
            having.append("workflow = {workflow:String}")
            params["workflow"] = flt.workflow
        if flt.agent:
            having.append("has(agents, {agent:String})")
            params["agent"] = flt.agent
        if flt.kind:
            having.append("kind = {kind:String}")
            params["kind"] = flt.kind
        if flt.source_run_id:
            having.append("source_run_id = {source_run_id:String}")
            params["source_run_id"] = flt.source_run_id
        if flt.cursor:
            having.append("(start_ns, run_id) < ({cursor_ns:Int64}, {cursor_run:String})")
            params["cursor_ns"], params["cursor_run"] = flt.cursor
        sql = _SUMMARY.replace("{run_clause}", "")
        if having:
            sql += " HAVING " + " AND ".join(having)
        sql += " ORDER BY start_ns DESC, run_id DESC LIMIT {limit:UInt32} " + self._settings
        rows = [_summary(r) for r in self._store.query(sql, params)]
        next_cursor = None
        if len(rows) > flt.limit:
            rows = rows[: flt.limit]
            next_cursor = encode_cursor(rows[-1]["start_ns"], rows[-1]["run_id"])
        return rows, next_cursor

    def _bounds(self, project: str, run_id: str) -> tuple[int, int] | None:
        rows = self._store.query(
            f"SELECT toUnixTimestamp64Nano(min(Start)), toUnixTimestamp64Nano(max(End)), count() "
            f"FROM {{db}}.{TRACE_ID_TS_TABLE} WHERE ProjectId = {{project:String}} "
            f"AND TraceId = {{run:String}} {self._settings}",
            {"project": project, "run": run_id},
        )
        if not rows or not rows[0][2]:
            return None
        return int(rows[0][0]), int(rows[0][1])

    def get_run(
        self, project: str, run_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The run's summary and its spans, or None when this project has no such run."""
        bounds = self._bounds(project, run_id)
        if bounds is None:
            return None
        since, until = bounds[0], bounds[1] + 1
        params = {"project": project, "run": run_id, "since_ns": since, "until_ns": until}
        summary_sql = (
            _SUMMARY.replace("{run_clause}", "AND TraceId = {run:String}") + self._settings
        )
        summaries = self._store.query(summary_sql, params)
        if not summaries:
            return None
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
        return _summary(summaries[0]), spans
