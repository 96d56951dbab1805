"""Each error kind of the read API and of the worker answers, through the real handlers, the
status its surface's one mapping gives it; a kind added to a mapping without a case here
fails ``test_every_kind_has_a_case``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from collector.api.failures import FailuresApi
from collector.api.runs import RunsApi
from collector.api.status import STATUS_BY_ERROR as READ_API_STATUSES
from collector.api.status import BadParameter, FailureNotFound, RunNotFound
from collector.auth import Authenticator, KeyStore
from collector.errors import Unauthenticated
from collector.store.failures import FailureFilter, FailureReader
from collector.store.reader import RunFilter, RunReader
from replay_worker import client as collector_client
from replay_worker.app import ReplayWorker
from replay_worker.hooks import models, status
from replay_worker.hooks.signature import generate_secret, sign
from replay_worker.pool import PoolStats
from replay_worker.settings import WorkerSettings
from replay_worker.state import Job, StateStoreUnavailable, Sweep

SECRET = generate_secret()


class Answer(Protocol):
    """What a test client's response is here (starlette's TestClient brings its own httpx)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    @property
    def headers(self) -> Any: ...

    def json(self) -> Any: ...


MISSING = "a" * 32  # the fake collector: no such run
BROKEN = "b" * 32  # the fake collector answers 500
CAPTURE = "c" * 32  # the fake collector: a capture run (gives no eval)


# --- the read API ------------------------------------------------------------------------------
class _NoRuns:
    """A reader of an empty store."""

    def list_runs(self, project: str, flt: RunFilter) -> tuple[list[dict[str, Any]], None]:
        return [], None

    def get_run(self, project: str, run_id: str) -> None:
        return None

    def clusters(self, project: str, flt: FailureFilter) -> tuple[list[dict[str, Any]], None]:
        return [], None

    def cluster(self, project: str, flt: FailureFilter) -> None:
        return None


@pytest.fixture(scope="module")
def read_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    keys = KeyStore(tmp_path_factory.mktemp("keys") / "keys.db")
    key = keys.create("project-a")
    runs = RunsApi(
        cast(RunReader, _NoRuns()),
        Authenticator(keys),
        max_runs=100,
        default_lookback_s=3600,
    )
    failures = FailuresApi(cast(FailureReader, _NoRuns()), Authenticator(keys))
    app = Starlette(
        routes=[
            Route("/api/v1/runs", runs.list_runs),
            Route("/api/v1/runs/{run_id}", runs.get_run),
            Route("/api/v1/runs/{run_id}/otlp", runs.get_run_otlp),
            Route("/api/v1/failures", failures.list_failures),
            Route("/api/v1/failures/{signature}", failures.get_failure),
        ]
    )
    with TestClient(app) as client:
        yield client, key


ReadCase = Callable[[TestClient, str], Answer]
READ_CASES: dict[type[Exception], list[ReadCase]] = {
    BadParameter: [
        lambda c, key: c.get("/api/v1/runs?limit=0", headers={"authorization": f"Bearer {key}"}),
        lambda c, key: c.get("/api/v1/runs?kind=x", headers={"authorization": f"Bearer {key}"}),
        lambda c, key: c.get("/api/v1/runs/not-a-run", headers={"authorization": f"Bearer {key}"}),
        lambda c, key: c.get("/api/v1/failures/xyz", headers={"authorization": f"Bearer {key}"}),
        lambda c, key: c.get(
            "/api/v1/failures?status=weird", headers={"authorization": f"Bearer {key}"}
        ),
    ],
    Unauthenticated: [
        lambda c, key: c.get("/api/v1/runs"),
        lambda c, key: c.get("/api/v1/runs/" + MISSING, headers={"authorization": "Bearer nope"}),
    ],
    RunNotFound: [
        lambda c, key: c.get("/api/v1/runs/" + MISSING, headers={"authorization": f"Bearer {key}"}),
        lambda c, key: c.get(
            f"/api/v1/runs/{MISSING}/otlp", headers={"authorization": f"Bearer {key}"}
        ),
    ],
    FailureNotFound: [
        lambda c, key: c.get(
            "/api/v1/failures/0123456789abcdef", headers={"authorization": f"Bearer {key}"}
        ),
    ],
}


@pytest.mark.parametrize(
    ("kind", "case"),
    [(kind, case) for kind, cases in READ_CASES.items() for case in cases],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_read_api_answers_each_kind_with_its_mapped_status(
    read_api: tuple[TestClient, str], kind: type[Exception], case: ReadCase
) -> None:
    answer = case(*read_api)
    assert answer.status_code == READ_API_STATUSES[kind], answer.text
    assert set(answer.json()) == {"error"} and answer.json()["error"]


def test_read_api_400s_name_the_parameter(read_api: tuple[TestClient, str]) -> None:
    client, key = read_api
    headers = {"authorization": f"Bearer {key}"}
    for parameter, value in [
        ("since", "yesterday"),
        ("until", "inf"),
        ("status", "weird"),
        ("kind", "nightly"),
        ("limit", "0"),
        ("cursor", "%%%"),
        ("source_run_id", "xyz"),
    ]:
        answer = client.get("/api/v1/runs", params={parameter: value}, headers=headers)
        assert answer.status_code == HTTPStatus.BAD_REQUEST
        assert parameter in answer.json()["error"], answer.json()


def test_read_api_401_asks_for_a_bearer_key(read_api: tuple[TestClient, str]) -> None:
    answer = read_api[0].get("/api/v1/runs")
    assert answer.headers["www-authenticate"] == 'Bearer realm="afr"'


# --- the worker ----------------------------------------------------------------------------------
class _FakeCollector(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        run_id = self.path.rsplit("/", 1)[-1]
        body: dict[str, Any]
        if run_id == BROKEN:
            code, body = 500, {"error": "boom"}
        elif run_id == CAPTURE:
            code, body = 200, {"run": {"run_id": CAPTURE, "kind": "capture"}, "spans": []}
        else:
            code, body = 404, {"error": "no such run"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def fake_collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeCollector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, fake_collector: str
) -> Iterator[tuple[TestClient, ReplayWorker]]:
    root = tmp_path_factory.mktemp("worker")
    settings = WorkerSettings(
        data_dir=root / "state",
        evals_dir=root / "evals",  # absent until a test makes it
        collector_url=fake_collector,
        webhook_secret=SecretStr(SECRET),
        run_wait_s=0,
        sweep_enabled=False,
    )
    replay_worker = ReplayWorker(settings)
    with TestClient(replay_worker.app()) as client:
        yield client, replay_worker


def _signed(body: bytes) -> dict[str, str]:
    webhook_id, now = f"msg_{uuid.uuid4().hex}", int(time.time())
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(now),
        "webhook-signature": sign(SECRET, webhook_id, now, body),
        "content-type": "application/json",
    }


def _post(client: TestClient, path: str, payload: object, signed: bool = True) -> Answer:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = _signed(body) if signed else {"content-type": "application/json"}
    return client.post(path, content=body, headers=headers)


def _unhealthy(client: TestClient, replay_worker: ReplayWorker) -> Answer:
    replay_worker.jobs.failure = "the dispatcher stopped (a test says so)"
    try:
        return client.get("/healthz")
    finally:
        replay_worker.jobs.failure = None


WorkerCase = Callable[[TestClient, ReplayWorker], Answer]
WORKER_CASES: dict[type[Exception], list[WorkerCase]] = {
    status.BadRequest: [
        lambda c, w: _post(c, "/hooks/replay", b"[" * 1000),
        lambda c, w: _post(c, "/hooks/replay", {"run_id": "nope"}),
        lambda c, w: _post(c, "/hooks/evals", {}),
        lambda c, w: _post(c, "/hooks/sweeps", {"slot": " "}),
    ],
    status.Unsigned: [
        lambda c, w: _post(c, "/hooks/replay", {"run_id": MISSING}, signed=False),
        lambda c, w: _post(c, "/hooks/sweeps", {}, signed=False),
    ],
    status.NotFound: [
        lambda c, w: c.get("/jobs/no-such-job"),
        lambda c, w: c.get("/sweeps/no-such-sweep"),
    ],
    collector_client.RunNotFound: [
        lambda c, w: _post(c, "/hooks/evals", {"replay_run_id": MISSING}),
        lambda c, w: _post(c, "/hooks/replay", {"run_id": MISSING, "fork": {"step": "llm:1"}}),
    ],
    # A fork is checked against its run before it is queued: this one has no agent span.
    status.Unforkable: [
        lambda c, w: _post(c, "/hooks/replay", {"run_id": CAPTURE, "fork": {"step": "llm:1"}}),
    ],
    status.NoEvalsDirectory: [lambda c, w: _post(c, "/hooks/sweeps", {})],
    status.BodyTooLarge: [
        lambda c, w: _post(c, "/hooks/replay", b" " * (1024 * 1024 + 1), signed=False),
    ],
    status.NoEval: [lambda c, w: _post(c, "/hooks/evals", {"replay_run_id": CAPTURE})],
    collector_client.CollectorUnavailable: [
        lambda c, w: _post(c, "/hooks/evals", {"replay_run_id": BROKEN}),
        lambda c, w: _post(c, "/hooks/replay", {"run_id": BROKEN, "fork": {"step": "llm:1"}}),
    ],
    status.Unhealthy: [_unhealthy],
}


@pytest.mark.parametrize(
    ("kind", "case"),
    [(kind, case) for kind, cases in WORKER_CASES.items() for case in cases],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_worker_answers_each_kind_with_its_mapped_status(
    worker: tuple[TestClient, ReplayWorker], kind: type[Exception], case: WorkerCase
) -> None:
    answer = case(*worker)
    assert answer.status_code == status.STATUS_BY_ERROR[kind], answer.text
    status.body_of(kind).model_validate(answer.json())


def test_every_kind_has_a_case() -> None:
    assert set(READ_CASES) == set(READ_API_STATUSES)
    # StateStoreUnavailable needs a PostgreSQL that goes away: a real one, in
    # tests/unit/replay_worker/test_state_outage_http.py.
    assert set(WORKER_CASES) | {StateStoreUnavailable} == set(status.STATUS_BY_ERROR)


def test_worker_400s_name_the_field(worker: tuple[TestClient, ReplayWorker]) -> None:
    client, _ = worker
    for path, payload, field in [
        ("/hooks/replay", {}, "run_id"),
        ("/hooks/replay", {"run_id": MISSING, "policy": "loose"}, "policy"),
        ("/hooks/replay", {"run_id": MISSING, "model": 3}, "model"),
        ("/hooks/replay", {"run_id": MISSING, "stubs": {"t": 1}}, "stubs"),
        ("/hooks/evals", {"replay_run_id": "x"}, "replay_run_id"),
        ("/hooks/sweeps", {"slot": "x" * 201}, "slot"),
    ]:
        answer = _post(client, path, payload)
        assert answer.status_code == HTTPStatus.BAD_REQUEST
        assert field in answer.json()["error"], answer.json()


# --- what the worker serves is what its models hold -------------------------------------------
def test_a_job_and_a_sweep_are_served_whole(
    worker: tuple[TestClient, ReplayWorker], tmp_path: Path
) -> None:
    """Every key the state store gives a job or a sweep is a field of its model (a key added
    there without the model would be dropped from the wire, and from the document)."""
    client, replay_worker = worker
    accepted = _post(client, "/hooks/replay", {"run_id": MISSING})
    assert accepted.status_code == HTTPStatus.ACCEPTED
    job = replay_worker.jobs.store.get(accepted.json()["job_id"])
    assert isinstance(job, Job)
    assert set(job.to_json()) == set(models.Job.model_fields)
    assert client.get(accepted.json()["status_url"]).json() == models.Job.model_validate(
        job.to_json()
    ).model_dump(mode="json")

    replay_worker.settings.evals_dir.mkdir(exist_ok=True)
    try:
        queued = _post(client, "/hooks/sweeps", {"slot": "contract-test"})
        assert queued.status_code == HTTPStatus.ACCEPTED, queued.text
        sweep = replay_worker.jobs.store.get_sweep(queued.json()["sweep_id"])
        assert isinstance(sweep, Sweep)
        assert set(sweep.to_json()) == set(models.Sweep.model_fields)
    finally:
        replay_worker.settings.evals_dir.rmdir()


def test_health_is_served_whole(worker: tuple[TestClient, ReplayWorker]) -> None:
    _, replay_worker = worker

    async def stats() -> tuple[dict[str, Any], dict[str, Any]]:
        return await replay_worker.jobs.stats(), await replay_worker.sweeps.stats()

    jobs, sweeps = asyncio.run(stats())
    assert set(jobs) | {"ok", "error", "sweeps"} == set(models.Health.model_fields)
    assert set(sweeps) == set(models.SweepStats.model_fields)
    assert {f.name for f in dataclasses.fields(PoolStats)} == set(models.PoolStats.model_fields)
