"""The read API: runs and their spans, scoped to the caller's project.

``GET /api/v1/runs``                 summaries, newest first, filters and cursor paging
``GET /api/v1/runs/diff?a=&b=``      two runs aligned step by step (diff.py)
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
import re
import time
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.api.diff import diff_runs
from collector.api.models import (
    DiffQuery,
    LogEntry,
    OtlpTrace,
    Run,
    RunDetail,
    RunDiff,
    RunFailure,
    RunList,
    RunQuery,
    Span,
    dump,
)
from collector.api.status import ApiError, BadParameter, RunNotFound, error_response
from collector.auth import Authenticator
from collector.errors import Unauthenticated
from collector.model import SpanRecord
from collector.processors.log_content import attach_log_content
from collector.processors.normalize import normalize_trace
from collector.store.failures import FailureFilter, FailureReader
from collector.store.reader import RunFilter, RunReader, decode_cursor

__all__ = [
    "FAILURE_WINDOW_S",
    "RunsApi",
    "bad_query",
    "otlp_json",
    "otlp_trace",
    "span_json",
    "span_model",
]

FAILURE_WINDOW_S = 30 * 86_400
"""How far back a run's failure is looked up among the others (``AFR_TTL_DAYS`` when set)."""
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


def span_model(span: SpanRecord) -> Span:
    return Span.model_validate(
        {
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
            "cache_read_tokens": span.cache_read_tokens,
            "cache_creation_tokens": span.cache_creation_tokens,
            "reasoning_tokens": span.reasoning_tokens,
            "run_kind": span.run_kind,
            "source_run_id": span.source_run_id,
            "redactions": span.redactions,
            "truncated": bool(span.truncated),
        }
    )


def span_json(span: SpanRecord) -> dict[str, Any]:
    """A span as ``GET /api/v1/runs/{run_id}`` serves it."""
    return dump(span_model(span))


def _kv(attributes: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in sorted(attributes.items())]


def otlp_trace(spans: list[Span]) -> OtlpTrace:
    """OTLP/JSON (hex ids). Attribute values come back as strings: the store keeps them so."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for span in spans:
        resource_key = tuple(sorted(span.resource_attributes.items()))
        scope_key = (span.scope.name, span.scope.version)
        group = groups.setdefault(
            (resource_key, scope_key),
            {"resource": span.resource_attributes, "scope": dump(span.scope), "spans": []},
        )
        group["spans"].append(
            {
                "traceId": span.trace_id,
                "spanId": span.span_id,
                "parentSpanId": span.parent_span_id,
                "traceState": span.trace_state,
                "name": span.name,
                "kind": _KIND_CODES.get(span.kind, 0),
                "startTimeUnixNano": str(span.start_time_unix_nano),
                "endTimeUnixNano": str(span.end_time_unix_nano),
                "attributes": _kv(span.attributes),
                "events": [
                    {
                        "timeUnixNano": str(e.time_unix_nano),
                        "name": e.name,
                        "attributes": _kv(e.attributes),
                    }
                    for e in span.events
                ],
                "links": [
                    {
                        "traceId": link.trace_id,
                        "spanId": link.span_id,
                        "traceState": link.trace_state,
                        "attributes": _kv(link.attributes),
                    }
                    for link in span.links
                ],
                "status": {
                    "code": _STATUS_CODES.get(span.status.code, 0),
                    "message": span.status.message,
                },
            }
        )
    resource_spans: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (resource_key, _), group in groups.items():
        entry = resource_spans.setdefault(
            resource_key, {"resource": {"attributes": _kv(group["resource"])}, "scopeSpans": []}
        )
        entry["scopeSpans"].append({"scope": group["scope"], "spans": group["spans"]})
    return OtlpTrace.model_validate({"resourceSpans": list(resource_spans.values())})


def otlp_json(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """``otlp_trace`` of spans as ``span_json`` gives them, as ``/otlp`` serves it."""
    return dump(otlp_trace([Span.model_validate(span) for span in spans]))


def _bad_query(error: ValidationError) -> BadParameter:
    """The first problem, naming its parameter: a validator's own message does; pydantic's
    is prefixed with the parameter's name."""
    first = error.errors(include_url=False, include_input=False)[0]
    cause = first.get("ctx", {}).get("error")
    if first["type"] == "value_error" and cause is not None:
        return BadParameter(str(cause))
    field = ".".join(str(part) for part in first["loc"]) or "query"
    return BadParameter(f"{field}: {first['msg']}")


bad_query = _bad_query
"""The same mapping for the other read routes (failures.py)."""


class RunsApi:
    def __init__(
        self,
        reader: RunReader,
        auth: Authenticator,
        *,
        max_runs: int,
        default_lookback_s: float,
        failures: FailureReader | None = None,
        failure_window_s: float = FAILURE_WINDOW_S,
    ) -> None:
        self._reader = reader
        self._auth = auth
        self._max_runs = max_runs
        self._lookback_ns = int(default_lookback_s * _NS)
        self._failures = failures
        self._failure_window_ns = int(failure_window_s * _NS)

    def _project(self, request: Request) -> str:
        return self._auth.authenticate(request.headers.get("authorization"))

    async def list_runs(self, request: Request) -> Response:
        try:
            project = self._project(request)
            flt = self._filter(dict(request.query_params))
        except (ApiError, Unauthenticated) as error:
            return error_response(error)
        runs, next_cursor = await asyncio.to_thread(self._reader.list_runs, project, flt)
        page = RunList(runs=[Run.model_validate(run) for run in runs], next_cursor=next_cursor)
        return JSONResponse(dump(page))

    def _filter(self, params: dict[str, str]) -> RunFilter:
        try:
            query = RunQuery.model_validate(params, context={"max_runs": self._max_runs})
        except ValidationError as error:
            raise _bad_query(error) from None
        until_ns = _ns(query.until, time.time_ns() + 3600 * _NS)
        return RunFilter(
            since_ns=_ns(query.since, until_ns - self._lookback_ns),
            until_ns=until_ns,
            status=query.status,
            workflow=query.workflow,
            agent=query.agent,
            kind=query.kind,
            source_run_id=query.source_run_id,
            conversation_id=query.conversation_id,
            limit=query.limit,
            cursor=decode_cursor(query.cursor) if query.cursor else None,
        )

    async def _load(
        self, request: Request
    ) -> tuple[str, Run, list[Span], list[LogEntry]] | Response:
        try:
            project = self._project(request)
            run_id = str(request.path_params["run_id"]).lower().removeprefix("trace_")
            if not _RUN_ID.match(run_id):
                raise BadParameter("a run id is 32 hex digits")
            loaded = await asyncio.to_thread(self._full_view, project, run_id)
            if loaded is None:
                raise RunNotFound("no such run")
        except (ApiError, Unauthenticated) as error:
            return error_response(error)
        return project, *loaded

    def _run_view(self, project: str, run_id: str) -> tuple[Run, list[Span]] | None:
        view = self._full_view(project, run_id)
        return None if view is None else (view[0], view[1])

    def _full_view(
        self, project: str, run_id: str
    ) -> tuple[Run, list[Span], list[LogEntry]] | None:
        """The run, its spans after the trace-level pass (a model-call span without content
        given its GenAI log records', ADR 40), and its log records."""
        loaded = self._reader.get_run(project, run_id)
        if loaded is None:
            return None
        summary, rows = loaded
        records = [SpanRecord(**row) for row in rows]
        normalize_trace(records)
        logs = self._reader.get_logs(project, run_id)
        filled = attach_log_content(records, logs) if logs else set()
        spans = [span_model(record) for record in records]
        for span in spans:
            span.content_from_logs = span.span_id in filled
        return Run.model_validate(summary), spans, [LogEntry.model_validate(r) for r in logs]

    async def get_run(self, request: Request) -> Response:
        loaded = await self._load(request)
        if isinstance(loaded, Response):
            return loaded
        project, run, spans, logs = loaded
        failure = None
        if run.signature and self._failures is not None:
            failure = await asyncio.to_thread(
                self._failure, self._failures, project, run, run.signature
            )
        return JSONResponse(dump(RunDetail(run=run, failure=failure, spans=spans, logs=logs)))

    def _failure(
        self, failures: FailureReader, project: str, run: Run, signature: str
    ) -> RunFailure | None:
        """The run's cluster over the failure window (back to the run's start when it is
        older), whatever the run's kind: a failing replay shows the production failure it
        repeats."""
        now_ns = time.time_ns()
        since_ns = min(now_ns - self._failure_window_ns, run.start_ns)
        cluster = failures.cluster(
            project,
            FailureFilter(
                since_ns=since_ns,
                until_ns=max(now_ns + 3600 * _NS, run.start_ns + 1),
                signature=signature,
            ),
        )
        if cluster is None:
            return None
        return RunFailure.model_validate(
            {
                **{k: cluster[k] for k in RunFailure.model_fields if k in cluster},
                "since_ns": since_ns,
            }
        )

    async def diff_runs(self, request: Request) -> Response:
        """``b`` against ``a``; an unknown run (or another project's) is a 404 naming it."""
        try:
            project = self._project(request)
            try:
                query = DiffQuery.model_validate(dict(request.query_params))
            except ValidationError as error:
                raise _bad_query(error) from None
            if query.a == query.b:
                raise BadParameter("a and b are the same run: diff two different runs")
            diff = await asyncio.to_thread(self._diff, project, query.a, query.b)
        except (ApiError, Unauthenticated) as error:
            return error_response(error)
        return JSONResponse(dump(diff))

    def _diff(self, project: str, a: str, b: str) -> RunDiff:
        loaded = []
        for name, run_id in (("a", a), ("b", b)):
            view = self._run_view(project, run_id)
            if view is None:
                raise RunNotFound(f"no such run: {name}={run_id}")
            loaded.append(view)
        (run_a, spans_a), (run_b, spans_b) = loaded
        return diff_runs(run_a, spans_a, run_b, spans_b, self._reader.prices)

    async def get_run_otlp(self, request: Request) -> Response:
        loaded = await self._load(request)
        if isinstance(loaded, Response):
            return loaded
        return JSONResponse(dump(otlp_trace(loaded[2])))


def _ns(value: float | None, default_ns: int) -> int:
    """Unix seconds, or nanoseconds when above 1e12 (the query model checked it is finite;
    a whole number came through exact)."""
    if value is None:
        return default_ns
    return int(value) if value > 1e12 else int(value * _NS)


api_ns = _ns
"""The same reading of a time for the other read routes (failures.py)."""
