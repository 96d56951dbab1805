"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (protobuf or JSON, optionally
gzip).

The body is read with a byte cap, and gzip is inflated incrementally with the same cap, so a
decompression bomb costs at most ``max_request_bytes`` of memory before it is refused.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.requests import Request
from starlette.responses import Response

from collector.auth import Authenticator
from collector.errors import InvalidRequest, PayloadTooLarge, PipelineError
from collector.pipeline import Pipeline
from collector.receiver.status import http_status

__all__ = ["OtlpHttpHandler", "read_body"]

logger = logging.getLogger("afr.collector.http")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


async def read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > max_bytes:
            raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise InvalidRequest(f"unsupported content-encoding {encoding!r}: use gzip or none")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, max_bytes + 1)
    except zlib.error:
        raise InvalidRequest("body is not valid gzip") from None
    if len(body) > max_bytes or inflater.unconsumed_tail:
        raise PayloadTooLarge(f"decompressed body exceeds {max_bytes} bytes")
    if not inflater.eof:
        raise InvalidRequest("gzip body is truncated")
    return body


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


class OtlpHttpHandler:
    def __init__(self, pipeline: Pipeline, auth: Authenticator, max_request_bytes: int) -> None:
        self._pipeline = pipeline
        self._auth = auth
        self._max_bytes = max_request_bytes

    async def handle(self, request: Request) -> Response:
        """``POST /v1/traces``."""
        return await self._handle(request, logs=False)

    async def handle_logs(self, request: Request) -> Response:
        """``POST /v1/logs``."""
        return await self._handle(request, logs=True)

    async def _handle(self, request: Request, *, logs: bool) -> Response:
        media = _media_type(request)
        as_json = media == JSON
        if media not in (PROTOBUF, JSON):
            return Response(
                f"unsupported content-type {media!r}: use {PROTOBUF} or {JSON}",
                status_code=415,
                media_type="text/plain",
            )
        try:
            project = self._auth.authenticate(request.headers.get("authorization"))
            raw = await read_body(request, self._max_bytes)
            result = await self._pipeline.ingest_bytes(raw, as_json, project, logs=logs)
        except PipelineError as error:
            return self._error(error, as_json)
        except Exception as error:
            # The type only: a message or traceback could quote request content.
            logger.error("unexpected %s in the HTTP export handler", type(error).__name__)
            return Response("internal error", status_code=500, media_type="text/plain")
        response: ExportTraceServiceResponse | ExportLogsServiceResponse
        if logs:
            response = ExportLogsServiceResponse()
            if result.rejected:
                response.partial_success.rejected_log_records = result.rejected
                response.partial_success.error_message = result.error_message
        else:
            response = ExportTraceServiceResponse()
            if result.rejected:
                response.partial_success.rejected_spans = result.rejected
                response.partial_success.error_message = result.error_message
        if as_json:
            body: Any = json_format.MessageToJson(response, indent=None)
            return Response(body, media_type=JSON)
        return Response(response.SerializeToString(), media_type=PROTOBUF)

    def _error(self, error: PipelineError, as_json: bool) -> Response:
        mapped = http_status(error)
        if as_json:
            body = json.dumps({"code": mapped.grpc_code, "message": mapped.message})
            return Response(
                body, status_code=mapped.status, headers=mapped.headers, media_type=JSON
            )
        status = status_pb2.Status(code=mapped.grpc_code, message=mapped.message)
        return Response(
            status.SerializeToString(),
            status_code=mapped.status,
            headers=mapped.headers,
            media_type=PROTOBUF,
        )
