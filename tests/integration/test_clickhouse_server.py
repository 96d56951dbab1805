"""The same DDL, SQL and pipeline on a real ClickHouse server (docker only).

Skipped where no Docker engine runs (these machines): the embedded engine (chDB) covers the
same code everywhere else; this proves the server path through the same client.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from collector.server import CollectorThread
from collector.settings import CollectorSettings
from collector.store.client import ClickHouseStore
from collector.store.schema import MIGRATIONS
from tests.docker_engine import docker_available
from tests.integration.conftest import Running
from tests.integration.test_collector_ingest import TRACE, _grpc_export, _request, _span

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not docker_available(),
        reason="needs a Docker engine to run clickhouse/clickhouse-server; none runs here",
    ),
]


def test_collector_on_a_clickhouse_server(tmp_path: Path) -> None:
    from testcontainers.community.clickhouse import ClickHouseContainer

    with ClickHouseContainer("clickhouse/clickhouse-server:25.8", port=8123) as server:
        host, port = server.get_container_host_ip(), server.get_exposed_port(8123)
        dsn = f"http://{server.username}:{server.password}@{host}:{port}/default"
        settings = CollectorSettings(
            data_dir=tmp_path, clickhouse_url=dsn, grpc_port=0, http_port=0
        )
        store = ClickHouseStore(dsn, settings.database)
        assert store.migrate() == [m.version for m in MIGRATIONS]
        assert store.migrate() == [], "migrations apply once"
        with CollectorThread(settings) as collector:
            key = collector.keys.create("shop")
            running = Running(collector, key, settings, store=None)  # type: ignore[arg-type]
            request = _request(_span(TRACE, bytes.fromhex("1212121212121212"), "on a server"))
            code, _, _ = _grpc_export(running, request)
            assert code == grpc.StatusCode.OK
            body = running.run(TRACE.hex())
        assert body["spans"][0]["name"] == "on a server"
