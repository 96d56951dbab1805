"""The worker's HTTP errors, and the one place they become statuses.

A handler (app.py) raises one of these kinds, or the collector client's ``RunNotFound`` /
``CollectorUnavailable``; the answer's status comes from ``STATUS_BY_ERROR`` and its body is
the kind's model (``Error`` unless ``BODY_BY_ERROR`` says otherwise). The OpenAPI document
(replay_worker/openapi.py) derives each operation's error responses from the same two
mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Final

from pydantic import BaseModel
from starlette.responses import JSONResponse

from replay_worker.client import CollectorUnavailable, RunNotFound
from replay_worker.hooks.models import Error, EvalRefused, Health, dump
from replay_worker.state_engines import StateStoreUnavailable

__all__ = [
    "BODY_BY_ERROR",
    "STATUS_BY_ERROR",
    "BadRequest",
    "BodyTooLarge",
    "HookError",
    "NoEval",
    "NoEvalsDirectory",
    "NotFound",
    "Unforkable",
    "Unhealthy",
    "Unsigned",
    "body_of",
    "error_response",
    "status_of",
]


class HookError(Exception):
    """Base class; the message is safe to show to the client and says what is wrong."""


class BadRequest(HookError):
    """The body is not valid JSON of this hook's shape; the message names the field."""


class Unsigned(HookError):
    """Unsigned, badly signed or stale; or no webhook secret is configured."""


class NotFound(HookError):
    """No such job or sweep."""


class NoEvalsDirectory(HookError):
    """No evals directory on this worker."""


class BodyTooLarge(HookError):
    """The body is over 1 MiB."""


class NoEval(HookError):
    """The replay gives no eval (its verdict, and the reason)."""

    def __init__(self, reason: str, verdict: str | None) -> None:
        super().__init__(reason)
        self.verdict = verdict


class Unforkable(HookError):
    """The run cannot be forked as asked: the step, an override or the capture (named)."""


class Unhealthy(HookError):
    """Jobs are not being run (the reason in ``error``)."""


STATUS_BY_ERROR: Final[Mapping[type[Exception], HTTPStatus]] = {
    BadRequest: HTTPStatus.BAD_REQUEST,
    Unsigned: HTTPStatus.UNAUTHORIZED,
    NotFound: HTTPStatus.NOT_FOUND,
    RunNotFound: HTTPStatus.NOT_FOUND,
    NoEvalsDirectory: HTTPStatus.CONFLICT,
    BodyTooLarge: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    NoEval: HTTPStatus.UNPROCESSABLE_ENTITY,
    Unforkable: HTTPStatus.UNPROCESSABLE_ENTITY,
    CollectorUnavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    StateStoreUnavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    Unhealthy: HTTPStatus.SERVICE_UNAVAILABLE,
}
"""Every error kind the worker answers with, and its status."""

BODY_BY_ERROR: Final[Mapping[type[Exception], type[BaseModel]]] = {
    NoEval: EvalRefused,
    Unhealthy: Health,  # the health report, built by its handler
}
"""The body of each kind whose answer is not ``Error``."""


def status_of(kind: type[Exception]) -> HTTPStatus:
    """The status of an error kind (or of its nearest mapped base class)."""
    for base in kind.__mro__:
        if base in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[base]
    raise KeyError(f"{kind.__name__} has no HTTP status in the worker's mapping")


def body_of(kind: type[Exception]) -> type[BaseModel]:
    return BODY_BY_ERROR.get(kind, Error)


def error_response(error: Exception) -> JSONResponse:
    status = status_of(type(error))
    if isinstance(error, NoEval):
        body: BaseModel = EvalRefused(error=str(error), verdict=error.verdict)
    else:
        body = Error(error=str(error))
    return JSONResponse(dump(body), status_code=status)
