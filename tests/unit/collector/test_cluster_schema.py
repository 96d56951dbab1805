"""``afr schema --cluster``: every object of the single-node schema has its cluster form, every
statement parses, and the cluster's tables work (collector writes, reader reads) on the
embedded engine.

chDB runs no Keeper and no ``ON CLUSTER``, but its parser is ClickHouse's
(``formatQuery``), and it runs the cluster's DDL without replication
(``cluster_statements(replicated=False)``) over a one-shard cluster on this process, so the
Distributed tables, the materialized views on the local tables and the reader's queries
through them (``FINAL``, ``IN`` subqueries, the two-step page) run for real. Several shards,
Keeper and two collectors: tests/docker/test_cluster.py.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import chdb
import pytest
import yaml

from afr.cli import main
from collector.blocks import encode_block
from collector.store import cluster as cluster_module
from collector.store.client import ClickHouseStore
from collector.store.cluster import (
    EVERYWHERE_TABLES,
    LOCAL_SUFFIX,
    SHARDED_TABLES,
    ClusterSchemaError,
    NoClusterForm,
    check_cluster_schema,
    cluster_statements,
    remote_servers_config,
    single_node_statements,
)
from collector.store.reader import RunFilter, RunReader
from collector.store.schema import MIGRATIONS, Migration, migrations
from tests.integration.test_run_summary import BASE_NS, BOOK, NS, PRICES, PROJECTS, _random_run

CLUSTER = "afr_test"
MIRRORED = "afr_mirrored"
SINGLE = "single"
CLUSTERED = "clustered"
MIRRORED_DB = "mirrored"

# chDB listens nowhere: a shard on localhost at the configured tcp_port is this process.
# CLUSTER has one shard. MIRRORED has two, both this process, so both read the same local
# tables: each row is read twice (the run summary's merges are idempotent, so its figures
# stay exact) and a query over it is planned as over two shards (a double-distributed
# `IN` subquery is refused unless the session allows it). Macros as a real node has them.
_CONFIG = f"""<clickhouse>
    <tcp_port>9000</tcp_port>
    <remote_servers>
        <{CLUSTER}>
            <shard><replica><host>localhost</host><port>9000</port></replica></shard>
        </{CLUSTER}>
        <{MIRRORED}>
            <shard><replica><host>localhost</host><port>9000</port></replica></shard>
            <shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard>
        </{MIRRORED}>
    </remote_servers>
    <macros><shard>1</shard><replica>r1</replica></macros>
</clickhouse>
"""


class Engine:
    """One chDB engine holding the single-node schema (``SINGLE``) and the cluster's, without
    replication (``CLUSTERED``), both written with the same spans."""

    def __init__(self, path: Path) -> None:
        config = path / "config.xml"
        config.write_text(_CONFIG)
        # The first connection starts the engine with the cluster's configuration; the
        # stores opened on the same path share it.
        connect: Any = chdb.connect  # untyped in chdb
        self._connection = connect(f"{path / 'chdb'}?config-file={config}")
        dsn = f"chdb://{path / 'chdb'}"
        self.single = ClickHouseStore(dsn, SINGLE)
        self.single.migrate()
        for name, database in ((CLUSTER, CLUSTERED), (MIRRORED, MIRRORED_DB)):
            for statement in cluster_statements(name, database, replicated=False):
                self.single.command(statement)
        self.clustered = ClickHouseStore(dsn, CLUSTERED, cluster=CLUSTER)
        self.mirrored = ClickHouseStore(dsn, MIRRORED_DB, cluster=MIRRORED)

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return self.single.query(sql, params)

    def close(self) -> None:
        self.mirrored.close()
        self.clustered.close()
        self.single.close()
        self._connection.close()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = Engine(tmp_path_factory.mktemp("cluster-schema"))
    yield engine
    engine.close()


def _objects(engine: Engine, database: str) -> dict[str, str]:
    return dict(
        engine.rows(
            "SELECT name, engine FROM system.tables WHERE database = {d:String}", d=database
        )
    )


def _columns(engine: Engine, database: str, table: str) -> list[tuple[Any, ...]]:
    return engine.rows(
        "SELECT name, type FROM system.columns WHERE database = {d:String} AND table = {t:String}"
        " ORDER BY position",
        d=database,
        t=table,
    )


def _created(statements: list[str]) -> dict[str, str]:
    """Object name -> its CREATE statement."""
    found = {}
    for statement in statements:
        match = re.match(
            r"CREATE (?:TABLE|MATERIALIZED VIEW|VIEW) IF NOT EXISTS \w+\.(\w+)", statement
        )
        if match:
            found[match[1]] = statement
    return found


def test_every_object_of_the_single_node_schema_has_its_cluster_form(engine: Engine) -> None:
    single = _objects(engine, SINGLE)
    assert single, "the single-node schema was applied"
    clustered = _objects(engine, CLUSTERED)
    replicated = _created(cluster_statements(CLUSTER, "afr"))
    for name, kind in single.items():
        assert name in replicated, f"{name} ({kind}) has no cluster form"
        ddl = replicated[name]
        assert f"ON CLUSTER '{CLUSTER}'" in ddl, name
        if kind.endswith("MergeTree") and name in SHARDED_TABLES:
            local = name + LOCAL_SUFFIX
            assert clustered[name] == "Distributed", name
            assert clustered[local] == kind, name
            assert "cityHash64(ProjectId, TraceId)" in ddl
            keeper = f"('/clickhouse/tables/{{shard}}/afr/{local}', '{{replica}}'"
            assert f"ENGINE = Replicated{kind}{keeper}" in replicated[local]
            for table in (name, local):
                assert _columns(engine, CLUSTERED, table) == _columns(engine, SINGLE, name)
        elif kind.endswith("MergeTree"):
            assert name in EVERYWHERE_TABLES, f"{name}: neither sharded nor on every node"
            assert clustered[name] == kind
            keeper = f"('/clickhouse/tables/all/afr/{name}', '{{shard}}-{{replica}}'"
            assert f"ENGINE = Replicated{kind}{keeper}" in ddl
            assert _columns(engine, CLUSTERED, name) == _columns(engine, SINGLE, name)
        elif kind == "MaterializedView":
            assert clustered[name] == kind
            # Attached to the local tables: each shard summarizes the spans it stores.
            target = re.search(r" TO afr\.(\w+) AS", ddl)
            assert target is not None and target[1].endswith(LOCAL_SUFFIX), ddl[:120]
            assert re.findall(r"FROM afr\.(\w+)", ddl) == [f"otel_traces{LOCAL_SUFFIX}"]
        elif kind == "View":
            assert clustered[name] == kind
            assert _columns(engine, CLUSTERED, name) == _columns(engine, SINGLE, name)
        else:
            pytest.fail(f"{name}: a {kind} has no cluster form")


def test_the_sharded_tables_fsync_and_write_compact_parts_like_one_node(engine: Engine) -> None:
    """The settings the collector applies on one node at every migrate (ADR 20, ADR 43) are
    in the cluster's tables, which the collector never alters."""

    def engine_full(database: str, name: str) -> str:
        rows = engine.rows(
            "SELECT engine_full FROM system.tables WHERE database = {d:String} "
            "AND name = {t:String}",
            d=database,
            t=name,
        )
        assert rows, (database, name)
        return str(rows[0][0])

    for table in SHARDED_TABLES:
        single, clustered = engine_full(SINGLE, table), engine_full(CLUSTERED, table + LOCAL_SUFFIX)
        for setting in ("min_bytes_for_wide_part = 50331648", "min_rows_to_activate = 1"):
            assert setting in single, (table, setting)
            assert setting in clustered, (table, setting)
        assert "fsync_after_insert = 1" in clustered, table


def test_every_cluster_statement_parses(engine: Engine) -> None:
    statements = cluster_statements(CLUSTER, "afr", shards=2, ttl_days=30)
    statements += single_node_statements("afr", ttl_days=30)
    for statement in statements:
        formatted = engine.rows("SELECT formatQuery({q:String})", q=statement)[0][0]
        assert formatted.split()[0] == statement.split()[0]
    creates = [s for s in statements[: -len(single_node_statements("afr"))] if "CREATE" in s]
    assert all(" ON CLUSTER 'afr_test'" in s for s in creates)
    engines = re.findall(r"ENGINE = (\w+)", "\n".join(creates))
    assert engines and all(e.startswith("Replicated") or e == "Distributed" for e in engines)
    assert "TTL toDateTime(Timestamp) + toIntervalDay(30)" in "\n".join(creates)


def test_a_table_without_a_cluster_form_fails_the_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = Migration(
        len(MIGRATIONS) + 1,
        "a new table",
        ("CREATE TABLE IF NOT EXISTS {db}.sessions (Id String) ENGINE = MergeTree ORDER BY Id",),
    )
    monkeypatch.setattr(
        cluster_module, "migrations", lambda ttl_days: (*migrations(ttl_days), extra)
    )
    with pytest.raises(NoClusterForm, match="sessions"):
        cluster_statements(CLUSTER)


def test_the_shard_guard_stops_the_script_on_a_wrong_cluster(engine: Engine) -> None:
    guard = cluster_statements(CLUSTER, CLUSTERED, shards=1, replicated=False)[0]
    engine.single.command(guard)  # this engine's cluster has one shard
    for wrong in (
        cluster_statements(CLUSTER, CLUSTERED, shards=2, replicated=False)[0],
        cluster_statements("other", CLUSTERED, replicated=False)[0],
    ):
        with pytest.raises(Exception, match="does not define cluster"):
            engine.single.command(wrong)


def test_the_collector_checks_the_cluster_schema_instead_of_migrating(engine: Engine) -> None:
    assert engine.clustered.migrate() == []
    with pytest.raises(ClusterSchemaError, match="a ReplacingMergeTree table, not"):
        check_cluster_schema(engine.single, SINGLE, CLUSTER)
    with pytest.raises(ClusterSchemaError, match="does not define this cluster"):
        check_cluster_schema(engine.single, CLUSTERED, "elsewhere")


@pytest.fixture(scope="module")
def written(engine: Engine) -> Engine:
    """The same spans, duplicates included, written by the collector's store to both."""
    rng = random.Random(13)
    spans = [s for n in range(60) for s in _random_run(rng, PROJECTS[n % 2], n)]
    spans += rng.sample(spans, len(spans) // 5)  # redelivered, in later blocks
    for store in (engine.single, engine.clustered, engine.mirrored):
        store.set_model_prices(PRICES)
        for position in range(0, len(spans), 50):
            store.insert_rows(encode_block(spans[position : position + 50]))
    return engine


def _reader(store: ClickHouseStore) -> RunReader:
    return RunReader(store, query_timeout_s=10, max_spans=1000, prices=BOOK)


FILTERS: list[dict[str, Any]] = [
    {},
    {"status": "error"},
    {"status": "ok"},
    {"kind": "replay"},
    {"kind": "capture"},
    {"workflow": "refunds"},
    {"agent": "Billing"},
    {"source_run_id": "f" * 32},
]


@pytest.mark.parametrize("fields", FILTERS, ids=lambda f: ",".join(f) or "none")
def test_the_reader_pages_the_distributed_tables_as_one_node(
    written: Engine, fields: dict[str, Any]
) -> None:
    for project in PROJECTS:
        pages = []
        for store in (written.single, written.clustered, written.mirrored):
            reader, runs, cursor = _reader(store), [], None
            while True:
                flt = RunFilter(BASE_NS, BASE_NS + 400 * NS, limit=7, cursor=cursor, **fields)
                page, next_cursor = reader.list_runs(project, flt)
                runs += page
                if next_cursor is None:
                    break
                cursor = (page[-1]["start_ns"], page[-1]["run_id"])
            pages.append(runs)
        assert pages[1] == pages[0]
        assert pages[2] == pages[0], "the IN subqueries run over two shards"
        assert pages[0] or fields, "the seeded data has runs"


def test_a_run_and_its_spans_read_through_the_distributed_tables(written: Engine) -> None:
    runs, _ = _reader(written.single).list_runs(
        PROJECTS[0], RunFilter(BASE_NS, BASE_NS + 400 * NS, limit=5)
    )
    for run in runs:
        one = _reader(written.single).get_run(PROJECTS[0], run["run_id"])
        many = _reader(written.clustered).get_run(PROJECTS[0], run["run_id"])
        assert one is not None and many == one
        assert len(one[1]) == run["span_count"], "FINAL: each span once"
    newest = _reader(written.single).newest_failing_run()
    assert newest is not None
    assert _reader(written.clustered).newest_failing_run() == newest
    assert _reader(written.mirrored).newest_failing_run() == newest
    summary = "SELECT * FROM {db}.run_summary ORDER BY project, run_id"
    assert written.clustered.query(summary) == written.single.query(summary)


def test_afr_schema_prints_both_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--database", "afr"]) == 0
    single = capsys.readouterr().out
    assert "CREATE TABLE IF NOT EXISTS afr.otel_traces (" in single
    assert "ON CLUSTER" not in single
    assert main(["schema", "--cluster", "prod", "--shards", "3"]) == 0
    clustered = capsys.readouterr().out
    assert "!= 3" in clustered and "ON CLUSTER 'prod'" in clustered
    assert clustered.count(";\n") == len(cluster_statements("prod", shards=3))
    assert main(["schema", "--cluster", "prod", "--shards", "2", "--config", "xml"]) == 0
    xml = capsys.readouterr().out
    assert xml == remote_servers_config("prod", [["clickhouse-1-1"], ["clickhouse-2-1"]], fmt="xml")
    assert main(["schema", "--shards", "2"]) == 2, "--shards needs --cluster"


@pytest.mark.parametrize("fmt", ["xml", "yaml"])
def test_the_cluster_definition_lists_every_shard_and_replica(fmt: str) -> None:
    text = remote_servers_config("prod", [["a1", "a2"], ["b1", "b2"]], fmt=fmt)
    if fmt == "xml":
        root = ElementTree.fromstring(text)  # noqa: S314 (generated here)
        shards = [
            (s.findtext("internal_replication"), [r.findtext("host") for r in s.iter("replica")])
            for s in root.iterfind("remote_servers/prod/shard")
        ]
    else:
        parsed = yaml.safe_load(text)
        shards = [
            (str(s["internal_replication"]).lower(), [r["host"] for r in s["replica"]])
            for s in parsed["remote_servers"]["prod"]["shard"]
        ]
    assert shards == [("true", ["a1", "a2"]), ("true", ["b1", "b2"])]
