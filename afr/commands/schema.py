"""``afr schema``: the store's DDL, for one node or a ClickHouse cluster."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_schema_parser"]


def add_schema_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr schema``."""
    schema = commands.add_parser(
        "schema",
        help="print the store's DDL: one node (as the collector applies it) or a cluster",
        description="Without --cluster: the single-node schema the collector applies itself. "
        "With --cluster NAME: the schema of a ClickHouse cluster (ON CLUSTER, Replicated "
        "tables, Distributed tables under the collector's names; docs/adr/0022), to apply "
        "once on any node with clickhouse-client --multiquery; the collector then runs with "
        "AFR_CLICKHOUSE_CLUSTER=NAME and never migrates.",
    )
    schema.add_argument("--cluster", metavar="NAME", help="the cluster in remote_servers")
    schema.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="the DDL first checks that the node's cluster has N shards; with --config, the "
        "cluster definition for N shards",
    )
    schema.add_argument("--replicas", type=int, default=1, help="per shard, for --config")
    schema.add_argument(
        "--config",
        choices=("xml", "yaml"),
        help="print the cluster definition (remote_servers, macros, Keeper) instead",
    )
    schema.add_argument("--database", help="default AFR_DATABASE (afr)")
    schema.add_argument("--ttl-days", type=int, help="default AFR_TTL_DAYS (none)")
    schema.set_defaults(func=_schema)


def _schema(args: argparse.Namespace) -> int:
    from collector.settings import CollectorSettings
    from collector.store.cluster import schema_text

    try:
        settings = CollectorSettings()  # AFR_DATABASE, AFR_TTL_DAYS: as the collector has them
        text = schema_text(
            database=args.database or settings.database,
            ttl_days=settings.ttl_days if args.ttl_days is None else args.ttl_days,
            cluster=args.cluster,
            shards=args.shards,
            replicas=args.replicas,
            config=args.config,
        )
    except ValueError as exc:
        print(f"afr schema: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
