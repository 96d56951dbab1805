"""The read API's failure clusters, scoped to the caller's project.

``GET /api/v1/failures``               clusters of the window, recurring first, cursor paging
``GET /api/v1/failures/{signature}``   one cluster (404 when no run of the window has it)
"""

from __future__ import annotations

import asyncio
import time

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.api.failure_models import (
    FailureCluster,
    FailureDetail,
    FailureList,
    FailureQuery,
)
from collector.api.models import dump
from collector.api.runs import api_ns as _ns
from collector.api.runs import bad_query
from collector.api.status import ApiError, BadParameter, FailureNotFound, error_response
from collector.auth import Authenticator
from collector.errors import Unauthenticated
from collector.store.failures import (
    SIGNATURE_PATTERN,
    FailureFilter,
    FailureReader,
    decode_failure_cursor,
)

__all__ = ["DEFAULT_WINDOW_S", "FailuresApi"]

DEFAULT_WINDOW_S = 7 * 86_400
_NS = 1_000_000_000


class FailuresApi:
    def __init__(self, reader: FailureReader, auth: Authenticator) -> None:
        self._reader = reader
        self._auth = auth

    def _filter(self, params: dict[str, str], signature: str | None = None) -> FailureFilter:
        try:
            query = FailureQuery.model_validate(params)
        except ValidationError as error:
            raise bad_query(error) from None
        until_ns = _ns(query.until, time.time_ns() + 3600 * _NS)
        return FailureFilter(
            since_ns=_ns(query.since, until_ns - DEFAULT_WINDOW_S * _NS),
            until_ns=until_ns,
            workflow=query.workflow,
            agent=query.agent,
            status=None if signature else query.status,
            signature=signature,
            limit=query.limit,
            cursor=decode_failure_cursor(query.cursor) if query.cursor and not signature else None,
        )

    async def list_failures(self, request: Request) -> Response:
        try:
            project = self._auth.authenticate(request.headers.get("authorization"))
            flt = self._filter(dict(request.query_params))
        except (ApiError, Unauthenticated) as error:
            return error_response(error)
        clusters, next_cursor = await asyncio.to_thread(self._reader.clusters, project, flt)
        page = FailureList(
            failures=[FailureCluster.model_validate(c) for c in clusters], next_cursor=next_cursor
        )
        return JSONResponse(dump(page))

    async def get_failure(self, request: Request) -> Response:
        try:
            project = self._auth.authenticate(request.headers.get("authorization"))
            signature = str(request.path_params["signature"]).lower()
            if not SIGNATURE_PATTERN.match(signature):
                raise BadParameter("a failure signature is 16 hex digits")
            flt = self._filter(dict(request.query_params), signature)
            cluster = await asyncio.to_thread(self._reader.cluster, project, flt)
            if cluster is None:
                raise FailureNotFound("no run of the window has this failure signature")
        except (ApiError, Unauthenticated) as error:
            return error_response(error)
        return JSONResponse(dump(FailureDetail(failure=FailureCluster.model_validate(cluster))))
