"""The store's schema on a ClickHouse cluster: what ``afr schema --cluster NAME`` prints (ADR 22).

Derived statement by statement from the single-node migrations (``schema.py``), so a column,
a codec or the run summary's merges are written once:

- a table keyed by run (``SHARDED_TABLES``) becomes ``<name>_local`` with the Replicated form
  of its engine (Keeper path per ``{shard}``, replica ``{replica}``), and a ``Distributed``
  table under ``<name>``, the name the collector, the reader and the dashboards use, sharded
  by ``SHARDING_KEY``: every delivery of a span, from any collector, lands on the shard of
  its run, where ``ReplacingMergeTree`` and the run summary's idempotent merges fold it;
- a small table every node reads whole (``EVERYWHERE_TABLES``: model prices, the migration
  bookkeeping) is replicated to every node of the cluster (one Keeper path for all shards);
- a materialized view reads and writes the local tables, so each shard summarizes its own
  runs; a plain view is created on every node, over the ``Distributed`` tables.

A table or statement kind not listed here has no cluster form: generating the schema fails
(and ``tests/unit/collector/test_cluster_schema.py`` with it) until it is given one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from collector.store.schema import (
    LOGS_TABLE,
    MIGRATIONS_TABLE,
    MIGRATIONS_TABLE_DDL,
    MODEL_PRICES_TABLE,
    RUNS_TABLE,
    SPANS_TABLE,
    TRACE_ID_TS_TABLE,
    migrations,
)

__all__ = [
    "CLUSTER_SESSION_SETTINGS",
    "EVERYWHERE_TABLES",
    "LOCAL_SUFFIX",
    "PART_FORMAT_SETTINGS",
    "SHARDED_TABLES",
    "SHARDING_KEY",
    "ClusterSchemaError",
    "NoClusterForm",
    "check_cluster_schema",
    "cluster_statements",
    "durability_settings",
    "remote_servers_config",
    "render",
    "schema_text",
    "single_node_statements",
]

SHARDED_TABLES = (SPANS_TABLE, TRACE_ID_TS_TABLE, RUNS_TABLE, LOGS_TABLE)
"""Tables keyed by ``(ProjectId, TraceId)``: split over the shards by ``SHARDING_KEY``."""
EVERYWHERE_TABLES = (MODEL_PRICES_TABLE, MIGRATIONS_TABLE)
"""Small tables read whole by any node (the ``run_summary`` view prices runs with
``model_prices FINAL``): one replica on every node, so no read crosses shards."""
SHARDING_KEY = "cityHash64(ProjectId, TraceId)"
"""A run's shard: the prefix of the spans' deduplication key ``(ProjectId, TraceId, SpanId)``,
so duplicates meet on one shard, and a run's spans and summary rows share it."""
LOCAL_SUFFIX = "_local"
KEEPER_PREFIX = "/clickhouse/tables"

CLUSTER_SESSION_SETTINGS: Mapping[str, Any] = {
    # An insert returns once every shard has its rows (not when the initiating node has
    # spooled them): the collector deletes a log segment as soon as its insert returns, and a
    # failure reaches the writer, which retries.
    "distributed_foreground_insert": 1,
    # Every delivery is stored and folded by ReplacingMergeTree, as on one node: block
    # deduplication of a retried insert would also skip the run summary's materialized view
    # for it (deduplicate_blocks_in_dependent_materialized_views = 0), losing its rows there.
    "insert_deduplicate": 0,
    # The reader's `IN (SELECT ... FROM runs)` over the Distributed runs table: the subquery
    # runs once, over every shard, as on one node (`GLOBAL IN`).
    "distributed_product_mode": "global",
}
"""Settings of the collector's session on a cluster (``AFR_CLICKHOUSE_CLUSTER``). Readers
outside the collector (Grafana's user) need ``distributed_product_mode`` in their profile."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Also an XML element of the server's config (remote_servers): no leading digit, no "."
# (ClickHouse reads "." in a config key as a path separator).
_CLUSTER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_CREATE_TABLE = re.compile(r"\s*CREATE TABLE IF NOT EXISTS \{db\}\.(\w+)")
_ENGINE = re.compile(r"ENGINE = (\w+)(?:\(([^)]*)\))?")
_CREATE_MV = re.compile(
    r"\s*CREATE MATERIALIZED VIEW IF NOT EXISTS \{db\}\.(\w+)\s+TO \{db\}\.(\w+) AS\b"
)
_CREATE_VIEW = re.compile(
    r"\s*(CREATE VIEW IF NOT EXISTS|CREATE OR REPLACE VIEW) \{db\}\.(\w+) AS\b"
)
_ALTER = re.compile(r"\s*ALTER TABLE \{db\}\.(\w+) (ADD COLUMN|MODIFY QUERY)\b")
_INSERT = re.compile(r"\s*INSERT INTO ")
_TABLE_REF = re.compile(r"\{db\}\.(\w+)")
_BLANK_LINES = re.compile(r"\n\s*\n")


def durability_settings(flag: int) -> str:
    """The MergeTree settings that make an insert's and a merge's parts durable when they
    return (``flag`` 1) or leave them to the page cache (0): ADR 20."""
    return (
        f"fsync_after_insert = {flag}, fsync_part_directory = {flag}, "
        f"min_compressed_bytes_to_fsync_after_merge = {flag}"
    )


WIDE_PART_BYTES = 48 * 1024 * 1024
"""An insert's part (at most ``batch_max_bytes``, 32 MiB of rows by default: 26-30 MB in
columns) is compact; a merged part past this is wide, and merged column by column."""

PART_FORMAT_SETTINGS = (
    f"min_bytes_for_wide_part = {WIDE_PART_BYTES}, "
    "vertical_merge_algorithm_min_rows_to_activate = 1"
)
"""An insert's part is compact (a handful of files: ADR 43, creating and fsyncing a wide
part's 227 files was most of an insert's cost). A merge into a part past
``WIDE_PART_BYTES`` writes a wide part, one column at a time (ClickHouse merges vertically
only into a wide part, and by default only past 131,072 rows): merging compact parts
whole held ~1.3x their bytes in memory (207 MiB for six inserts' 157 MB), and the merges
were the collector's memory peaks (ADR 46)."""

_FSYNC = durability_settings(1)


class NoClusterForm(ValueError):
    """A single-node statement this module does not know how to spread over a cluster."""


class ClusterSchemaError(RuntimeError):
    """The cluster the collector is pointed at does not hold the schema it needs."""


def _check_names(cluster: str | None, database: str) -> None:
    if not _IDENTIFIER.fullmatch(database):
        raise ValueError(f"database {database!r}: letters, digits and _ only")
    if cluster is not None and not _CLUSTER_NAME.fullmatch(cluster):
        raise ValueError(f"cluster {cluster!r}: letters, digits, _, . and - only")


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _record_versions(database: str) -> str:
    rows = ", ".join(f"({m.version}, {_quote(m.description)})" for m in migrations(None))
    return (
        f"INSERT INTO {database}.{MIGRATIONS_TABLE} (Version, Description, AppliedAt)\n"
        f"SELECT Version, Description, now64(3)\n"
        f"FROM values('Version UInt32, Description String', {rows})"
    )


def single_node_statements(database: str = "afr", *, ttl_days: int | None = None) -> list[str]:
    """The single-node schema, as the collector applies it at start-up (then recorded)."""
    _check_names(None, database)
    statements = [f"CREATE DATABASE IF NOT EXISTS {database}", MIGRATIONS_TABLE_DDL]
    for migration in migrations(ttl_days):
        statements += migration.statements
    statements.append(_record_versions(database))
    return [s.strip().replace("{db}", database) for s in statements]


def cluster_statements(
    cluster: str,
    database: str = "afr",
    *,
    ttl_days: int | None = None,
    shards: int | None = None,
    replicated: bool = True,
) -> list[str]:
    """The schema of a cluster: run once, on any node, with Keeper.

    ``shards``: the first statement fails unless the node's cluster has that many shards
    (without it: unless the node knows the cluster). ``replicated=False`` gives each
    statement as one node without Keeper runs it: no ``ON CLUSTER``, MergeTree engines
    without replication (how the tests run the cluster's DDL on the embedded engine).
    """
    _check_names(cluster, database)
    on = f" ON CLUSTER {_quote(cluster)}" if replicated else ""
    expected = f"!= {int(shards)}" if shards is not None else "= 0"
    wanted = f"{int(shards)} shards" if shards is not None else "it"
    statements = [
        f"SELECT throwIf((SELECT uniqExact(shard_num) FROM system.clusters WHERE cluster = "
        f"{_quote(cluster)}) {expected}, "
        f"{_quote(f'this server does not define cluster {cluster} with {wanted} (remote_servers)')})"
        " FORMAT Null",
    ]
    if replicated:  # a clearer error than ON CLUSTER's when this node lacks the macros
        statements.append("SELECT getMacro('shard'), getMacro('replica') FORMAT Null")
    statements.append(f"CREATE DATABASE IF NOT EXISTS {database}{on}")
    for statement in [MIGRATIONS_TABLE_DDL] + [
        s for migration in migrations(ttl_days) for s in migration.statements
    ]:
        statements += _cluster_form(statement, cluster, database, on, replicated)
    statements.append(_record_versions(database))
    return [_BLANK_LINES.sub("\n", s.strip()).replace("{db}", database) for s in statements]


def _local(table: str) -> str:
    return table + LOCAL_SUFFIX if table in SHARDED_TABLES else table


def _cluster_form(
    statement: str, cluster: str, database: str, on: str, replicated: bool
) -> list[str]:
    if match := _CREATE_TABLE.match(statement):
        return _table_forms(statement, match, cluster, database, on, replicated)
    if match := _CREATE_MV.match(statement):
        name, target = match.groups()
        if target not in SHARDED_TABLES:
            raise NoClusterForm(f"materialized view {name} writes {target}, which is not sharded")
        body = _TABLE_REF.sub(lambda ref: f"{{db}}.{_local(ref[1])}", statement[match.end() :])
        return [
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {{db}}.{name}{on} "
            f"TO {{db}}.{_local(target)} AS{body}"
        ]
    if match := _CREATE_VIEW.match(statement):
        create, name = match.groups()
        return [f"{create} {{db}}.{name}{on} AS{statement[match.end() :]}"]
    if match := _ALTER.match(statement):
        return _alter_forms(statement, match, on)
    if _INSERT.match(statement):
        # A backfill of data stored before a migration: a cluster's schema starts empty.
        return []
    raise NoClusterForm(f"no cluster form for: {statement.strip()[:80]}")


def _alter_forms(statement: str, match: re.Match[str], on: str) -> list[str]:
    name, action = match.groups()
    rest = statement[match.end() :]
    if action == "MODIFY QUERY":
        # A materialized view's new query reads the local tables, as its CREATE does.
        body = _TABLE_REF.sub(lambda ref: f"{{db}}.{_local(ref[1])}", rest)
        return [f"ALTER TABLE {{db}}.{name}{on} MODIFY QUERY{body}"]
    if name in SHARDED_TABLES:
        # The local table holds the column, the Distributed table must name it too.
        return [
            f"ALTER TABLE {{db}}.{table}{on} ADD COLUMN{rest}" for table in (_local(name), name)
        ]
    if name in EVERYWHERE_TABLES:
        # One replicated table on every node: the column is added to each node's replica.
        return [f"ALTER TABLE {{db}}.{name}{on} ADD COLUMN{rest}"]
    raise NoClusterForm(
        f"no cluster form for a column of {name}, which is neither sharded nor everywhere"
    )


def _table_forms(
    statement: str,
    match: re.Match[str],
    cluster: str,
    database: str,
    on: str,
    replicated: bool,
) -> list[str]:
    name = match[1]
    engine = _ENGINE.search(statement, match.end())
    if engine is None or not engine[1].endswith("MergeTree"):
        raise NoClusterForm(f"table {name}: only MergeTree engines have a cluster form")
    if name in SHARDED_TABLES:
        path, replica = f"{KEEPER_PREFIX}/{{shard}}/{database}/{name}{LOCAL_SUFFIX}", "{replica}"
    elif name in EVERYWHERE_TABLES:
        # One replica per node of every shard: the replica name must be unique cluster-wide.
        path, replica = f"{KEEPER_PREFIX}/all/{database}/{name}", "{shard}-{replica}"
    else:
        raise NoClusterForm(
            f"table {name} has no cluster form: add it to SHARDED_TABLES or EVERYWHERE_TABLES"
        )
    args = [_quote(path), _quote(replica)] if replicated else []
    args += [a.strip() for a in (engine[2] or "").split(",") if a.strip()]
    engine_sql = f"ENGINE = {'Replicated' if replicated else ''}{engine[1]}({', '.join(args)})"
    rest = statement[engine.end() :].rstrip()
    if name in SHARDED_TABLES:
        # The collector fsyncs parts on one node (AFR_STORE_FSYNC, true by default); on a
        # cluster the tables carry it (ADR 22 says how to turn it off).
        table_settings = f"{_FSYNC}, {PART_FORMAT_SETTINGS}"
        rest += f", {table_settings}" if "\nSETTINGS " in rest else f"\nSETTINGS {table_settings}"
    local = _local(name)
    forms = [
        f"CREATE TABLE IF NOT EXISTS {{db}}.{local}{on}"
        f"{statement[match.end() : engine.start()]}{engine_sql}{rest}"
    ]
    if name in SHARDED_TABLES:
        forms.append(
            f"CREATE TABLE IF NOT EXISTS {{db}}.{name}{on} AS {{db}}.{local}\n"
            f"ENGINE = Distributed({_quote(cluster)}, {database}, {local}, {SHARDING_KEY})"
        )
    return forms


def render(statements: Sequence[str]) -> str:
    """Statements as a script for ``clickhouse-client --multiquery`` (stops at an error)."""
    return "".join(f"{statement};\n\n" for statement in statements)


class _Queries(Protocol):
    def query(
        self, sql: str, parameters: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]: ...


def check_cluster_schema(store: _Queries, database: str, cluster: str) -> None:
    """Raises ``ClusterSchemaError`` unless the server knows ``cluster`` and holds the cluster
    schema of every migration: on a cluster the operator applies ``afr schema --cluster``
    (ON CLUSTER, once), the collector never migrates."""
    apply = f"apply the output of `afr schema --cluster {cluster} --database {database}`"
    if not store.query(
        "SELECT 1 FROM system.clusters WHERE cluster = {c:String} LIMIT 1", {"c": cluster}
    ):
        raise ClusterSchemaError(
            f"AFR_CLICKHOUSE_CLUSTER={cluster}: the server does not define this cluster "
            "(remote_servers)"
        )
    engines = dict(
        store.query(
            "SELECT name, engine FROM system.tables WHERE database = {d:String}", {"d": database}
        )
    )
    if engines.get(SPANS_TABLE) != "Distributed" or MIGRATIONS_TABLE not in engines:
        engine = engines.get(SPANS_TABLE)
        found = f"a {engine} table" if engine else "missing"
        raise ClusterSchemaError(
            f"{database}.{SPANS_TABLE} is {found}, not the cluster schema's Distributed table: "
            f"{apply}"
        )
    applied = {row[0] for row in store.query(f"SELECT Version FROM {database}.{MIGRATIONS_TABLE}")}
    missing = sorted(m.version for m in migrations(None) if m.version not in applied)
    if missing:
        raise ClusterSchemaError(f"the cluster's schema lacks migrations {missing}: {apply}")


def remote_servers_config(
    cluster: str, hosts: Sequence[Sequence[str]], *, fmt: str = "xml", port: int = 9000
) -> str:
    """A server configuration file (``config.d/``) defining ``cluster``: one list of replica
    hosts per shard, ``internal_replication`` on (the Distributed table writes one replica,
    the Replicated table copies it). Each node also needs its own ``macros`` and the Keeper
    nodes (``zookeeper``): shown in the file, to adapt per node."""
    _check_names(cluster, "afr")
    first = hosts[0][0]
    if fmt == "xml":
        shards = "".join(
            "            <shard>\n"
            "                <internal_replication>true</internal_replication>\n"
            + "".join(
                f"                <replica><host>{host}</host><port>{port}</port></replica>\n"
                for host in replicas
            )
            + "            </shard>\n"
            for replicas in hosts
        )
        return (
            "<clickhouse>\n"
            "    <remote_servers>\n"
            f"        <{cluster}>\n"
            "            <!-- the same <secret>…</secret> on every node: shards then run a\n"
            "                 query as the user who sent it, not as `default` -->\n"
            f"{shards}        </{cluster}>\n"
            "    </remote_servers>\n"
            f"    <!-- per node: its shard (1..{len(hosts)}) and a replica name unique in it -->\n"
            f"    <macros><shard>1</shard><replica>{first}</replica></macros>\n"
            "    <zookeeper>\n"
            "        <node><host>keeper</host><port>9181</port></node>\n"
            "    </zookeeper>\n"
            "</clickhouse>\n"
        )
    if fmt == "yaml":
        shards = "".join(
            "      - internal_replication: true\n        replica:\n"
            + "".join(f"          - host: {host}\n            port: {port}\n" for host in replicas)
            for replicas in hosts
        )
        return (
            "remote_servers:\n"
            f"  {cluster}:\n"
            "    # the same `secret:` on every node: shards then run a query as the user who\n"
            "    # sent it, not as `default`\n"
            f"    shard:\n{shards}"
            f"# per node: its shard (1..{len(hosts)}) and a replica name unique in it\n"
            f"macros:\n  shard: 1\n  replica: {first}\n"
            "zookeeper:\n  node:\n    - host: keeper\n      port: 9181\n"
        )
    raise ValueError(f"config format {fmt!r}: xml or yaml")


def schema_text(
    *,
    database: str,
    ttl_days: int | None = None,
    cluster: str | None = None,
    shards: int | None = None,
    replicas: int = 1,
    config: str | None = None,
) -> str:
    """What ``afr schema`` prints: the single-node DDL, the cluster's DDL (``cluster``), or
    with ``config`` the cluster's definition for ``shards`` x ``replicas`` nodes named
    ``clickhouse-<shard>-<replica>`` (ValueError on a bad combination)."""
    if cluster is None and (shards is not None or config is not None):
        raise ValueError("--shards and --config describe a cluster: give --cluster NAME")
    if (shards is not None and shards < 1) or replicas < 1:
        raise ValueError("--shards and --replicas are at least 1")
    if config is not None:
        if cluster is None or shards is None:
            raise ValueError("--config needs --cluster NAME and --shards N")
        hosts = [
            [f"clickhouse-{s}-{r}" for r in range(1, replicas + 1)] for s in range(1, shards + 1)
        ]
        return remote_servers_config(cluster, hosts, fmt=config)
    if cluster is None:
        return render(single_node_statements(database, ttl_days=ttl_days))
    return render(cluster_statements(cluster, database, ttl_days=ttl_days, shards=shards))
