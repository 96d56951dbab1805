"""The read API's OpenAPI document, served at ``/api/v1/openapi.json``: generated from the
models (models.py) and the error mapping (status.py), never written by hand.

``docs/openapi/read-api.json`` is this document checked in; ``afr openapi --write``
regenerates it and tests/unit/contracts/test_openapi_documents.py fails when it is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from collector.api.failure_models import FailureDetail, FailureList, FailureQuery
from collector.api.models import DiffQuery, Error, OtlpTrace, RunDetail, RunDiff, RunList, RunQuery
from collector.api.status import BadParameter, FailureNotFound, RunNotFound, status_of
from collector.errors import Unauthenticated

__all__ = ["OPENAPI", "OPERATIONS", "Operation", "build_openapi"]

_REF = "#/components/schemas/{model}"
_RUN_ID_PARAMETER: Final = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "description": "32 hex digits (the OTel trace id), optionally prefixed trace_",
    "schema": {"type": "string", "pattern": "^(?:trace_)?[0-9a-fA-F]{32}$"},
}
_SIGNATURE_PARAMETER: Final = {
    "name": "signature",
    "in": "path",
    "required": True,
    "description": "a failure signature: 16 hex digits (ADR 34)",
    "schema": {"type": "string", "pattern": "^[0-9a-fA-F]{16}$"},
}


@dataclass(frozen=True)
class Operation:
    """A ``GET`` of the read API: what it answers with, and which error kinds it raises."""

    summary: str
    ok: type[BaseModel]
    errors: tuple[type[Exception], ...]
    query: type[BaseModel] | None = None
    run_id: bool = False
    signature: bool = False


OPERATIONS: Final[dict[str, Operation]] = {
    "/api/v1/runs": Operation(
        "Runs of the caller's project, newest first",
        RunList,
        (BadParameter, Unauthenticated),
        query=RunQuery,
    ),
    "/api/v1/runs/diff": Operation(
        "Two runs aligned step by step: the first divergence, per-step token, cost and "
        "latency deltas, and a replay's or eval's recorded verdict against its source",
        RunDiff,
        (BadParameter, Unauthenticated, RunNotFound),
        query=DiffQuery,
    ),
    "/api/v1/runs/{run_id}": Operation(
        "A run's summary and all its spans (normalized JSON)",
        RunDetail,
        (BadParameter, Unauthenticated, RunNotFound),
        run_id=True,
    ),
    "/api/v1/runs/{run_id}/otlp": Operation(
        "The run as an OTLP/JSON ExportTraceServiceRequest (hex ids)",
        OtlpTrace,
        (BadParameter, Unauthenticated, RunNotFound),
        run_id=True,
    ),
    "/api/v1/failures": Operation(
        "Failure clusters of the caller's project over a window: recurring first",
        FailureList,
        (BadParameter, Unauthenticated),
        query=FailureQuery,
    ),
    "/api/v1/failures/{signature}": Operation(
        "One failure cluster: its runs, fixing replay and guarding eval",
        FailureDetail,
        (BadParameter, Unauthenticated, FailureNotFound),
        query=FailureQuery,
        signature=True,
    ),
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _summary(kind: type[Exception]) -> str:
    """The first sentence of the kind's docstring: a response's description."""
    return (kind.__doc__ or kind.__name__).strip().split(". ")[0].rstrip(".")


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """One query parameter per field, optional unless the model requires it; ``null`` is how
    a model says absent, which a query spells by leaving the parameter out."""
    parameters = []
    document = model.model_json_schema(mode="validation")
    for name, schema in document["properties"].items():
        schema = {k: v for k, v in schema.items() if k != "title"}
        branches = [b for b in schema.pop("anyOf", []) if b != {"type": "null"}]
        if len(branches) == 1:
            schema = {**branches[0], **schema}
        if schema.get("default") is None:
            schema.pop("default", None)
        description = schema.pop("description", None)
        parameter = {"name": name, "in": "query", "schema": schema}
        if name in document.get("required", ()):
            parameter["required"] = True
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def _operation(operation: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": _json(operation.ok, "OK")}
    for kind in operation.errors:
        status = str(int(status_of(kind)))
        if status in responses:
            responses[status]["description"] += "; " + _summary(kind)
        else:
            responses[status] = _json(Error, _summary(kind))
    parameters = [_RUN_ID_PARAMETER] if operation.run_id else []
    if operation.signature:
        parameters.append(_SIGNATURE_PARAMETER)
    if operation.query is not None:
        parameters += _query_parameters(operation.query)
    return {"summary": operation.summary, "parameters": parameters, "responses": responses}


def build_openapi() -> dict[str, Any]:
    models: list[type[BaseModel]] = [Error, *(op.ok for op in OPERATIONS.values())]
    modes: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in models]
    _, definitions = models_json_schema(modes, ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {"title": "afr collector read API", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": definitions["$defs"],
        },
        "security": [{"bearer": []}],
        "paths": {path: {"get": _operation(op)} for path, op in OPERATIONS.items()},
    }


OPENAPI: Final[dict[str, Any]] = build_openapi()
