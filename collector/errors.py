"""Pipeline errors. Retry semantics live in the type; ``receiver/status.py`` is the one
place that maps them onto gRPC codes and HTTP statuses."""

from __future__ import annotations

__all__ = [
    "InvalidRequest",
    "PayloadTooLarge",
    "PipelineError",
    "StoreUnavailable",
    "Unauthenticated",
]


class PipelineError(Exception):
    """Base class; the message is safe to show to the client (never holds a secret)."""


class InvalidRequest(PipelineError):
    """The request cannot be decoded. Permanent: the client must not retry it."""


class PayloadTooLarge(PipelineError):
    """The request exceeds the size limit after decompression. Permanent."""


class Unauthenticated(PipelineError):
    """No key, or a key that is unknown or revoked. Permanent."""


class StoreUnavailable(PipelineError):
    """The data could not be made durable now (log full, disk error). Retryable."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
