"""The validator: what the store holds, diffed against what was sent and acknowledged.

Run after the collector has stopped (chDB opens one store per process, and only while no
collector holds it): ``dump`` runs in a child process (``python -m testbed.validator``) and
writes every stored span, deduplicated with ``FINAL`` on the table's key (project, trace,
span), as JSON lines, plus raw counts taken before deduplication. ``validate`` then reads
that dump in this process and checks, span by span:

- every acknowledged span is stored (or, if the scenario poisoned it, dead-lettered), once;
- an acknowledged span reads back equal to what was sent, field by field (name, kind, times,
  ids, parent, trace state, attributes with normalization's split put back together,
  status, events, links, resource, scope, and the documented derived columns), with no
  redaction and no truncation (the generated content holds no secret and fits every limit);
- nothing stored was never sent, nothing stored was refused, nothing is stored under
  another project, and every stored but unacknowledged span was in doubt (no answer);
- copies of one span stored before deduplication are identical but for ``IngestedAt``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from collector.blocks import is_native_payload, json_lines
from collector.store.wal import read_segment
from testbed.loadgen import Ledger
from testbed.traces import TraceSet, expected_fields

__all__ = ["Validation", "dump", "dump_in_child", "validate"]

_PAGE_ROWS = 5000
_MAX_DETAILS = 20

_DUMP_SQL = f"""
SELECT ProjectId, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
       ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes,
       toUnixTimestamp64Nano(Timestamp), Duration, StatusCode, StatusMessage,
       arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes,
       Links.TraceId, Links.SpanId, Links.TraceState, Links.Attributes,
       Input, Output, InputKey, OutputKey, BodyAttributes, Redactions, Truncated,
       SpanType, AgentName, ToolName, ToolCallId, Model, InputTokens, OutputTokens
FROM {{db}}.otel_traces FINAL
WHERE (ProjectId, TraceId, SpanId) > ({{project:String}}, {{trace:String}}, {{span:String}})
ORDER BY ProjectId, TraceId, SpanId
LIMIT {_PAGE_ROWS}
"""


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    from collector.model import merged_attributes

    (
        project,
        trace_id,
        span_id,
        parent,
        trace_state,
        name,
        kind,
        service,
        resource,
        scope_name,
        scope_version,
        attributes,
        start_ns,
        duration,
        status_code,
        status_message,
        event_times,
        event_names,
        event_attributes,
        link_traces,
        link_spans,
        link_states,
        link_attributes,
        input_body,
        output_body,
        input_key,
        output_key,
        body_attributes,
        redactions,
        truncated,
        span_type,
        agent,
        tool,
        tool_call_id,
        model,
        input_tokens,
        output_tokens,
    ) = values
    return {
        "ProjectId": project,
        "TraceId": trace_id,
        "SpanId": span_id,
        "ParentSpanId": parent,
        "TraceState": trace_state,
        "SpanName": name,
        "SpanKind": kind,
        "ServiceName": service,
        "ResourceAttributes": dict(resource),
        "ScopeName": scope_name,
        "ScopeVersion": scope_version,
        # Normalization moves bodies out of the attribute map; put back, they are the
        # attributes as sent (collector/model.py).
        "Attributes": merged_attributes(
            dict(attributes), dict(body_attributes), input_key, input_body, output_key, output_body
        ),
        "StartNs": start_ns,
        "Duration": duration,
        "StatusCode": status_code,
        "StatusMessage": status_message,
        "Events": [
            [t, n, dict(a)]
            for t, n, a in zip(event_times, event_names, event_attributes, strict=True)
        ],
        "Links": [
            [t, s, st, dict(a)]
            for t, s, st, a in zip(
                link_traces, link_spans, link_states, link_attributes, strict=True
            )
        ],
        "Redactions": list(redactions),
        "Truncated": bool(truncated),
        "SpanType": span_type,
        "AgentName": agent,
        "ToolName": tool,
        "ToolCallId": tool_call_id,
        "Model": model,
        "InputTokens": input_tokens,
        "OutputTokens": output_tokens,
    }


def dump(dsn: str, database: str, out: Path) -> dict[str, Any]:
    """Writes the deduplicated spans to ``out`` (JSON lines) and returns raw counts. Opens
    the store itself: run it where no collector holds it."""
    from collector.model import COLUMN_NAMES
    from collector.store.client import ClickHouseStore

    store = ClickHouseStore(dsn, database)
    try:
        store.migrate()  # a collector that never started leaves no table to read
        raw = store.query(
            "SELECT ProjectId, count(), uniqExact(TraceId, SpanId) FROM {db}.otel_traces "
            "GROUP BY ProjectId"
        )
        content = ", ".join(
            f"`{c}`"
            for c in COLUMN_NAMES
            if c not in ("ProjectId", "TraceId", "SpanId", "IngestedAt")
        )
        inconsistent = store.query(
            f"SELECT ProjectId, TraceId, SpanId, count(), uniqExact(cityHash64({content})) AS h "
            "FROM {db}.otel_traces GROUP BY ProjectId, TraceId, SpanId HAVING h > 1 "
            f"LIMIT {_MAX_DETAILS}"
        )
        rows = 0
        cursor = ("", "", "")
        with out.open("wb") as handle:
            while True:
                page = store.query(
                    _DUMP_SQL, {"project": cursor[0], "trace": cursor[1], "span": cursor[2]}
                )
                for values in page:
                    handle.write(orjson.dumps(_row(values)) + b"\n")
                rows += len(page)
                if len(page) < _PAGE_ROWS:
                    break
                cursor = (page[-1][0], page[-1][1], page[-1][2])
    finally:
        store.close()
    return {
        "rows": rows,
        "raw_rows": {project: count for project, count, _ in raw},
        "distinct": {project: distinct for project, _, distinct in raw},
        "inconsistent_duplicates": [list(row[:4]) for row in inconsistent],
    }


def dump_in_child(dsn: str, database: str, out: Path, *, timeout_s: float = 600) -> dict[str, Any]:
    """``dump`` in a child process, which opens and closes the embedded store for itself."""
    from testbed.collector import CODE_ROOT, child_environment

    command = [sys.executable, "-m", "testbed.validator", "--dsn", dsn, "--database", database]
    completed = subprocess.run(
        [*command, "--out", str(out)],
        env=child_environment({}),
        cwd=CODE_ROOT,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"store dump failed: {completed.stderr.decode(errors='replace')[-2000:]}"
        )
    summary: dict[str, Any] = json.loads(completed.stdout.decode().splitlines()[-1])
    return summary


# --- rows outside the store --------------------------------------------------------------


def _compact_rows(lines: Iterator[bytes]) -> Iterator[tuple[str, str, str]]:
    """(project, trace id, span id) of JSONCompactEachRow rows in the collector's order."""
    from collector.model import COLUMN_NAMES

    project, trace, span = (COLUMN_NAMES.index(c) for c in ("ProjectId", "TraceId", "SpanId"))
    for line in lines:
        if line.strip():
            row = orjson.loads(line)
            yield row[project], row[trace], row[span]


def dead_lettered(data_dir: Path) -> list[tuple[str, str, str]]:
    """Rows the collector set aside as refused by the store, wherever it keeps them."""
    rows: list[tuple[str, str, str]] = []
    for path in sorted(data_dir.rglob("dead-letter*.jsonl")):
        rows += _compact_rows(iter(path.read_bytes().splitlines()))
    return rows


def pending_in_log(data_dir: Path) -> list[tuple[str, str, str]]:
    """Rows still in write-ahead log segments: acknowledged, not known to be inserted."""
    rows: list[tuple[str, str, str]] = []
    for path in sorted((data_dir / "wal").glob("segment-*.wal")):
        # The collector's own reader: either record format, past a damaged record.
        for payload in read_segment(path).payloads:
            lines = json_lines(payload) if is_native_payload(payload) else payload.splitlines()
            rows += _compact_rows(iter(lines))
    return rows


# --- the diff ----------------------------------------------------------------------------


@dataclass
class Validation:
    stored: int = 0
    """Distinct spans of this run in the store (after deduplication)."""
    duplicate_rows: int = 0
    """Rows beyond one per span still in the store before deduplication (merges remove
    them over time, so this is what was left when the store was read)."""
    inconsistent_duplicates: list[Any] = field(default_factory=list)
    lost: int = 0
    """Acknowledged, neither stored nor (when poisoned on purpose) dead-lettered."""
    pending: int = 0
    """Acknowledged rows still in the write-ahead log after the final stop."""
    dead_lettered: int = 0
    dead_lettered_unpoisoned: int = 0
    """Dead-lettered rows the store never refused for good: lost to a wrong decision."""
    not_sent: int = 0
    """Stored, but never sent by this run (or under another project): stored ⊄ sent."""
    refused_but_stored: int = 0
    stored_unacknowledged: int = 0
    """Stored, sent, never acknowledged and never in doubt."""
    in_doubt_stored: int = 0
    mismatched: int = 0
    """Acknowledged spans stored with a field that differs from what was sent."""
    checked_fields: int = 0
    details: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.details) < _MAX_DETAILS:
            self.details.append(text)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:150] + f"…({len(text)} chars)"


def _compare(expected: dict[str, Any], row: dict[str, Any], result: Validation) -> bool:
    same = True
    for name, want in expected.items():
        got = row.get(name)
        result.checked_fields += 1
        if got == want:
            continue
        same = False
        if isinstance(want, dict) and isinstance(got, dict):
            keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            diff = {k: (want.get(k), got.get(k)) for k in keys[:3]}
            result.note(f"span {row['SpanId']}: {name} differs at {keys[:3]}: {_short(diff)}")
        else:
            result.note(f"span {row['SpanId']}: {name} expected {_short(want)}, got {_short(got)}")
    return same


def validate(
    traces: TraceSet,
    project: str,
    ledger: Ledger,
    dump_path: Path,
    summary: dict[str, Any],
    data_dir: Path,
    *,
    poisoned: frozenset[int] = frozenset(),
) -> Validation:
    result = Validation()
    acknowledged = ledger.acknowledged | ledger.acknowledged_inexact
    refused = ledger.refused_spans
    stored: set[int] = set()
    with dump_path.open("rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            key = traces.key_of(row["TraceId"], row["SpanId"])
            if row["ProjectId"] != project or key is None or key not in ledger.sent:
                result.not_sent += 1
                result.note(
                    f"stored but never sent: project {row['ProjectId']!r}, span {row['SpanId']}"
                )
                continue
            stored.add(key)
            if key in refused:
                result.refused_but_stored += 1
                result.note(f"refused, yet stored: span {row['SpanId']}")
            if key not in acknowledged:
                if key in ledger.in_doubt:
                    result.in_doubt_stored += 1
                else:
                    result.stored_unacknowledged += 1
                    result.note(f"stored, never acknowledged nor in doubt: span {row['SpanId']}")
            if key in ledger.acknowledged and not _compare(
                expected_fields(traces.span(key), project), row, result
            ):
                result.mismatched += 1
    result.stored = len(stored)
    result.duplicate_rows = sum(summary["raw_rows"].values()) - sum(summary["distinct"].values())
    result.inconsistent_duplicates = summary["inconsistent_duplicates"]
    for entry in result.inconsistent_duplicates:
        result.note(f"copies of one span differ: {entry}")

    letters = {
        traces.key_of(trace, span) for p, trace, span in dead_lettered(data_dir) if p == project
    }
    letters.discard(None)
    result.dead_lettered = len(letters)
    wrongly = {key for key in letters if key not in poisoned}
    result.dead_lettered_unpoisoned = len(wrongly)
    if wrongly:
        result.note(f"{len(wrongly)} spans dead-lettered that the store never refused for good")
    pending = {
        traces.key_of(trace, span) for p, trace, span in pending_in_log(data_dir) if p == project
    }
    pending.discard(None)
    result.pending = len(pending - stored)
    lost = acknowledged - stored - (letters & poisoned)
    result.lost = len(lost)
    if lost:
        sample = sorted(lost)[:5]
        where = "still in the write-ahead log" if lost <= pending else "gone"
        result.note(f"{len(lost)} acknowledged spans not stored ({where}), e.g. keys {sample}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.validator")
    parser.add_argument("--dsn", required=True, help="the store, as AFR_CLICKHOUSE_URL")
    parser.add_argument("--database", default="afr")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    summary = dump(args.dsn, args.database, args.out)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
