"""The read API client: ``GET /api/v1/runs``, ``/api/v1/runs/{id}`` and ``/api/v1/runs/diff`` with the project
key as a bearer token, every failure mapped to one ``RunsApiError`` line (the only place
HTTP statuses become messages). The key is sent as a header and never printed, not even in
an error."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from afr.runs.text import clean

if TYPE_CHECKING:
    import httpx

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "DEFAULT_API_URL",
    "DEFAULT_TIMEOUT_S",
    "CollectorUnreachable",
    "RunsApiError",
    "RunsClient",
]

DEFAULT_API_URL = "http://127.0.0.1:4318"
API_URL_ENV = "AFR_API_URL"
API_KEY_ENV = "AFR_API_KEY"
DEFAULT_TIMEOUT_S = 30.0


class RunsApiError(Exception):
    """What went wrong, in one line for stderr (exit code 2). Never holds the key."""


class CollectorUnreachable(RunsApiError):
    """No answer, or a 5xx: worth retrying in a live view."""


class RunsClient:
    """The read API over HTTP, with the project key as a bearer token."""

    def __init__(
        self,
        base_url: str,
        key: str | None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        try:
            parts = urlsplit(base_url.rstrip("/"))
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError
            client = httpx.Client(
                base_url=base_url.rstrip("/"),
                headers={"authorization": f"Bearer {key}"} if key else {},
                timeout=timeout_s,
                transport=transport,
            )
        except (ValueError, httpx.InvalidURL):  # the URL is not quoted: it may hold a password
            raise RunsApiError(
                f"the collector URL is not an http(s) URL (--url, {API_URL_ENV})"
            ) from None
        self._shown_url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
        self._has_key = bool(key)
        self._client = client

    @property
    def url(self) -> str:
        """The base URL as it may be shown (without any credentials in it)."""
        return self._shown_url

    def __enter__(self) -> RunsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def list_runs(self, params: Mapping[str, str]) -> dict[str, Any]:
        """One page: ``{"runs": [...], "next_cursor": str | None}``."""
        return self._get("/api/v1/runs", params, run_id=None)

    def iter_pages(self, params: Mapping[str, str]) -> Iterator[list[dict[str, Any]]]:
        """Every page, following ``next_cursor`` from the one ``params`` names."""
        query = dict(params)
        while True:
            page = self.list_runs(query)
            yield page["runs"]
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """``{"run": summary, "spans": [...]}``."""
        return self._get(f"/api/v1/runs/{quote(run_id, safe='')}", {}, run_id=run_id)

    def diff_runs(self, a: str, b: str) -> dict[str, Any]:
        """``b`` against ``a``, as ``GET /api/v1/runs/diff`` answers (collector.api.models.RunDiff)."""
        return self._get("/api/v1/runs/diff", {"a": a, "b": b}, run_id=None)

    def list_failures(self, params: Mapping[str, str]) -> dict[str, Any]:
        """One page of failure clusters: ``{"failures": [...], "next_cursor": str | None}``."""
        return self._get("/api/v1/failures", params, run_id=None)

    def get_failure(self, signature: str, params: Mapping[str, str]) -> dict[str, Any]:
        """``{"failure": cluster}``; a 404 names the signature."""
        try:
            return self._get(f"/api/v1/failures/{quote(signature, safe='')}", params, run_id=None)
        except RunsApiError as exc:
            if str(exc).endswith("(404)") or "HTTP 404" in str(exc):
                raise RunsApiError(
                    f"no failure {clean(signature)} in this key's project in the window (404)"
                ) from None
            raise

    def _get(self, path: str, params: Mapping[str, str], *, run_id: str | None) -> dict[str, Any]:
        import httpx

        try:
            response = self._client.get(path, params=dict(params))
        except httpx.HTTPError as exc:
            raise CollectorUnreachable(
                f"collector unreachable at {self._shown_url} ({type(exc).__name__}); "
                f"is `afr up` running? (--url or {API_URL_ENV})"
            ) from None
        return self._answer(response, run_id)

    def _answer(self, response: httpx.Response, run_id: str | None) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        message = body.get("error") if isinstance(body, dict) else None
        status = response.status_code
        if status == 200 and isinstance(body, dict):
            return body
        if status == 401:
            hint = "the key was refused" if self._has_key else "no key was found"
            raise RunsApiError(
                f"collector answered 401 unauthorized: {hint} "
                f"(set {API_KEY_ENV}, or --data-dir to the data directory of `afr up`)"
            )
        if status == 404 and run_id is not None:
            raise RunsApiError(f"no run {clean(run_id)} in this key's project (404)")
        if status == 404 and message:  # the diff names which of its runs
            raise RunsApiError(f"{clean(str(message))} in this key's project (404)")
        if status == 400:
            raise RunsApiError(f"bad request: {clean(str(message or 'HTTP 400'))}")
        detail = f": {clean(str(message))}" if message else ""
        if status >= 500:
            raise CollectorUnreachable(f"collector answered HTTP {status}{detail}")
        if status == 200:
            raise RunsApiError("collector answered with a body that is not a JSON object")
        raise RunsApiError(f"collector answered HTTP {status}{detail}")
