"""Schemathesis against the collector's read API and the worker's HTTP API, from their OpenAPI
documents: no 5xx, every status documented, every answer conforming to its documented schema.

The documents are the ones the running services serve (``test_the_documents_are_served``
holds them equal): schemathesis's pytest integration builds its tests at collection time,
before any service runs, so it loads the same dicts from the modules that serve them.

The read API is fuzzed with the project's key and without one (or with a generated one);
the worker's hooks unsigned or badly signed (always 401, or 400/413, before any work) and
signed, by a hook that signs each generated body with the test's secret, so the body
validation behind the signature is fuzzed too.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
import schemathesis
import uvicorn
from hypothesis import HealthCheck
from pydantic import SecretStr
from requests.structures import CaseInsensitiveDict
from schemathesis import APIOperation
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.applications import Starlette

from collector.api.openapi import OPENAPI as READ_API
from replay_worker.app import ReplayWorker
from replay_worker.hooks.signature import generate_secret, sign
from replay_worker.openapi import OPENAPI as WORKER_API
from replay_worker.settings import WorkerSettings
from tests.fuzz.strategies import BASE_NS, fuzz_settings
from tests.integration.conftest import Running, start_collector

Case = schemathesis.Case[APIOperation[Any, Any, Any, Any]]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
_SETTINGS = fuzz_settings(
    10, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
SECRET = generate_secret()


# --- the services ----------------------------------------------------------------------------
def _run(trace_id: str, start_s: int, kind: str, failed: bool) -> dict[str, Any]:
    def attr(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    start = BASE_NS + start_s * 1_000_000_000
    spans = [
        {
            "traceId": trace_id,
            "spanId": trace_id[:15] + "1",
            "name": "invoke_workflow refund-desk",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 3_000_000_000),
            "attributes": [
                attr("afr.span.type", "workflow"),
                attr("gen_ai.workflow.name", "refund-desk"),
                attr("afr.run.kind", kind),
                *([attr("afr.source_run_id", "a" * 32)] if kind == "replay" else []),
            ],
        },
        {
            "traceId": trace_id,
            "spanId": trace_id[:15] + "2",
            "parentSpanId": trace_id[:15] + "1",
            "name": "execute_tool refund_order",
            "startTimeUnixNano": str(start + 1),
            "endTimeUnixNano": str(start + 2_000_000_000),
            "attributes": [
                attr("afr.span.type", "function"),
                attr("gen_ai.tool.name", "refund_order"),
                attr("gen_ai.tool.call.arguments", '{"amount": "12.OO", "note": "\\ud800"}'),
            ],
            "status": {"code": 2, "message": "Error running tool (non-fatal)"} if failed else {},
        },
    ]
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [attr("service.name", "fuzz")]},
                "scopeSpans": [{"scope": {"name": "afr.exporter"}, "spans": spans}],
            }
        ]
    }


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    thread, running = start_collector(tmp_path_factory.mktemp("collector") / "data")
    try:
        for trace_id, start_s, kind, failed in (
            ("a" * 32, 10, "capture", True),
            ("b" * 32, 20, "capture", False),
            ("c" * 32, 30, "replay", False),
        ):
            answer = httpx.post(
                running.http_url + "/v1/traces",
                json=_run(trace_id, start_s, kind, failed),
                headers=running.headers(),
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        running.collector.flush()
        yield running
    finally:
        thread.stop()


class _Server(uvicorn.Server):
    """Sets ``up`` once its startup is over: the test's thread waits on it, never polls."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.up.set()  # failed too: ``started`` tells which


class _Served:
    """A Starlette app on a loopback port, on a thread with its own event loop."""

    def __init__(self, app: Starlette) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = _Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])), daemon=True
        )

    def __enter__(self) -> _Served:
        self._thread.start()
        assert self._server.up.wait(10) and self._server.started, "the app did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, collector: Running) -> Iterator[str]:
    """The worker's HTTP surface (hooks accept jobs and sweeps into its state store; no
    replay process is started), reading runs from the collector above."""
    root = tmp_path_factory.mktemp("worker")
    (root / "evals").mkdir()
    settings = WorkerSettings(
        data_dir=root / "state",
        evals_dir=root / "evals",
        collector_url=collector.http_url,
        collector_key=SecretStr(collector.key),
        webhook_secret=SecretStr(SECRET),
        run_wait_s=0,
        sweep_enabled=False,
    )
    with _Served(ReplayWorker(settings).app()) as served:
        yield served.url


def _documented_method(case: Case) -> bool:
    """False for the requests schemathesis sends with a method the path does not take (405)."""
    return str(case.method).lower() == str(case.operation.method).lower()


# --- the read API ------------------------------------------------------------------------------
read_schema = schemathesis.openapi.from_dict(copy.deepcopy(READ_API))


@read_schema.parametrize()
@_SETTINGS
def test_read_api_with_the_projects_key(case: Case, collector: Running) -> None:
    case.call_and_validate(base_url=collector.http_url, headers=collector.headers(), checks=CHECKS)


@read_schema.parametrize()
@_SETTINGS
def test_read_api_without_a_valid_key(case: Case, collector: Running) -> None:
    response = case.call_and_validate(base_url=collector.http_url, checks=CHECKS)
    assert response.status_code == (401 if _documented_method(case) else 405)


# --- the worker's API --------------------------------------------------------------------------
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection"})
_SIGN = "x-afr-fuzz-sign"
"""Set by the signed schema's ``map_case``; ``before_call`` signs (and drops) it."""


def map_case(context: schemathesis.HookContext, case: Case) -> Case:
    """Marks each hook request the signed schema generates, to be signed when it is sent."""
    if case.path.startswith("/hooks/"):
        headers = CaseInsensitiveDict(case.headers or {})
        headers[_SIGN] = "1"
        case.headers = headers
    return case


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: Case, kwargs: dict[str, Any]) -> None:
    """Signs a marked request with the worker's secret, its body exactly as it will be sent:
    a fresh webhook id, the time now (examples may wait longer than the tolerance to run).

    For every schema: a generated header that frames the request itself ("content-length:
    max_threads", seen once in a full run) is dropped. The HTTP server (h11) answers such a
    request in plain text before the application sees it; the API's contract starts after
    the request is framed."""
    for name in [n for n in case.headers or {} if n.lower() in _FRAMING_HEADERS]:
        del case.headers[name]
    if not case.headers or case.headers.pop(_SIGN, None) is None:
        return
    sent = case.as_transport_kwargs(base_url="http://worker")
    prepared = requests.Request(
        method=sent["method"],
        url=sent["url"],
        headers=sent.get("headers"),
        data=sent.get("data"),
        json=sent.get("json"),
    ).prepare()
    sent_body = prepared.body or b""
    assert isinstance(sent_body, str | bytes), "a JSON body is sent whole"
    body = sent_body.encode() if isinstance(sent_body, str) else sent_body
    webhook_id, timestamp = f"msg_{uuid.uuid4().hex}", int(time.time())
    case.headers["webhook-id"] = webhook_id
    case.headers["webhook-timestamp"] = str(timestamp)
    case.headers["webhook-signature"] = sign(SECRET, webhook_id, timestamp, body)


worker_schema = schemathesis.openapi.from_dict(copy.deepcopy(WORKER_API))
signed_worker_schema = schemathesis.openapi.from_dict(copy.deepcopy(WORKER_API))
signed_worker_schema.hook(map_case)


@worker_schema.parametrize()
@_SETTINGS
def test_worker_api_unsigned_or_badly_signed(case: Case, worker: str) -> None:
    response = case.call_and_validate(base_url=worker, checks=CHECKS)
    if case.path.startswith("/hooks/") and _documented_method(case):
        assert response.status_code in (400, 401, 413), response.text


@signed_worker_schema.parametrize()
@_SETTINGS
def test_worker_api_signed(case: Case, worker: str) -> None:
    response = case.call_and_validate(base_url=worker, checks=CHECKS)
    if case.path.startswith("/hooks/") and _documented_method(case):
        assert response.status_code != 401, response.text


def test_the_documents_are_served(collector: Running, worker: str) -> None:
    assert httpx.get(collector.http_url + "/api/v1/openapi.json").json() == READ_API
    assert httpx.get(worker + "/openapi.json").json() == WORKER_API


# --- what fuzzing found: each was a 500 ----------------------------------------------------
def _signed(body: bytes, timestamp: str | None = None) -> dict[str, str]:
    webhook_id, now = f"msg_{uuid.uuid4().hex}", int(time.time())
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp or str(now),
        "webhook-signature": sign(SECRET, webhook_id, now, body),
        "content-type": "application/json",
    }


def test_a_cursor_of_deeply_nested_json_is_a_400(collector: Running) -> None:
    cursor = base64.urlsafe_b64encode(b"[" * 5000).decode()
    answer = collector.api("/api/v1/runs", cursor=cursor)
    assert answer.status_code == 400
    assert answer.json() == {"error": "invalid cursor"}


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/hooks/replay", b"[" * 100_000, 400),
        ("/hooks/evals", b'{"replay_run_id": ' + b"[" * 100_000, 400),
        ("/hooks/sweeps", b"[" * 100_000, 400),
        ("/hooks/replay", b'{"run_id": "' + b"a" * 32 + b'", "model": "\\ud800"}', 400),
        ("/hooks/sweeps", b'{"slot": "x\\udfff"}', 400),
        ("/hooks/sweeps", b'{"slot": "0001-01-01T00:00:00Z"}', 202),
        ("/hooks/sweeps", b'{"slot": "9999-12-31T23:59:59-23:59"}', 202),
    ],
    ids=[
        "deep-replay",
        "deep-eval",
        "deep-sweep",
        "surrogate-model",
        "surrogate-slot",
        "slot-year-1",
        "slot-year-10000",
    ],
)
def test_signed_hooks_found_by_fuzzing(worker: str, path: str, body: bytes, status: int) -> None:
    answer = httpx.post(worker + path, content=body, headers=_signed(body), timeout=30)
    assert answer.status_code == status, answer.text


def test_a_timestamp_no_float_holds_is_refused_as_unsigned(worker: str) -> None:
    answer = httpx.post(
        worker + "/hooks/sweeps", content=b"{}", headers=_signed(b"{}", "1" + "0" * 400)
    )
    assert answer.status_code == 401
    assert "webhook-timestamp is not unix seconds" in answer.json()["error"]
