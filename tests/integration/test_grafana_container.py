"""afr's dashboards in a real Grafana with the ClickHouse plugin, over a ClickHouse server
(docker only): ``afr grafana push`` provisions the datasource and the dashboards, a collector
on the server stores the seeded runs, and every panel's query, sent through Grafana's query
API as a dashboard sends it, answers with the frame its panel needs.

Skipped where no Docker engine runs (these machines): tests/integration/test_dashboards_sql.py
runs the same queries on the embedded engine everywhere else. Grafana's query API expands
only the plugin's backend macros; the template variables and ``$__conditionalAll`` (done by
the plugin's frontend in a browser) are applied here first, as the dashboard would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.cli import main
from afr.grafana.dashboards import RUN_UID, RUNS_UID, build_all
from afr.grafana.interpolate import (
    TimeRange,
    Variable,
    conditional_all,
    replace_variables,
    resolve_variables,
)
from afr.grafana.panels import DATASOURCE_UID, PLUGIN_ID, PLUGIN_VERSION
from tests.docker_engine import docker_available
from tests.integration.conftest import Running, start_collector
from tests.integration.grafana_world import Seeded, seed
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(
        not docker_available(),
        reason="needs a Docker engine to run grafana/grafana and clickhouse/clickhouse-server; "
        "none runs here",
    ),
]

GRAFANA_IMAGE = os.environ.get("AFR_TEST_GRAFANA_IMAGE", "grafana/grafana:12.1.0")
CLICKHOUSE_IMAGE = "clickhouse/clickhouse-server:25.8"
ADMIN = ("admin", "admin")
DASHBOARDS = build_all()


@dataclass
class Stack:
    grafana_url: str
    token: str
    running: Running
    seeded: Seeded
    time_range: TimeRange

    def query(self, sql: str, fmt: int = 1) -> list[dict[str, Any]]:
        """The frames Grafana's query API answers for one SQL query of the datasource."""
        body = {
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": PLUGIN_ID, "uid": DATASOURCE_UID},
                    "editorType": "sql",
                    "rawSql": sql,
                    "format": fmt,
                    "intervalMs": int(self.time_range.interval.total_seconds() * 1000),
                    "maxDataPoints": 1000,
                }
            ],
            "from": str(int(self.time_range.start.timestamp() * 1000)),
            "to": str(int(self.time_range.end.timestamp() * 1000)),
        }
        response = httpx.post(
            f"{self.grafana_url}/api/ds/query",
            json=body,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        result = response.json()["results"]["A"]
        assert "error" not in result, result.get("error")
        frames: list[dict[str, Any]] = result.get("frames", [])
        return frames

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        frames = self.query(sql)
        if not frames:
            return []
        values = frames[0]["data"]["values"]
        return list(zip(*values, strict=True))

    def frontend(self, sql: str, variables: dict[str, Variable]) -> str:
        """What the dashboard's frontend sends: $__conditionalAll and variables applied."""
        return replace_variables(conditional_all(sql, variables), variables)


def _wait_for_grafana(url: str, timeout_s: float = 180) -> None:
    def started() -> bool:
        health = httpx.get(f"{url}/api/health", timeout=5)
        plugin = httpx.get(f"{url}/api/plugins/{PLUGIN_ID}/settings", auth=ADMIN, timeout=5)
        return health.status_code == 200 and plugin.status_code == 200

    wait_until(
        started,
        timeout_s=timeout_s,
        what="Grafana (with the ClickHouse plugin) to start",
        interval_s=1,
        ignoring=(httpx.HTTPError,),
    )


def _service_account_token(url: str) -> str:
    account = httpx.post(
        f"{url}/api/serviceaccounts", auth=ADMIN, json={"name": "afr", "role": "Admin"}, timeout=10
    )
    assert account.status_code == 201, account.text
    token = httpx.post(
        f"{url}/api/serviceaccounts/{account.json()['id']}/tokens",
        auth=ADMIN,
        json={"name": "afr-push"},
        timeout=10,
    )
    assert token.status_code == 200, token.text
    key: str = token.json()["key"]
    return key


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from testcontainers.community.clickhouse import ClickHouseContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

    root: Path = tmp_path_factory.mktemp("grafana")
    with (
        Network() as network,
        ClickHouseContainer(CLICKHOUSE_IMAGE, port=8123)
        .with_network(network)
        .with_network_aliases("clickhouse") as clickhouse,
        DockerContainer(GRAFANA_IMAGE)
        .with_network(network)
        .with_env("GF_PLUGINS_PREINSTALL_SYNC", f"{PLUGIN_ID}@{PLUGIN_VERSION}")
        .with_env("GF_SECURITY_ADMIN_PASSWORD", ADMIN[1])
        .with_exposed_ports(3000) as grafana,
    ):
        host, port = clickhouse.get_container_host_ip(), clickhouse.get_exposed_port(8123)
        user, password = clickhouse.username, clickhouse.password
        dsn = f"http://{user}:{password}@{host}:{port}/default"
        thread, running = start_collector(root / "data", clickhouse_url=dsn)
        try:
            seeded = seed(running)
            url = f"http://{grafana.get_container_host_ip()}:{grafana.get_exposed_port(3000)}"
            _wait_for_grafana(url)
            token = _service_account_token(url)
            assert (
                main(
                    [
                        "grafana",
                        "push",
                        "--url",
                        url,
                        "--token",
                        token,
                        "--clickhouse-url",
                        f"http://{user}:{password}@clickhouse:8123",
                    ]
                )
                == 0
            ), "pushed, and Grafana reaches ClickHouse"
            now = datetime.now(UTC)
            yield Stack(
                url,
                token,
                running,
                seeded,
                TimeRange(now - timedelta(hours=1), now + timedelta(minutes=1)),
            )
        finally:
            thread.stop()


def test_the_pushed_dashboards_are_in_grafana(stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    for uid in DASHBOARDS:
        stored = httpx.get(f"{stack.grafana_url}/api/dashboards/uid/{uid}", headers=headers)
        assert stored.status_code == 200
        assert stored.json()["meta"]["folderUid"] == "afr"
    health = httpx.get(
        f"{stack.grafana_url}/api/datasources/uid/{DATASOURCE_UID}/health", headers=headers
    )
    assert health.json()["status"] == "OK"


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_every_panel_answers_through_grafana(stack: Stack, uid: str) -> None:
    chosen = {"run_id": stack.seeded.source_run_id, "project": "shop"} if uid == RUN_UID else {}
    variables = resolve_variables(
        DASHBOARDS[uid], stack.rows, stack.time_range, chosen, macros=False
    )
    for panel in DASHBOARDS[uid]["panels"]:
        (target,) = panel["targets"]
        frames = stack.query(stack.frontend(target["rawSql"], variables), target["format"])
        assert frames, f"{uid} / {panel['title']}: no frame"
        fields = [f["name"] for f in frames[0]["schema"]["fields"]]
        if panel["type"] == "traces":
            meta = frames[0]["schema"].get("meta", {})
            assert meta.get("preferredVisualisationType") == "trace", meta
            assert {"traceID", "spanID", "parentSpanID", "startTime", "duration"} <= set(fields)
            assert len(frames[0]["data"]["values"][0]) == 13, "each span once"
        elif panel["type"] == "timeseries":
            assert any("time" in f.lower() for f in fields), fields


def test_the_recent_runs_table_names_the_failing_span(stack: Stack) -> None:
    variables = resolve_variables(
        DASHBOARDS[RUNS_UID], stack.rows, stack.time_range, {"project": "shop"}, macros=False
    )
    (panel,) = [p for p in DASHBOARDS[RUNS_UID]["panels"] if p["title"] == "Recent runs"]
    (frame,) = stack.query(stack.frontend(panel["targets"][0]["rawSql"], variables))
    names = [f["name"] for f in frame["schema"]["fields"]]
    rows = [dict(zip(names, r, strict=True)) for r in zip(*frame["data"]["values"], strict=True)]
    by_id = {r["run_id"]: r for r in rows}
    source = by_id[stack.seeded.source_run_id]
    assert (source["failing_span_name"], source["span_count"]) == ("execute_tool refund_order", 13)
    assert by_id[stack.seeded.replay_run_id]["verdict"] == "FAILURE_FIXED"
