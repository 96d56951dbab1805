"""A worker whose shared state store (PostgreSQL) goes away answers 503 with the reason, never
the password, on every route that needs the store, and recovers by itself when it is back."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from replay_worker.app import ReplayWorker
from replay_worker.hooks import models
from replay_worker.hooks.signature import generate_secret, sign
from replay_worker.settings import WorkerSettings
from tests.postgres import PostgresServer

SECRET = generate_secret()
RUN_ID = "ab" * 16


def _set_reachable(server: PostgresServer, database: str, reachable: bool) -> None:
    """Closes the database to new connections and ends the worker's: as a server that went
    down, from the worker's side (the session-wide server itself keeps running)."""
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(
            f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {str(reachable).lower()}'
        )
        if not reachable:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database,),
            )


@pytest.fixture
def worker(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TestClient, str, str]]:
    url = postgres_server.create_database()
    root = tmp_path_factory.mktemp("worker")
    settings = WorkerSettings(
        data_dir=root / "state",
        collector_url="http://127.0.0.1:9",  # never reached: no job is run
        webhook_secret=SecretStr(SECRET),
        state_url=SecretStr(url),
        run_wait_s=0,
        sweep_enabled=False,
        concurrency=1,
    )
    replay_worker = ReplayWorker(settings)
    database = url.rsplit("/", 1)[1]
    with TestClient(replay_worker.app()) as client:
        try:
            yield client, database, url
        finally:
            _set_reachable(postgres_server, database, True)


def _signed_replay(client: TestClient) -> tuple[int, dict[str, object]]:
    body = json.dumps({"run_id": RUN_ID}).encode()
    webhook_id, now = f"msg_{uuid.uuid4().hex}", int(time.time())
    response = client.post(
        "/hooks/replay",
        content=body,
        headers={
            "webhook-id": webhook_id,
            "webhook-timestamp": str(now),
            "webhook-signature": sign(SECRET, webhook_id, now, body),
            "content-type": "application/json",
        },
    )
    return response.status_code, response.json()


def test_an_unreachable_state_store_is_503_with_the_reason_and_heals(
    worker: tuple[TestClient, str, str], postgres_server: PostgresServer
) -> None:
    client, database, url = worker
    password = url.split(":")[2].split("@")[0]
    assert client.get("/healthz").status_code == 200

    _set_reachable(postgres_server, database, False)
    health = client.get("/healthz")
    assert health.status_code == 503
    report = models.Health.model_validate(health.json())
    assert report.ok is False and report.error and "***@" in report.error
    assert report.jobs is None, "no figures are made up while the store is away"
    answers = [
        (client.get("/jobs/job_x").status_code, client.get("/jobs/job_x").json()),
        (client.get("/sweeps/sweep_x").status_code, client.get("/sweeps/sweep_x").json()),
        _signed_replay(client),
    ]
    for code, body in answers:
        assert code == 503, body
        error = models.Error.model_validate(body).error
        assert "***@" in error and password not in error

    _set_reachable(postgres_server, database, True)
    assert client.get("/healthz").status_code == 200
    code, body = _signed_replay(client)
    assert code == 202, body
    assert client.get(f"{body['status_url']}").status_code == 200
