"""The one place pipeline outcomes become gRPC codes and HTTP statuses (docs/reference.md §4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2

from collector.errors import (
    InvalidRequest,
    PayloadTooLarge,
    PipelineError,
    StoreUnavailable,
    Unauthenticated,
)

__all__ = ["GrpcStatus", "HttpStatus", "grpc_status", "http_status"]

RETRY_INFO_KEY = "google.rpc.retryinfo-bin"


@dataclass(frozen=True)
class GrpcStatus:
    code: grpc.StatusCode
    message: str
    trailing_metadata: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class HttpStatus:
    status: int
    grpc_code: int
    message: str
    headers: dict[str, str]


def _retry_info(seconds: float) -> bytes:
    whole = int(seconds)
    delay = Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))
    return bytes(error_details_pb2.RetryInfo(retry_delay=delay).SerializeToString())


def grpc_status(error: PipelineError) -> GrpcStatus:
    if isinstance(error, InvalidRequest):
        return GrpcStatus(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    if isinstance(error, PayloadTooLarge):
        return GrpcStatus(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
    if isinstance(error, Unauthenticated):
        return GrpcStatus(grpc.StatusCode.UNAUTHENTICATED, str(error))
    if isinstance(error, StoreUnavailable):
        return GrpcStatus(
            grpc.StatusCode.UNAVAILABLE,
            str(error),
            ((RETRY_INFO_KEY, _retry_info(error.retry_after_s)),),
        )
    return GrpcStatus(grpc.StatusCode.INTERNAL, "internal error")


def http_status(error: PipelineError) -> HttpStatus:
    code = grpc_status(error).code
    if isinstance(error, StoreUnavailable):
        retry = str(max(1, math.ceil(error.retry_after_s)))
        return HttpStatus(503, code.value[0], str(error), {"retry-after": retry})
    status = {
        grpc.StatusCode.INVALID_ARGUMENT: 400,
        grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
        grpc.StatusCode.UNAUTHENTICATED: 401,
    }.get(code, 500)
    headers = {"www-authenticate": 'Bearer realm="afr"'} if status == 401 else {}
    return HttpStatus(
        status, code.value[0], str(error) if status != 500 else "internal error", headers
    )
