"""The deploy/compose stack, for real (Docker only): build the image, start ClickHouse, the
collector, the worker and Grafana with the secrets `afr secrets init` generates, send the
seeded failing run to the collector with the generated project key, find it through
Grafana's query API on the provisioned ClickHouse datasource (so the collector applied its
schema to the server and Grafana's read-only user reads it), trigger a replay through the
signed hook with the generated webhook secret, and read the replay's verdict and run.

Skipped where no Docker engine with Compose (>= 2.24.4: ``!override``, optional
``env_file``) runs, as on these machines; tests/deploy/test_compose.py checks the same
files without Docker. The replay's model is the scripted fixing model, served from the afr
image in a service this test adds, so no API key is needed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.demo import REFUND_STUB
from afr.grafana.panels import DATASOURCE_UID, PLUGIN_ID
from afr.secrets_cli import COLLECTOR_KEY, GRAFANA_ADMIN_PASSWORD, WEBHOOK_SECRET
from replay_worker.trigger import request_replay, wait_for_job
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
SECRETS = "/run/afr-secrets"


COMPOSE_AT_LEAST = (2, 24, 4)
"""``!override`` (the test's own ports) and an optional ``env_file`` (the stack's)."""


def _compose_available() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        if subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode != 0:
            return False
        version = subprocess.run(
            [docker, "compose", "version", "--short"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version.stdout.strip())
    if version.returncode != 0 or found is None:
        return False
    return tuple(int(part) for part in found.groups()) >= COMPOSE_AT_LEAST


pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the first build downloads every wheel and three images
    pytest.mark.skipif(
        os.environ.get("AFR_SKIP_DOCKER") == "1" or not _compose_available(),
        reason="needs a Docker engine with Compose >= 2.24.4 to build the afr image and run "
        "deploy/compose (ClickHouse, collector, worker, Grafana); none runs here",
    ),
]

# The scripted fixing model (afr/incident.py), served beyond the container's loopback: the
# class the tests use binds 127.0.0.1 only, so its handler is served from a plain server.
MODEL_SERVER = """
import http.server
from afr.incident import fixed_script
from afr.scripted_model import _Handler, _State
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8080), _Handler)
server.state = _State(turns=list(fixed_script()), per_conversation=True)
server.serve_forever()
"""


def _override() -> str:
    """Another project's ports are not ours: publish on free loopback ports instead of the
    fixed ones (``!override`` replaces the list rather than adding to it), and point the
    worker at the scripted model."""
    q = json.dumps
    return f"""
services:
  model:
    image: afr-server:test
    build: {{context: {q(str(ROOT))}, dockerfile: Dockerfile}}
    command: ["python", "-c", {q(MODEL_SERVER)}]
    healthcheck: {{disable: true}}
  collector:
    ports: !override ["127.0.0.1::4317", "127.0.0.1::4318"]
  worker:
    ports: !override ["127.0.0.1::8787"]
    depends_on:
      model: {{condition: service_started}}
    environment:
      AFR_WORKER_MODEL_BASE_URL: http://model:8080/v1
      AFR_WORKER_MODEL_API_KEY: scripted-no-key
      AFR_SWEEP_ENABLED: "false"
  grafana:
    ports: !override ["127.0.0.1::3000"]
"""


@dataclass
class Stack:
    compose: Any  # testcontainers.compose.DockerCompose
    collector_http: str
    collector_grpc: str
    worker: str
    grafana: str

    def secret(self, name: str) -> str:
        stdout, stderr, code = self.compose.exec_in_container(
            ["cat", f"{SECRETS}/{name}"], service_name="collector"
        )
        assert code == 0, f"cannot read the generated secret {name}: {stderr}"
        value = str(stdout).strip()
        assert value, name
        return value


def _until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    wait_until(check, timeout_s=timeout_s, what=what, interval_s=2, ignoring=(httpx.HTTPError,))


def _answers(url: str) -> Callable[[], bool]:
    return lambda: httpx.get(url, timeout=5).status_code == 200


def _url(compose: Any, service: str, port: int) -> str:
    published = compose.get_service_port(service, port)
    assert published, f"{service}:{port} is not published"
    return f"http://127.0.0.1:{published}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from testcontainers.compose import DockerCompose

    override = tmp_path_factory.mktemp("compose") / "override.yaml"
    override.write_text(_override())
    compose = DockerCompose(
        context=str(COMPOSE_DIR),
        compose_file_name=["compose.yaml", str(override)],
        build=True,
        wait=False,  # the one-shot `secrets` service exits: health is polled below instead
        keep_volumes=False,
    )
    # A project of its own: never the volumes of an afr stack running on this machine.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COMPOSE_PROJECT_NAME", f"afr-test-{uuid.uuid4().hex[:8]}")
        try:
            compose.start()  # up --build --detach: each service after what it depends on
            stack = Stack(
                compose,
                collector_http=_url(compose, "collector", 4318),
                collector_grpc=_url(compose, "collector", 4317),
                worker=_url(compose, "worker", 8787),
                grafana=_url(compose, "grafana", 3000),
            )
            for name, url in (
                ("collector", f"{stack.collector_http}/healthz"),
                ("worker", f"{stack.worker}/healthz"),
                ("grafana", f"{stack.grafana}/api/health"),
            ):
                _until(name, _answers(url), 300)
            yield stack
        except BaseException:
            stdout, stderr = compose.get_logs()
            print(stdout[-20_000:], stderr[-5_000:], file=sys.stderr)
            raise
        finally:
            compose.stop()


def _seed(stack: Stack, key: str) -> str:
    """`afr seed` in a process of its own (the bridge's processor is process-global), with
    the generated key, as an agent app would send it."""
    environment = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {key}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "afr.cli", "seed", "--endpoint", stack.collector_grpc],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("run id: ")]
    return line.removeprefix("run id: ").strip()


def _grafana_rows(stack: Stack, admin_password: str, sql: str) -> list[list[Any]]:
    """Rows of a query through Grafana's query API on the provisioned datasource."""
    now_ms = int(time.time() * 1000)
    body = {
        "queries": [
            {
                "refId": "A",
                "datasource": {"type": PLUGIN_ID, "uid": DATASOURCE_UID},
                "editorType": "sql",
                "rawSql": sql,
                "format": 1,
            }
        ],
        "from": str(now_ms - 3_600_000),
        "to": str(now_ms + 60_000),
    }
    response = httpx.post(
        f"{stack.grafana}/api/ds/query", json=body, auth=("admin", admin_password), timeout=60
    )
    assert response.status_code == 200, response.text
    result = response.json()["results"]["A"]
    assert "error" not in result, result.get("error")
    frames = result.get("frames", [])
    if not frames:
        return []
    values: list[list[Any]] = frames[0]["data"]["values"]
    return [list(row) for row in zip(*values, strict=True)]


def test_a_seeded_run_is_stored_shown_in_grafana_and_replayed(stack: Stack) -> None:
    key = stack.secret(COLLECTOR_KEY)
    headers = {"authorization": f"Bearer {key}"}
    run_id = _seed(stack, key)

    # stored: the read API answers with the failing run
    run: dict[str, Any] = {}

    def stored() -> bool:
        response = httpx.get(
            f"{stack.collector_http}/api/v1/runs/{run_id}", headers=headers, timeout=10
        )
        if response.status_code != 200:
            return False
        run.update(response.json()["run"])
        return True

    _until("the seeded run in the read API", stored, 60)
    assert run["status"].lower() == "error"
    assert run["span_count"] == 13

    # in Grafana, through the provisioned datasource and its read-only user
    admin = stack.secret(GRAFANA_ADMIN_PASSWORD)

    def datasource_healthy() -> bool:  # the plugin may still be installing
        health = httpx.get(
            f"{stack.grafana}/api/datasources/uid/{DATASOURCE_UID}/health",
            auth=("admin", admin),
            timeout=30,
        )
        return health.status_code == 200 and health.json().get("status") == "OK"

    _until("the provisioned datasource reaching ClickHouse", datasource_healthy, 180)
    assert re.fullmatch(r"[0-9a-f]{32}", run_id), run_id
    count = "SELECT uniqExact(SpanId) AS spans, countIf(StatusCode = 'Error') AS errors"
    where = f"WHERE TraceId = '{run_id}'"  # 32 hex digits, checked above
    rows = _grafana_rows(stack, admin, f"{count} FROM afr.otel_traces {where}")
    assert rows == [[13, 1]], rows
    # ... and that user cannot write
    refused = httpx.post(
        f"{stack.grafana}/api/ds/query",
        json={
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": PLUGIN_ID, "uid": DATASOURCE_UID},
                    "editorType": "sql",
                    "rawSql": "DROP TABLE afr.otel_traces",
                    "format": 1,
                }
            ]
        },
        auth=("admin", admin),
        timeout=60,
    )
    assert "error" in refused.json()["results"]["A"], refused.text

    # replayed through the signed hook, with the generated secret
    secret = stack.secret(WEBHOOK_SECRET)
    accepted = request_replay(stack.worker, secret, run_id, stubs={"refund_order": REFUND_STUB})
    job = wait_for_job(stack.worker, accepted["job_id"], 300)
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["verdict"] == "FAILURE_FIXED", result
    unsigned = httpx.post(f"{stack.worker}/hooks/replay", json={"run_id": run_id}, timeout=10)
    assert unsigned.status_code == 401

    replay: dict[str, Any] = {}

    def replay_stored() -> bool:
        response = httpx.get(
            f"{stack.collector_http}/api/v1/runs/{result['replay_run_id']}",
            headers=headers,
            timeout=10,
        )
        if response.status_code != 200:
            return False
        replay.update(response.json()["run"])
        return True

    _until("the replay run in the read API", replay_stored, 60)
    assert (replay["kind"], replay["source_run_id"]) == ("replay", run_id)
