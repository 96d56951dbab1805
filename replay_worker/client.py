"""The worker's only way to read runs: the collector's read API, with a project key."""

from __future__ import annotations

import functools
import ssl
import time
from typing import Any

import httpx

from afr_common.urls import redact_url

__all__ = ["CollectorClient", "CollectorUnavailable", "RunNotFound"]


class RunNotFound(Exception):
    """The collector has no such run in this key's project (HTTP 404)."""


class CollectorUnavailable(Exception):
    """The collector could not be reached or answered with an error."""


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default context (certifi's CAs, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built
    once per process: loading the CA bundle takes ~20 ms, which every job paid when each
    request's client built its own."""
    return httpx.create_ssl_context()


class CollectorClient:
    def __init__(self, base_url: str, key: str | None, *, timeout_s: float = 30.0) -> None:
        self._base_url = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {key}"} if key else {}
        self._timeout_s = timeout_s

    async def _get(self, path: str, params: dict[str, str] | None = None) -> httpx.Response:
        url = f"{self._base_url}{path}"
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s, verify=_tls_context()) as client:
                return await client.get(url, headers=self._headers, params=params)
        except httpx.HTTPError as exc:
            raise CollectorUnavailable(
                f"collector unreachable at {redact_url(self._base_url)}: {type(exc).__name__}"
            ) from None

    async def newest_run_with(self, signature: str, *, window_s: float) -> str:
        """The newest production run of the last ``window_s`` seconds that failed with this
        failure signature (``GET /api/v1/failures/{signature}``); ``RunNotFound`` when none."""
        since = f"{time.time() - window_s:.3f}"
        response = await self._get(f"/api/v1/failures/{signature}", {"since": since})
        days = round(window_s / 86_400)
        if response.status_code == 404:
            raise RunNotFound(
                f"no production run of the last {days} days failed with signature {signature}"
            )
        if response.status_code != 200:
            raise CollectorUnavailable(
                f"collector answered HTTP {response.status_code} for failure {signature}"
            )
        samples = response.json()["failure"]["sample_run_ids"]
        if not samples:  # a cluster has a run; an answer without one is not afr's
            raise CollectorUnavailable(f"collector named no run for failure {signature}")
        return str(samples[0])

    async def get_run(self, run_id: str) -> dict[str, Any]:
        response = await self._get(f"/api/v1/runs/{run_id}")
        if response.status_code == 404:
            raise RunNotFound(f"run {run_id} not found in the collector")
        if response.status_code != 200:
            raise CollectorUnavailable(
                f"collector answered HTTP {response.status_code} for run {run_id}"
            )
        body: dict[str, Any] = response.json()
        return body
