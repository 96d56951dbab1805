"""Per-project read access on a real ClickHouse server (docker only): ``afr sql-users create``
makes a server user with row policies, and the same adversarial matrix as on the embedded
store (tests/integration/test_sql_tenancy.py) is sent to the server as that user, over HTTP
as Grafana's datasource sends it. Skipped where no Docker engine runs (these machines)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from afr.sql_users_cli import create_sql_user
from collector.server import CollectorThread
from collector.settings import CollectorSettings
from collector.store.client import ClickHouseStore
from tests.docker_engine import docker_available
from tests.integration.conftest import Running
from tests.integration.test_sql_tenancy import MARKER, REFUSED, SCOPED, THEIRS, _export

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not docker_available(),
        reason="needs a Docker engine to run clickhouse/clickhouse-server; none runs here",
    ),
]


@dataclass
class Server:
    url: str
    user: str
    password: str
    our_trace: str
    their_trace: str

    def post(self, sql: str, params: dict[str, str] | None = None) -> httpx.Response:
        return httpx.post(
            self.url,
            params={"database": "afr", **(params or {})},
            content=sql,
            auth=(self.user, self.password),
            timeout=30,
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from testcontainers.community.clickhouse import ClickHouseContainer

    data_dir = Path(tmp_path_factory.mktemp("server-tenancy"))
    with ClickHouseContainer("clickhouse/clickhouse-server:25.8", port=8123) as container:
        host, port = container.get_container_host_ip(), container.get_exposed_port(8123)
        dsn = f"http://{container.username}:{container.password}@{host}:{port}/default"
        settings = CollectorSettings(
            data_dir=data_dir, clickhouse_url=dsn, grpc_port=0, http_port=0
        )
        store = ClickHouseStore(dsn, settings.database)
        store.migrate()
        with CollectorThread(settings) as collector:
            ours = collector.keys.create("shop")
            theirs = collector.keys.create(THEIRS)
            running = Running(collector, ours, settings, store=None)  # type: ignore[arg-type]
            our_trace = _export(running, ours, "checkout", "ours")
            their_trace = _export(running, theirs, "billing", MARKER)
            running.run(our_trace)
            running.run(their_trace, theirs)
        created = create_sql_user(settings, "shop", None, replace=False)
        yield Server(
            f"http://{host}:{port}/", created.user, created.password, our_trace, their_trace
        )


def _leaks(server: Server, text: str) -> bool:
    return any(s in text for s in (MARKER, server.their_trace, THEIRS, "billing"))


@pytest.mark.parametrize("sql", SCOPED)
def test_row_policies_keep_a_project_user_to_its_rows(server: Server, sql: str) -> None:
    response = server.post(sql.format(their=server.their_trace))
    assert not _leaks(server, response.text), response.text


@pytest.mark.parametrize(("sql", "code"), REFUSED)
def test_reads_around_the_policies_are_refused_or_empty(
    server: Server, sql: str, code: object
) -> None:
    response = server.post(sql)
    assert not _leaks(server, response.text), response.text


def test_the_project_user_reads_its_own_runs(server: Server) -> None:
    response = server.post("SELECT DISTINCT ProjectId FROM afr.otel_traces")
    assert response.text == "shop\n"
    trace = server.post(f"SELECT count() FROM afr.traces WHERE TraceId = '{server.our_trace}'")  # noqa: S608
    assert trace.text == "2\n"
