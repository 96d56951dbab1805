"""The read API's OpenAPI document, served at ``/api/v1/openapi.json``."""

from __future__ import annotations

from typing import Any

from afr_exporter.semconv import RUN_KINDS

__all__ = ["OPENAPI"]

_RUN = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "description": "32 hex digits: the OTel trace id"},
        "start_ns": {"type": "integer"},
        "end_ns": {"type": "integer"},
        "duration_ns": {"type": "integer"},
        "status": {"type": "string", "enum": ["ok", "error"]},
        "error_count": {"type": "integer"},
        "span_count": {"type": "integer"},
        "failing_span_id": {"type": ["string", "null"]},
        "failing_span_name": {"type": ["string", "null"]},
        "failing_error_type": {"type": ["string", "null"]},
        "workflow": {"type": "string"},
        "root_agent": {"type": "string"},
        "agents": {"type": "array", "items": {"type": "string"}},
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
        "cost_usd": {"type": "number", "description": "tokens priced by model (AFR_MODEL_PRICES)"},
        "kind": {"type": "string", "enum": list(RUN_KINDS)},
        "source_run_id": {"type": ["string", "null"], "description": "the run replayed"},
        "verdict": {"type": ["string", "null"], "description": "a replay's or eval's verdict"},
        "eval_name": {"type": ["string", "null"]},
        "sweep_id": {"type": ["string", "null"]},
    },
}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}}
_RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}


def _responses(ok: dict[str, Any]) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ERROR}}}
    return {
        "200": {"description": "OK", "content": {"application/json": {"schema": ok}}},
        "400": {"description": "bad parameter", **error},
        "401": {"description": "missing or invalid API key", **error},
        "404": {"description": "no such run in this project", **error},
    }


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "afr collector read API", "version": "1"},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Run": _RUN, "Error": _ERROR},
    },
    "security": [{"bearer": []}],
    "paths": {
        "/api/v1/runs": {
            "get": {
                "summary": "Runs of the caller's project, newest first",
                "parameters": [
                    {"name": n, "in": "query", "schema": s}
                    for n, s in [
                        ("since", {"type": "number", "description": "unix seconds or nanoseconds"}),
                        ("until", {"type": "number"}),
                        ("status", {"type": "string", "enum": ["ok", "error"]}),
                        ("workflow", {"type": "string"}),
                        ("agent", {"type": "string"}),
                        ("kind", {"type": "string", "enum": list(RUN_KINDS)}),
                        (
                            "source_run_id",
                            {"type": "string", "description": "its replays and eval runs"},
                        ),
                        ("limit", {"type": "integer", "minimum": 1}),
                        ("cursor", {"type": "string"}),
                    ]
                ],
                "responses": _responses(
                    {
                        "type": "object",
                        "properties": {
                            "runs": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Run"},
                            },
                            "next_cursor": {"type": ["string", "null"]},
                        },
                    }
                ),
            }
        },
        "/api/v1/runs/{run_id}": {
            "get": {
                "summary": "A run's summary and all its spans (normalized JSON)",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {
                        "type": "object",
                        "properties": {
                            "run": {"$ref": "#/components/schemas/Run"},
                            "spans": {"type": "array", "items": {"type": "object"}},
                        },
                    }
                ),
            }
        },
        "/api/v1/runs/{run_id}/otlp": {
            "get": {
                "summary": "The run as an OTLP/JSON ExportTraceServiceRequest (hex ids)",
                "parameters": [_RUN_ID],
                "responses": _responses({"type": "object"}),
            }
        },
    },
}
