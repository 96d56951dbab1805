"""The read API's errors, and the one place they become HTTP statuses.

A handler raises one of these kinds (or ``Unauthenticated`` from the authenticator); the
answer's status comes from ``STATUS_BY_ERROR`` and its body is the ``Error`` model. The
OpenAPI document (openapi.py) derives each operation's error responses from the same
mapping, so a status the handlers answer is a status the document declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Final

from starlette.responses import JSONResponse

from collector.api.models import Error
from collector.errors import Unauthenticated

__all__ = [
    "STATUS_BY_ERROR",
    "ApiError",
    "BadParameter",
    "FailureNotFound",
    "RunNotFound",
    "error_response",
    "status_of",
]


class ApiError(Exception):
    """Base class; the message is safe to show to the client and names what is wrong."""


class BadParameter(ApiError):
    """A query or path parameter is malformed; the message names the parameter."""


class RunNotFound(ApiError):
    """No such run in the caller's project (another project's run looks the same)."""


class FailureNotFound(ApiError):
    """No run of the caller's project has this failure signature in the window."""


STATUS_BY_ERROR: Final[Mapping[type[Exception], HTTPStatus]] = {
    BadParameter: HTTPStatus.BAD_REQUEST,
    Unauthenticated: HTTPStatus.UNAUTHORIZED,
    RunNotFound: HTTPStatus.NOT_FOUND,
    FailureNotFound: HTTPStatus.NOT_FOUND,
}
"""Every error kind the read API answers with, and its status."""

_HEADERS: Final[Mapping[HTTPStatus, dict[str, str]]] = {
    HTTPStatus.UNAUTHORIZED: {"www-authenticate": 'Bearer realm="afr"'},
}


def status_of(kind: type[Exception]) -> HTTPStatus:
    """The status of an error kind (or of its nearest mapped base class)."""
    for base in kind.__mro__:
        if base in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[base]
    raise KeyError(f"{kind.__name__} has no HTTP status in the read API's mapping")


def error_response(error: ApiError | Unauthenticated) -> JSONResponse:
    status = status_of(type(error))
    return JSONResponse(
        Error(error=str(error)).model_dump(mode="json"),
        status_code=status,
        headers=_HEADERS.get(status),
    )
