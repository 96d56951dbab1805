"""Two collectors on a ClickHouse cluster: two shards, one ClickHouse Keeper (docker only).

The schema is what ``afr schema --cluster afr --shards 2`` prints, applied once on one node
(ON CLUSTER); each node's configuration is what ``afr schema --config xml`` prints, with the
node's own macros. Both collectors receive the same spans (every span delivered twice, once
through each): the cluster stores both deliveries, on the same shard, and reads (``FINAL``,
the run summary, the read API of either collector) count each span once.

Skipped where no Docker engine runs (these machines): tests/unit/collector/test_cluster_schema.py
parses every statement and runs the same tables, without Keeper and replication, on the
embedded engine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from afr.cli import main
from collector.server import CollectorThread
from collector.settings import CollectorSettings
from collector.store.client import ClickHouseStore
from collector.store.cluster import ClusterSchemaError, remote_servers_config
from tests.docker_engine import docker_available
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(
        not docker_available(),
        reason="needs a Docker engine to run a ClickHouse cluster (2 clickhouse/clickhouse-server "
        "shards, 1 clickhouse/clickhouse-keeper); none runs here. The embedded engine checks "
        "the cluster schema in tests/unit/collector/test_cluster_schema.py",
    ),
]

CLICKHOUSE_IMAGE = os.environ.get("AFR_TEST_CLICKHOUSE_IMAGE", "clickhouse/clickhouse-server:25.8")
KEEPER_IMAGE = os.environ.get("AFR_TEST_KEEPER_IMAGE", "clickhouse/clickhouse-keeper:25.8")
CLUSTER = "afr"
NODES = ("ch1", "ch2")  # shard 1, shard 2; one replica each
HTTP_PORT = 8123

KEEPER_CONFIG = """<clickhouse>
    <listen_host>0.0.0.0</listen_host>
    <logger><level>information</level><console>1</console></logger>
    <keeper_server>
        <tcp_port>9181</tcp_port>
        <server_id>1</server_id>
        <log_storage_path>/var/lib/clickhouse-keeper/coordination/log</log_storage_path>
        <snapshot_storage_path>/var/lib/clickhouse-keeper/coordination/snapshots</snapshot_storage_path>
        <coordination_settings>
            <operation_timeout_ms>10000</operation_timeout_ms>
            <session_timeout_ms>30000</session_timeout_ms>
        </coordination_settings>
        <raft_configuration>
            <server><id>1</id><hostname>localhost</hostname><port>9234</port></server>
        </raft_configuration>
    </keeper_server>
</clickhouse>
"""

TRACES = [f"{0xA0 + n:02x}" * 16 for n in range(16)]
SPANS_PER_TRACE = 3


def _node_config(shard: int, host: str) -> str:
    """``afr schema --config xml``'s file, with this node's macros (the file shows shard 1's)."""
    text = remote_servers_config(CLUSTER, [[node] for node in NODES], fmt="xml")
    first = f"<macros><shard>1</shard><replica>{NODES[0]}</replica></macros>"
    assert first in text
    return text.replace(first, f"<macros><shard>{shard}</shard><replica>{host}</replica></macros>")


@dataclass
class Cluster:
    urls: dict[str, str]
    """Node -> its HTTP URL from this machine."""

    def query(self, node: str, sql: str) -> list[list[Any]]:
        import clickhouse_connect

        client = clickhouse_connect.get_client(dsn=self.urls[node])
        try:
            return [list(row) for row in client.query(sql).result_rows]
        finally:
            client.close()

    def command(self, node: str, sql: str) -> None:
        import clickhouse_connect

        client = clickhouse_connect.get_client(dsn=self.urls[node])
        try:
            client.command(sql)
        finally:
            client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

    configs = tmp_path_factory.mktemp("cluster-config")
    keeper_file = configs / "keeper.xml"
    keeper_file.write_text(KEEPER_CONFIG)
    keeper_file.chmod(0o644)  # read by the image's clickhouse user
    with Network() as network:
        keeper = (
            DockerContainer(KEEPER_IMAGE)
            .with_network(network)
            .with_network_aliases("keeper")
            .with_env("KEEPER_CONFIG", "/etc/clickhouse-keeper/keeper_config.xml")
            .with_volume_mapping(str(keeper_file), "/etc/clickhouse-keeper/keeper_config.xml")
        )
        nodes = []
        for shard, host in enumerate(NODES, start=1):
            config = configs / f"{host}.xml"
            config.write_text(_node_config(shard, host))
            config.chmod(0o644)
            nodes.append(
                DockerContainer(CLICKHOUSE_IMAGE)
                .with_network(network)
                .with_network_aliases(host)
                .with_env("CLICKHOUSE_SKIP_USER_SETUP", "1")  # default user, no password
                .with_volume_mapping(str(config), "/etc/clickhouse-server/config.d/afr.xml")
                .with_exposed_ports(HTTP_PORT)
            )
        with keeper, nodes[0] as first, nodes[1] as second:
            urls = {
                host: f"http://{node.get_container_host_ip()}:{node.get_exposed_port(HTTP_PORT)}"
                for host, node in zip(NODES, (first, second), strict=True)
            }
            running = Cluster(urls)
            for host, url in urls.items():

                def pinged(url: str = url) -> bool:
                    return httpx.get(f"{url}/ping").text.strip() == "Ok."

                def keeper_reached(host: str = host) -> bool:
                    rows = running.query(
                        host, "SELECT count() FROM system.zookeeper WHERE path = '/'"
                    )
                    return bool(rows)

                # A node still starting refuses connections or Keeper sessions: not yet.
                for check, what in (
                    (pinged, f"{host} to answer /ping"),
                    (keeper_reached, f"{host} to reach Keeper"),
                ):
                    wait_until(check, timeout_s=90, what=what, interval_s=1, ignoring=(Exception,))
            yield running


def _schema(capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["schema", "--cluster", CLUSTER, "--shards", "2", "--database", "afr"]) == 0
    script = capsys.readouterr().out
    return [statement.strip() for statement in script.split(";\n\n") if statement.strip()]


def _export(trace_id: str) -> bytes:
    now_ns = time.time_ns() - 3600 * 1_000_000_000  # inside the read API's default window
    spans = [
        trace_pb2.Span(
            trace_id=bytes.fromhex(trace_id),
            span_id=bytes.fromhex(f"{n + 1:016x}"),
            parent_span_id=b"" if n == 0 else bytes.fromhex(f"{1:016x}"),
            name=f"step {n}",
            start_time_unix_nano=now_ns + n * 1_000_000,
            end_time_unix_nano=now_ns + (n + 1) * 1_000_000,
        )
        for n in range(SPANS_PER_TRACE)
    ]
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=spans)])]
    )
    body: bytes = request.SerializeToString()
    return body


def test_two_collectors_store_each_span_once_on_the_cluster(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for statement in _schema(capsys):
        cluster.command(NODES[0], statement)
    for host in NODES:  # the versions recorded on ch1, which each collector checks on its node
        cluster.command(host, "SYSTEM SYNC REPLICA afr.schema_migrations")
    for host in NODES:  # both deliveries stay stored until read: reads must fold them
        cluster.command(host, "SYSTEM STOP MERGES afr.otel_traces_local")
    threads = [
        CollectorThread(
            CollectorSettings(
                data_dir=tmp_path / host,
                clickhouse_url=cluster.urls[host] + "/default",
                clickhouse_cluster=CLUSTER,
                grpc_port=0,
                http_port=0,
                auth_enabled=False,  # both store as project "default"
                batch_interval_s=0.2,
            )
        )
        for host in NODES
    ]
    collectors = [thread.__enter__() for thread in threads]
    try:
        for collector in collectors:
            for trace_id in TRACES:
                response = httpx.post(
                    f"http://127.0.0.1:{collector.http_port}/v1/traces",
                    content=_export(trace_id),
                    headers={"content-type": "application/x-protobuf"},
                    timeout=30,
                )
                assert response.status_code == 200, response.text
        for collector in collectors:
            assert collector.flush()

        spans = len(TRACES) * SPANS_PER_TRACE
        for host in NODES:  # any node reads the whole cluster
            stored = cluster.query(host, "SELECT count() FROM afr.otel_traces")[0][0]
            assert stored == 2 * spans, "both deliveries are stored"
            final = cluster.query(host, "SELECT count() FROM afr.otel_traces FINAL")[0][0]
            assert final == spans, "and counted once"
        per_shard = [
            cluster.query(host, "SELECT count() FROM afr.otel_traces_local")[0][0] for host in NODES
        ]
        assert all(per_shard) and sum(per_shard) == 2 * spans, per_shard
        split = cluster.query(
            NODES[0],
            "SELECT TraceId, SpanId FROM afr.otel_traces GROUP BY TraceId, SpanId "
            "HAVING uniqExact(_shard_num) > 1",
        )
        assert split == [], "every delivery of a span lands on its run's shard"
        summary = cluster.query(
            NODES[1], "SELECT run_id, span_count FROM afr.run_summary ORDER BY run_id"
        )
        assert summary == [[trace_id, SPANS_PER_TRACE] for trace_id in sorted(TRACES)]

        for collector in collectors:  # the read API through the Distributed tables
            base = f"http://127.0.0.1:{collector.http_port}/api/v1/runs"
            listed = httpx.get(base, params={"limit": 100}, timeout=30).json()["runs"]
            assert sorted((r["run_id"], r["span_count"]) for r in listed) == sorted(
                (trace_id, SPANS_PER_TRACE) for trace_id in TRACES
            )
            errors = httpx.get(base, params={"status": "error"}, timeout=30).json()["runs"]
            assert errors == []  # an IN subquery over the Distributed runs table
            detail = httpx.get(f"{base}/{TRACES[0]}", timeout=30).json()
            assert [span["name"] for span in detail["spans"]] == [
                f"step {n}" for n in range(SPANS_PER_TRACE)
            ]
    finally:
        for thread in threads:
            thread.stop()


def test_the_collector_refuses_a_cluster_without_the_schema(cluster: Cluster) -> None:
    store = ClickHouseStore(cluster.urls[NODES[0]], "not_applied", cluster=CLUSTER)
    try:
        with pytest.raises(ClusterSchemaError, match="afr schema --cluster afr"):
            store.migrate()
        assert cluster.query(NODES[0], "SHOW DATABASES LIKE 'not_applied'") == []
    finally:
        store.close()
