"""The worker's HTTP API as an OpenAPI 3.1 document, served at ``GET /openapi.json``.

Request and response bodies are pydantic models; the document is generated from them. The
hook handlers (app.py) read their bodies by hand, so their 400 messages name the field at
fault; tests/fuzz/test_api_schemathesis.py holds handlers and document together (every
answer has a documented status and conforms to its schema, signed or not).

Every hook is signed (Standard Webhooks, hooks/signature.py): ``webhook-id``,
``webhook-timestamp`` (unix seconds, within the tolerance) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, several space-separated while a
secret rotates). HMAC over the body is not an OpenAPI security scheme, so they are declared
as required header parameters.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

__all__ = ["OPENAPI"]

_RUN_ID = r"^(?:trace_)?[0-9a-fA-F]{32}$"


class ReplayHook(BaseModel):
    """``POST /hooks/replay``: replay a stored run."""

    run_id: str = Field(pattern=_RUN_ID, description="the run (OTel trace id) to replay")
    model: str | None = Field(None, description="model to replay with; default: the run's")
    stubs: dict[str, str] | None = Field(None, description="tool name -> output to answer with")
    policy: Literal["exact", "strict", "lenient"] = "exact"


class EvalHook(BaseModel):
    """``POST /hooks/evals``: turn a FAILURE_FIXED replay into a regression eval."""

    replay_run_id: str = Field(pattern=_RUN_ID)


class SweepHook(BaseModel):
    """``POST /hooks/sweeps``: queue a sweep (an empty body: a manual slot named by the
    webhook id)."""

    slot: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="a label, or an instant of the schedule (2026-12-01T03:00:00Z)",
    )


class Error(BaseModel):
    error: str


class EvalRefused(BaseModel):
    error: str
    verdict: str | None = None


class JobAccepted(BaseModel):
    job_id: str
    state: str
    status_url: str


class Job(BaseModel):
    model_config = ConfigDict(extra="allow")

    job_id: str
    run_id: str
    model: str | None
    policy: str
    state: str
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    cost_usd: float
    overrun_usd: float
    model_requests: int


class EvalWritten(BaseModel):
    eval_id: str
    path: str
    eval: dict[str, Any] = Field(description="the afr.eval/v1 document written")


class SweepAccepted(BaseModel):
    sweep_id: str
    slot: str
    state: str
    status_url: str


class Sweep(BaseModel):
    model_config = ConfigDict(extra="allow")

    sweep_id: str
    slot: str
    trigger: str
    state: str
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    summary: dict[str, Any] | None
    error: dict[str, Any] | None


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")

    ok: bool
    error: str | None = None


_MODELS: list[type[BaseModel]] = [
    ReplayHook, EvalHook, SweepHook, Error, EvalRefused, JobAccepted, Job, EvalWritten,
    SweepAccepted, Sweep, Health,
]  # fmt: skip
_, _DEFINITIONS = models_json_schema(
    [(model, "validation") for model in _MODELS], ref_template="#/components/schemas/{model}"
)
_SCHEMAS: dict[str, Any] = _DEFINITIONS["$defs"]


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


_SIGNATURE_HEADERS = [
    {
        "name": "webhook-id",
        "in": "header",
        "required": True,
        "description": "unique per delivery; a re-delivery with the same id gets the same answer",
        "schema": {"type": "string", "minLength": 1},
    },
    {
        "name": "webhook-timestamp",
        "in": "header",
        "required": True,
        "description": "unix seconds; refused outside the worker's tolerance (default 300 s)",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    {
        "name": "webhook-signature",
        "in": "header",
        "required": True,
        "description": "v1,<base64 HMAC-SHA256>, space-separated during a secret rotation",
        "schema": {"type": "string", "pattern": "^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$"},
    },
]
_DOCUMENT = {
    "description": "OpenAPI 3.1",
    "content": {"application/json": {"schema": {"type": "object"}}},
}
_REFUSED = {
    "400": _json(Error, "the body is not valid JSON of this hook's shape"),
    "401": _json(Error, "unsigned, badly signed or stale; or no webhook secret configured"),
    "413": _json(Error, "body over 1 MiB"),
}


def _hook(
    summary: str, body: type[BaseModel], required: bool, responses: dict[str, Any]
) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": _SIGNATURE_HEADERS,
            "requestBody": {
                "required": required,
                "content": {"application/json": {"schema": _ref(body)}},
            },
            "responses": {**responses, **_REFUSED},
        }
    }


def _get(summary: str, responses: dict[str, Any], path_id: str | None = None) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if path_id is not None:
        operation["parameters"] = [
            {"name": path_id, "in": "path", "required": True, "schema": {"type": "string"}}
        ]
    return {"get": operation}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "afr replay worker", "version": "1"},
    "components": {"schemas": _SCHEMAS},
    "paths": {
        "/hooks/replay": _hook(
            "Replay a stored run (a job)",
            ReplayHook,
            True,
            {"202": _json(JobAccepted, "queued, or the job this webhook id already started")},
        ),
        "/hooks/evals": _hook(
            "Synthesize the regression eval of a FAILURE_FIXED replay",
            EvalHook,
            True,
            {
                "201": _json(EvalWritten, "the eval, written to the evals directory"),
                "404": _json(Error, "no such run in the collector"),
                "422": _json(EvalRefused, "the replay gives no eval (its verdict, the reason)"),
                "503": _json(Error, "the collector could not be read"),
            },
        ),
        "/hooks/sweeps": _hook(
            "Queue the sweep of a slot",
            SweepHook,
            False,
            {
                "202": _json(SweepAccepted, "queued, or the sweep of that slot already"),
                "409": _json(Error, "no evals directory on this worker"),
            },
        ),
        "/jobs/{job_id}": _get(
            "A replay job: state and, when done, verdict or error, cost",
            {"200": _json(Job, "the job"), "404": _json(Error, "no such job")},
            "job_id",
        ),
        "/sweeps/{sweep_id}": _get(
            "A sweep: state and, once finished, its summary",
            {"200": _json(Sweep, "the sweep"), "404": _json(Error, "no such sweep")},
            "sweep_id",
        ),
        "/healthz": _get(
            "Jobs and sweeps being run, the day's spend",
            {
                "200": _json(Health, "jobs are being run"),
                "503": _json(Health, "jobs are not being run, with the reason"),
            },
        ),
        "/openapi.json": _get("This document", {"200": _DOCUMENT}),
    },
}
