"""The worker's HTTP API as an OpenAPI 3.1 document, served at ``GET /openapi.json``:
generated from the request and response models (hooks/models.py) and the error mapping
(hooks/status.py), never written by hand. ``docs/openapi/worker.json`` is this document
checked in; ``afr openapi --write`` regenerates it and
tests/unit/contracts/test_openapi_documents.py fails when it is stale.

The hook handlers (app.py) validate bodies through the models with messages that name the
field at fault; tests/fuzz/test_api_schemathesis.py holds handlers and document together
(every answer has a documented status and conforms to its schema, signed or not).

Every hook is signed (Standard Webhooks, hooks/signature.py): ``webhook-id``,
``webhook-timestamp`` (unix seconds, within the tolerance) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, several space-separated while a
secret rotates). HMAC over the body is not an OpenAPI security scheme, so they are declared
as required header parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from replay_worker.client import CollectorUnavailable, RunNotFound
from replay_worker.hooks.models import (
    EvalHook,
    EvalWritten,
    Health,
    Job,
    JobAccepted,
    ReplayHook,
    Sweep,
    SweepAccepted,
    SweepHook,
)
from replay_worker.hooks.status import (
    BadRequest,
    BodyTooLarge,
    NoEval,
    NoEvalsDirectory,
    NotFound,
    Unforkable,
    Unhealthy,
    Unsigned,
    body_of,
    status_of,
)
from replay_worker.state_engines import StateStoreUnavailable

__all__ = ["OPENAPI", "OPERATIONS", "Operation", "build_openapi"]

_REF = "#/components/schemas/{model}"
_SIGNED: Final = (BadRequest, Unsigned, BodyTooLarge)
"""What every hook may answer before its own work: the signature and body checks."""


@dataclass(frozen=True)
class Operation:
    """One route: its method, success answer, the error kinds it raises, and its body."""

    method: str
    summary: str
    ok: tuple[HTTPStatus, type[BaseModel] | None, str]
    errors: tuple[type[Exception], ...] = ()
    body: type[BaseModel] | None = None
    body_required: bool = True
    path_id: str | None = None


OPERATIONS: Final[dict[str, Operation]] = {
    "/hooks/replay": Operation(
        "post",
        "Replay a stored run (a job)",
        (HTTPStatus.ACCEPTED, JobAccepted, "queued, or the job this webhook id already started"),
        # A fork is checked against its run before it is queued.
        (*_SIGNED, RunNotFound, Unforkable, CollectorUnavailable, StateStoreUnavailable),
        body=ReplayHook,
    ),
    "/hooks/evals": Operation(
        "post",
        "Synthesize the regression eval of a FAILURE_FIXED replay",
        (HTTPStatus.CREATED, EvalWritten, "the eval, written to the evals directory"),
        (*_SIGNED, RunNotFound, NoEval, CollectorUnavailable),
        body=EvalHook,
    ),
    "/hooks/sweeps": Operation(
        "post",
        "Queue the sweep of a slot",
        (HTTPStatus.ACCEPTED, SweepAccepted, "queued, or the sweep of that slot already"),
        (*_SIGNED, NoEvalsDirectory, StateStoreUnavailable),
        body=SweepHook,
        body_required=False,
    ),
    "/jobs/{job_id}": Operation(
        "get",
        "A replay job: state and, when done, verdict or error, cost",
        (HTTPStatus.OK, Job, "the job"),
        (NotFound, StateStoreUnavailable),
        path_id="job_id",
    ),
    "/sweeps/{sweep_id}": Operation(
        "get",
        "A sweep: state and, once finished, its summary",
        (HTTPStatus.OK, Sweep, "the sweep"),
        (NotFound, StateStoreUnavailable),
        path_id="sweep_id",
    ),
    "/healthz": Operation(
        "get",
        "Jobs and sweeps being run, the day's spend",
        (HTTPStatus.OK, Health, "jobs are being run"),
        (Unhealthy,),
    ),
    "/openapi.json": Operation("get", "This document", (HTTPStatus.OK, None, "OpenAPI 3.1")),
}

_SIGNATURE_HEADERS: Final = [
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


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(model: type[BaseModel] | None, description: str) -> dict[str, Any]:
    schema = _ref(model) if model is not None else {"type": "object"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _summary(kind: type[Exception]) -> str:
    """The first sentence of the kind's docstring: a response's description."""
    return (kind.__doc__ or kind.__name__).strip().split(". ")[0].rstrip(".")


def _operation(operation: Operation) -> dict[str, Any]:
    status, model, description = operation.ok
    responses: dict[str, Any] = {str(int(status)): _json(model, description)}
    for kind in operation.errors:
        code = str(int(status_of(kind)))
        if code in responses:
            responses[code]["description"] += "; " + _summary(kind)
        else:
            responses[code] = _json(body_of(kind), _summary(kind))
    result: dict[str, Any] = {"summary": operation.summary}
    if operation.body is not None:
        result["parameters"] = _SIGNATURE_HEADERS
        result["requestBody"] = {
            "required": operation.body_required,
            "content": {"application/json": {"schema": _ref(operation.body)}},
        }
    elif operation.path_id is not None:
        result["parameters"] = [
            {
                "name": operation.path_id,
                "in": "path",
                "required": True,
                "schema": {"type": "string"},
            }
        ]
    result["responses"] = responses
    return result


def build_openapi() -> dict[str, Any]:
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = []
    for operation in OPERATIONS.values():
        if operation.body is not None:
            modes.append((operation.body, "validation"))
        models = [operation.ok[1], *(body_of(kind) for kind in operation.errors)]
        modes += [(model, "serialization") for model in models if model is not None]
    _, definitions = models_json_schema(list(dict.fromkeys(modes)), ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {"title": "afr replay worker", "version": "1"},
        "components": {"schemas": definitions["$defs"]},
        "paths": {
            path: {operation.method: _operation(operation)}
            for path, operation in OPERATIONS.items()
        },
    }


OPENAPI: Final[dict[str, Any]] = build_openapi()
