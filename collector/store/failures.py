"""Failure clusters: the failing production runs of a window grouped by their signature
(ADR 34), each with what afr did about it -- a replay that fixed it, an eval that guards it.

Three reads, none over the spans:

- the runs of the window with a failure cause (``Failure.2 != ''`` on any of their ``runs``
  rows), merged whole (only those) so the signature is that of the run, then grouped by it;
- the runs linked to a member run (``SourceRunId``): its replays (``verdict``) and the eval
  runs of an eval synthesized from a replay of it (an eval run carries the source run of
  its replay, ADR 22), whatever their time -- they are few, and a fix is news however old;
- nothing else: the status is decided here, from those two.

Statuses: ``open`` (no replay of a member reached FAILURE_FIXED), ``fixed`` (one did),
``guarded`` (an eval run exists for a member), ``recurring`` (guarded, the eval's newest run
passed, yet a member started after the eval's first run: the fix did not ship, or the eval
does not catch the failure). Only production runs (kind ``capture``) are members.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from collector.store.client import SpanStore
from collector.store.schema import FAILURE_PATH_SQL, RUNS_TABLE, SIGNATURE_SQL

__all__ = [
    "FAILURE_STATUSES",
    "SIGNATURE_PATTERN",
    "FailureFilter",
    "FailureReader",
    "decode_failure_cursor",
    "encode_failure_cursor",
    "failure_title",
]

FAILURE_STATUSES = ("recurring", "open", "fixed", "guarded")
SIGNATURE_PATTERN = re.compile(r"^[0-9a-f]{16}$")
_RANK = {"recurring": 0, "open": 1, "guarded": 2, "fixed": 2}
"""Recurring first (the question nobody else answers), then what nobody fixed yet, then the
rest; each by last seen, newest first."""
_SAMPLES = 5
_FIXED = "FAILURE_FIXED"
_PASSED = "passed"

_FAILING = f"""
    SELECT TraceId FROM {{db}}.{RUNS_TABLE}
    WHERE ProjectId = {{project:String}} AND Failure.2 != ''
      AND Start >= fromUnixTimestamp64Nano({{since_ns:Int64}})
      AND Start < fromUnixTimestamp64Nano({{until_ns:Int64}})"""
"""The runs with a failure cause on a row that starts in the window: the members are chosen
among them."""

_MEMBERS = f"""
SELECT
    TraceId AS run_id,
    toUnixTimestamp64Nano(min(Start)) AS start_ns,
    min(Failure) AS failure,
    failure.2 AS failure_cause,
    {FAILURE_PATH_SQL.format(failure="failure")} AS failure_path,
    {SIGNATURE_SQL.format(cause="failure_cause", path="failure_path")} AS signature,
    min(Workflow).2 AS workflow,
    groupUniqArrayArray(Agents) AS agents,
    max(KindCode) AS kind_code
FROM {{db}}.{RUNS_TABLE}
WHERE ProjectId = {{project:String}}
  AND TraceId IN ({_FAILING})
GROUP BY TraceId
HAVING start_ns >= {{since_ns:Int64}} AND start_ns < {{until_ns:Int64}}
    AND kind_code = 0 AND signature != ''{{extra}}
"""
"""The window's failing production runs, each merged whole (its failure is the min over all
its rows, which may lie outside the window's rows)."""

_CLUSTERS = f"""
SELECT
    signature,
    any(failure_cause) AS cause,
    any(failure_path) AS path,
    count() AS runs,
    min(start_ns) AS first_ns,
    max(start_ns) AS last_ns,
    sumMap([toDate(fromUnixTimestamp64Nano(start_ns), 'UTC')], [toUInt64(1)]) AS per_day,
    arraySlice(arrayReverseSort(groupArray((start_ns, run_id))), 1, {_SAMPLES}) AS samples,
    arraySort(groupUniqArray(workflow)) AS workflows,
    arraySort(groupUniqArrayArray(agents)) AS agents,
    groupArray((run_id, start_ns)) AS members
FROM ({{members}})
GROUP BY signature
"""

_LINKED = f"""
SELECT TraceId AS run_id, toUnixTimestamp64Nano(min(Start)) AS start_ns, max(KindCode) AS kind,
    max(SourceRunId) AS source_run_id, max(Verdict) AS verdict, max(EvalName) AS eval_name
FROM {{db}}.{RUNS_TABLE}
WHERE ProjectId = {{project:String}}
  AND TraceId IN (
    SELECT TraceId FROM {{db}}.{RUNS_TABLE}
    WHERE ProjectId = {{project:String}} AND SourceRunId IN ({_FAILING}))
GROUP BY TraceId
HAVING kind IN (2, 3)
"""
"""Replays (kind 3) and eval runs (kind 2) of the window's failing runs, at any time: of the
members among them (``_link`` keeps those). The members are not sent back as a parameter:
10k run ids cost more to pass (~40 ms at 10k members) than the failing runs cost to find
again (~5 ms)."""


@dataclass(frozen=True)
class FailureFilter:
    since_ns: int
    until_ns: int
    workflow: str | None = None
    """Only the runs of this workflow count (a cluster's figures are over those runs)."""
    agent: str | None = None
    """Only the runs this agent ran in."""
    status: str | None = None
    signature: str | None = None
    limit: int = 50
    cursor: tuple[int, int, str] | None = None
    """(rank, last seen, signature) of the previous page's last cluster."""


def encode_failure_cursor(key: tuple[int, int, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def decode_failure_cursor(cursor: str) -> tuple[int, int, str]:
    try:
        rank, last_ns, signature = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not (isinstance(rank, int) and isinstance(last_ns, int) and isinstance(signature, str)):
            raise ValueError
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ValueError("invalid cursor") from None
    return rank, last_ns, signature


def failure_title(cause: str, path: list[str]) -> str:
    """``tool:refund_order: /amount: string where number, after Triage Agent → Refund Agent``:
    the subject (or the span type), the shape (or the error type), the agents that led there."""
    try:
        span_type, subject, error_type, shape = (str(part) for part in json.loads(cause))
    except (ValueError, TypeError):
        span_type, subject, error_type, shape = "", "", "", cause
    head = subject or span_type or "run"
    title = f"{head}: {shape or error_type or 'error'}"
    if error_type and shape and error_type not in shape:
        title += f" ({error_type})"
    if path:
        title += f", after {' → '.join(path)}"
    return title


def _sort_key(cluster: dict[str, Any]) -> tuple[int, int, str]:
    return (_RANK[cluster["status"]], -int(cluster["last_seen_ns"]), cluster["signature"])


class FailureReader:
    def __init__(self, store: SpanStore, *, query_timeout_s: float) -> None:
        self._store = store
        self._settings = f"SETTINGS max_execution_time = {int(max(1, query_timeout_s))}"

    def clusters(self, project: str, flt: FailureFilter) -> tuple[list[dict[str, Any]], str | None]:
        """A page of clusters in their order, and the next page's cursor (None on the last)."""
        params: dict[str, Any] = {
            "project": project,
            "since_ns": flt.since_ns,
            "until_ns": flt.until_ns,
        }
        extra = ""
        if flt.workflow:
            params["workflow"] = flt.workflow
            extra += " AND workflow = {workflow:String}"
        if flt.agent:
            params["agent"] = flt.agent
            extra += " AND has(agents, {agent:String})"
        if flt.signature:
            params["signature"] = flt.signature
            extra += " AND signature = {signature:String}"
        members = _MEMBERS.replace("{extra}", extra)
        # The runs are merged in primary-key order (TraceId), streamed rather than hashed:
        # ~10% of the query at 10k failing runs (bench/failures_bench.py).
        rows = self._store.query(
            _CLUSTERS.replace("{members}", members)
            + f" {self._settings}, optimize_aggregation_in_order = 1",
            params,
        )
        clusters = [self._cluster(row) for row in rows]
        self._link({k: params[k] for k in ("project", "since_ns", "until_ns")}, clusters)
        if flt.status:
            clusters = [c for c in clusters if c["status"] == flt.status]
        clusters.sort(key=_sort_key)
        if flt.cursor:
            after = flt.cursor
            clusters = [c for c in clusters if _sort_key(c) > (after[0], -after[1], after[2])]
        next_cursor = None
        if len(clusters) > flt.limit:
            clusters = clusters[: flt.limit]
            last = clusters[-1]
            next_cursor = encode_failure_cursor(
                (_RANK[last["status"]], int(last["last_seen_ns"]), last["signature"])
            )
        return clusters, next_cursor

    def cluster(self, project: str, flt: FailureFilter) -> dict[str, Any] | None:
        """The cluster of ``flt.signature`` over the window, or None when no run has it."""
        page, _ = self.clusters(project, flt)
        return page[0] if page else None

    @staticmethod
    def _cluster(row: tuple[Any, ...]) -> dict[str, Any]:
        (
            signature,
            cause,
            path,
            runs,
            first_ns,
            last_ns,
            per_day,
            samples,
            workflows,
            agents,
            members,
        ) = row
        days, counts = per_day
        return {
            "signature": str(signature),
            "title": failure_title(str(cause), [str(a) for a in path]),
            "cause": json.loads(cause) if cause.startswith("[") else [str(cause)],
            "path": [str(a) for a in path],
            "runs": int(runs),
            "first_seen_ns": int(first_ns),
            "last_seen_ns": int(last_ns),
            "per_day": [
                {"day": day.isoformat(), "runs": int(n)}
                for day, n in zip(days, counts, strict=True)
            ],
            "sample_run_ids": [str(run_id) for _, run_id in samples],
            "workflows": [str(w) for w in workflows if w],
            "agents": [str(a) for a in agents],
            "status": "open",
            "fixed_by": None,
            "guard": None,
            "recurring_since_ns": None,
            "runs_since_guard": 0,
            "_members": {str(m): int(ns) for m, ns in members},
        }

    def _link(self, window: dict[str, Any], clusters: list[dict[str, Any]]) -> None:
        """Each cluster's fixes and guards, from the runs linked to its members."""
        by_member = {m: c for c in clusters for m in c["_members"]}
        linked: list[tuple[Any, ...]] = []
        if by_member:
            linked = self._store.query(_LINKED + f" {self._settings}", window)
        fixes: dict[str, list[tuple[int, str]]] = {}
        evals: dict[str, dict[str, dict[str, Any]]] = {}
        for run_id, start_ns, kind, source, verdict, eval_name in sorted(
            linked, key=lambda r: (r[1], r[0])
        ):
            cluster = by_member.get(str(source))
            if cluster is None:
                continue
            signature = cluster["signature"]
            if int(kind) == 3 and verdict == _FIXED:
                fixes.setdefault(signature, []).append((int(start_ns), str(run_id)))
            elif int(kind) == 2 and eval_name:
                guard = evals.setdefault(signature, {}).setdefault(
                    str(eval_name),
                    {"eval_name": str(eval_name), "first_run_ns": int(start_ns), "eval_runs": 0},
                )
                # Sorted by start: the last one seen is the newest, its outcome the last.
                guard.update(
                    last_run_id=str(run_id),
                    last_run_ns=int(start_ns),
                    last_outcome=str(verdict) or None,
                )
                guard["eval_runs"] += 1
        for cluster in clusters:
            members: dict[str, int] = cluster.pop("_members")
            signature = cluster["signature"]
            if signature in fixes:
                cluster["status"] = "fixed"
                cluster["fixed_by"] = fixes[signature][0][1]  # the first replay that fixed it
            guards = sorted(evals.get(signature, {}).values(), key=lambda g: -g["last_run_ns"])
            if not guards:
                continue
            cluster["status"] = "guarded"
            cluster["guard"] = guards[0]
            for guard in guards:
                if guard["last_outcome"] != _PASSED:
                    continue
                # A production run after the eval's first run: the eval passes, yet the
                # failure came back.
                since = [ns for ns in members.values() if ns > guard["first_run_ns"]]
                if since:
                    cluster["status"] = "recurring"
                    cluster["guard"] = guard
                    cluster["recurring_since_ns"] = guard["first_run_ns"]
                    cluster["runs_since_guard"] = len(since)
                    break
