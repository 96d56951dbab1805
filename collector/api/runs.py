"""The read API: runs and their spans, scoped to the caller's project.

``GET /api/v1/runs``                 summaries, newest first, filters and cursor paging
``GET /api/v1/runs/{run_id}``        summary + every span, normalized JSON
``GET /api/v1/runs/{run_id}/otlp``   the run as an OTLP/JSON ExportTraceServiceRequest
``GET /api/v1/openapi.json``         this API's OpenAPI document

A run's spans are served after the trace-level normalization pass (``normalize_trace``):
the one place every span of the run is at hand, so what a client (the replay worker) reads
does not depend on how the spans were batched on their way in.

Another project's run is a 404 exactly like an unknown one: no data, no hint it exists.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from afr_exporter.semconv import RUN_KINDS
from collector.auth import Authenticator
from collector.errors import Unauthenticated
from collector.model import SpanRecord
from collector.processors.normalize import normalize_trace
from collector.receiver.status import http_status
from collector.store.reader import RunFilter, RunReader, decode_cursor

__all__ = ["RunsApi"]

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
_NS = 1_000_000_000
_STATUS_CODES = {"Unset": 0, "Ok": 1, "Error": 2}
_KIND_CODES = {
    "Unspecified": 0,
    "Internal": 1,
    "Server": 2,
    "Client": 3,
    "Producer": 4,
    "Consumer": 5,
}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def span_json(span: SpanRecord) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "name": span.span_name,
        "kind": span.span_kind,
        "start_time_unix_nano": span.timestamp_ns,
        "end_time_unix_nano": span.timestamp_ns + span.duration_ns,
        "duration_ns": span.duration_ns,
        "status": {"code": span.status_code, "message": span.status_message},
        "service_name": span.service_name,
        "resource_attributes": span.resource_attributes,
        "scope": {"name": span.scope_name, "version": span.scope_version},
        "trace_state": span.trace_state,
        "attributes": span.original_attributes(),
        "events": [
            {"time_unix_nano": t, "name": n, "attributes": a}
            for t, n, a in zip(
                span.event_timestamps,
                span.event_names,
                span.event_attributes,
                strict=False,
            )
        ],
        "links": [
            {"trace_id": t, "span_id": s, "trace_state": st, "attributes": a}
            for t, s, st, a in zip(
                span.link_trace_ids,
                span.link_span_ids,
                span.link_trace_states,
                span.link_attributes,
                strict=False,
            )
        ],
        "span_type": span.span_type,
        "dialect": span.dialect,
        "agent_name": span.agent_name,
        "tool_name": span.tool_name,
        "tool_call_id": span.tool_call_id,
        "model": span.model,
        "error_type": span.error_type,
        "input": span.input,
        "output": span.output,
        "input_tokens": span.input_tokens,
        "output_tokens": span.output_tokens,
        "run_kind": span.run_kind,
        "source_run_id": span.source_run_id,
        "redactions": span.redactions,
        "truncated": bool(span.truncated),
    }


def _kv(attributes: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in sorted(attributes.items())]


def otlp_json(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP/JSON (hex ids). Attribute values come back as strings: the store keeps them so."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for span in spans:
        resource_key = tuple(sorted(span["resource_attributes"].items()))
        scope_key = (span["scope"]["name"], span["scope"]["version"])
        group = groups.setdefault(
            (resource_key, scope_key),
            {"resource": span["resource_attributes"], "scope": span["scope"], "spans": []},
        )
        group["spans"].append(
            {
                "traceId": span["trace_id"],
                "spanId": span["span_id"],
                "parentSpanId": span["parent_span_id"],
                "traceState": span["trace_state"],
                "name": span["name"],
                "kind": _KIND_CODES.get(span["kind"], 0),
                "startTimeUnixNano": str(span["start_time_unix_nano"]),
                "endTimeUnixNano": str(span["end_time_unix_nano"]),
                "attributes": _kv(span["attributes"]),
                "events": [
                    {
                        "timeUnixNano": str(e["time_unix_nano"]),
                        "name": e["name"],
                        "attributes": _kv(e["attributes"]),
                    }
                    for e in span["events"]
                ],
                "links": [
                    {
                        "traceId": link["trace_id"],
                        "spanId": link["span_id"],
                        "traceState": link["trace_state"],
                        "attributes": _kv(link["attributes"]),
                    }
                    for link in span["links"]
                ],
                "status": {
                    "code": _STATUS_CODES.get(span["status"]["code"], 0),
                    "message": span["status"]["message"],
                },
            }
        )
    resource_spans: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (resource_key, _), group in groups.items():
        entry = resource_spans.setdefault(
            resource_key, {"resource": {"attributes": _kv(group["resource"])}, "scopeSpans": []}
        )
        entry["scopeSpans"].append({"scope": group["scope"], "spans": group["spans"]})
    return {"resourceSpans": list(resource_spans.values())}


class RunsApi:
    def __init__(
        self, reader: RunReader, auth: Authenticator, *, max_runs: int, default_lookback_s: float
    ) -> None:
        self._reader = reader
        self._auth = auth
        self._max_runs = max_runs
        self._lookback_ns = int(default_lookback_s * _NS)

    def _project(self, request: Request) -> str:
        return self._auth.authenticate(request.headers.get("authorization"))

    async def list_runs(self, request: Request) -> Response:
        try:
            project = self._project(request)
        except Unauthenticated as error:
            mapped = http_status(error)
            return JSONResponse({"error": mapped.message}, status_code=401, headers=mapped.headers)
        query = request.query_params
        now_ns = time.time_ns()
        try:
            until_ns = _time_param("until", query.get("until"), now_ns + 3600 * _NS)
            since_ns = _time_param("since", query.get("since"), until_ns - self._lookback_ns)
            limit_text = query.get("limit", "50")
            limit = int(limit_text) if limit_text.isdigit() else 0
            if not 1 <= limit <= self._max_runs:
                raise ValueError(f"limit must be 1..{self._max_runs}")
            status = query.get("status")
            if status not in (None, "ok", "error"):
                raise ValueError("status must be ok or error")
            kind = query.get("kind")
            if kind is not None and kind not in RUN_KINDS:
                raise ValueError(f"kind must be one of {', '.join(RUN_KINDS)}")
            cursor = _cursor(query["cursor"]) if query.get("cursor") else None
            source = query.get("source_run_id", "").lower().removeprefix("trace_") or None
            if source is not None and not re.fullmatch(r"[0-9a-f]{32}", source):
                raise ValueError("source_run_id must be 32 hex digits")
        except ValueError as exc:
            return _error(400, str(exc))
        flt = RunFilter(
            since_ns=since_ns,
            until_ns=until_ns,
            status=status,
            workflow=query.get("workflow"),
            agent=query.get("agent"),
            kind=kind,
            source_run_id=source,
            limit=limit,
            cursor=cursor,
        )
        runs, next_cursor = await asyncio.to_thread(self._reader.list_runs, project, flt)
        return JSONResponse({"runs": runs, "next_cursor": next_cursor})

    async def _load(
        self, request: Request
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | Response:
        try:
            project = self._project(request)
        except Unauthenticated as error:
            mapped = http_status(error)
            return JSONResponse({"error": mapped.message}, status_code=401, headers=mapped.headers)
        run_id = str(request.path_params["run_id"]).lower().removeprefix("trace_")
        if not _RUN_ID.match(run_id):
            return _error(400, "a run id is 32 hex digits")
        loaded = await asyncio.to_thread(self._run_view, project, run_id)
        if loaded is None:
            return _error(404, "no such run")
        return loaded

    def _run_view(
        self, project: str, run_id: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        loaded = self._reader.get_run(project, run_id)
        if loaded is None:
            return None
        summary, rows = loaded
        records = [SpanRecord(**row) for row in rows]
        normalize_trace(records)
        return summary, [span_json(record) for record in records]

    async def get_run(self, request: Request) -> Response:
        loaded = await self._load(request)
        if isinstance(loaded, Response):
            return loaded
        summary, spans = loaded
        return JSONResponse({"run": summary, "spans": spans})

    async def get_run_otlp(self, request: Request) -> Response:
        loaded = await self._load(request)
        if isinstance(loaded, Response):
            return loaded
        return JSONResponse(otlp_json(loaded[1]))


def _cursor(text: str) -> tuple[int, str]:
    try:
        return decode_cursor(text)
    except RecursionError:  # base64 of JSON nested deeper than Python parses
        raise ValueError("invalid cursor") from None


def _time_param(name: str, value: str | None, default_ns: int) -> int:
    """Unix seconds (float) or nanoseconds (int > 1e12). Errors never quote the value."""
    if value is None or value == "":
        return default_ns
    try:
        number = float(value)
        if not math.isfinite(number) or abs(number) > 2**63:
            raise ValueError
        return int(number) if number > 1e12 else int(number * _NS)
    except ValueError:
        raise ValueError(f"{name} must be unix seconds or nanoseconds") from None
