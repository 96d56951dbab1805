"""The ClickHouse client: chDB embedded (``chdb:///path``) or a server (``http(s)://``).

One clickhouse-connect client for both, so the DDL and SQL are the same. The chDB engine is
in-process and not safe for concurrent use, so every call goes through one lock; the writer
thread and the read API share it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from afr_common.prices import Rates
from collector.blocks import NATIVE_FORMAT, NATIVE_PREFIX, is_native_payload
from collector.log_model import LOG_COLUMN_NAMES, LOGS_PREFIX, is_log_payload
from collector.model import COLUMN_NAMES, ROW_FORMAT
from collector.store.cluster import (
    CLUSTER_SESSION_SETTINGS,
    PART_FORMAT_SETTINGS,
    check_cluster_schema,
    durability_settings,
)
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
    "EMBEDDED_JEMALLOC_CONF",
    "ClickHouseStore",
    "EmbeddedStoreMissing",
    "SpanStore",
    "release_start_up_pages",
    "tune_embedded_allocator",
]

_PRICE_COLUMNS = (
    "Model",
    "InputUsdPerMTok",
    "OutputUsdPerMTok",
    "CacheReadUsdPerMTok",
    "CacheWriteUsdPerMTok",
    "ReasoningUsdPerMTok",
    "Source",
    "UpdatedAt",
)


class EmbeddedStoreMissing(RuntimeError):
    """chDB is an extra (``afr-server[embedded]``): the image runs on a ClickHouse server."""


class SpanStore(Protocol):
    """What the pipeline needs of a store: tests wrap it to make it fail."""

    def insert_rows(self, payload: bytes) -> None: ...

    def query(
        self, sql: str, parameters: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]: ...

    def close(self) -> None: ...


EMBEDDED_JEMALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:0"
"""chDB's own jemalloc (it reads ``JE_MALLOC_CONF``, not ``MALLOC_CONF``): pages freed by an
insert or a merge go back to the system within a second instead of ten, and are not kept as
"muzzy" either. Measured through ``afr up`` at saturation (bench/README.md): the collector
process's peak RSS 25-120 MiB lower for the same CPU per span; ``dirty_decay_ms:0`` cut
about as much and cost +20% CPU. Set only before chDB is loaded, and never over an
operator's own ``JE_MALLOC_CONF``."""


def tune_embedded_allocator() -> None:
    """``EMBEDDED_JEMALLOC_CONF`` for the chDB about to be loaded (no effect once it is)."""
    if "chdb" not in sys.modules:
        os.environ.setdefault("JE_MALLOC_CONF", EMBEDDED_JEMALLOC_CONF)


_MADV_PAGEOUT = 21  # Linux 5.4+: reclaim these pages now (clean file pages are dropped)


def release_start_up_pages() -> int:
    """Gives the pages of chDB's library that its start-up alone touched back to the system;
    the bytes advised (0 where there is nothing to do or the system does not take it).

    Loading chDB runs the static initialisers of the whole engine (every function, format
    and codec registers itself), which reads ~180 MiB of its ~530 MiB library into the
    process; an ingesting collector uses about half of that afterwards. The pages are the
    library file's own, unchanged: the kernel drops them and reads back, from the page
    cache or the file, only those used again (ADR 55). Mappings holding a page the loader
    wrote (relocations) are left as they are. Nothing changes in what the store does."""
    module = sys.modules.get("chdb._chdb")
    library = getattr(module, "__file__", None)
    if not library or not sys.platform.startswith("linux"):
        return 0
    library = os.path.realpath(library)
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
            lines = smaps.read().splitlines()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    # The library's read-only mappings none of whose pages were written: a written page
    # (relocations, RELRO) is anonymous, and where there is swap the advice would swap it.
    clean: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for line in lines:
        fields = line.split(maxsplit=5)
        if not fields[0].endswith(":"):  # a mapping's header: range, perms, ..., path
            current = None
            if len(fields) == 6 and fields[5] == library and "w" not in fields[1]:
                low, high = (int(bound, 16) for bound in fields[0].split("-"))
                current = (low, high)
                clean.append(current)
        elif current is not None and fields[0] == "Anonymous:" and fields[1] != "0":
            clean.remove(current)
            current = None
    advised = 0
    for low, high in clean:
        if madvise(low, high - low, _MADV_PAGEOUT) == 0:
            advised += high - low
        elif ctypes.get_errno() == 22:  # EINVAL: a kernel without MADV_PAGEOUT
            return 0
    return advised


def _now() -> str:
    """Now for a ``DateTime64(3)`` column, in any time zone: Unix seconds as text."""
    return f"{time.time():.3f}"


def _import_chdb_without_arrow() -> None:
    """Imports chDB (and what ``chdb.connect`` imports) without its optional Arrow support,
    unless pyarrow or chDB is loaded already. chDB imports pyarrow, and pyarrow NumPy, when
    they are installed (chDB requires them): 42 MiB of every collector process for result
    formats the store never asks for (clickhouse-connect reads Native). In this process
    chDB's own Arrow results then stay off (it looks for pyarrow once); code importing
    pyarrow itself later still gets it."""
    hidden = "chdb" not in sys.modules and "pyarrow" not in sys.modules
    if hidden:
        # (None in sys.modules: ``import pyarrow`` raises ImportError)
        sys.modules["pyarrow"] = None  # type: ignore[assignment]
    try:
        import chdb.state  # noqa: F401
    finally:
        if hidden and sys.modules.get("pyarrow", False) is None:
            sys.modules.pop("pyarrow", None)


class ClickHouseStore:
    def __init__(
        self,
        dsn: str,
        database: str = "afr",
        *,
        ttl_days: int | None = None,
        max_partitions_per_insert: int = 0,
        fsync_parts: bool = False,
        cluster: str | None = None,
    ) -> None:
        """``cluster``: the tables are the Distributed ones of ``afr schema --cluster`` (ADR
        22): the session gets ``CLUSTER_SESSION_SETTINGS`` and ``migrate`` only checks."""
        import clickhouse_connect

        if dsn.startswith("chdb:"):
            tune_embedded_allocator()
            try:
                _import_chdb_without_arrow()
            except ImportError:
                raise EmbeddedStoreMissing(
                    "the embedded store needs chDB: pip install 'afr-server[embedded]',"
                    " or set AFR_CLICKHOUSE_URL to a ClickHouse server"
                ) from None
        self.database = database
        self._dsn = dsn
        self._embedded = dsn.startswith("chdb:")
        self._lock = threading.Lock()
        self._cluster = cluster
        session = dict(CLUSTER_SESSION_SETTINGS) if cluster else None
        self._client = clickhouse_connect.get_client(dsn=dsn, settings=session)
        self._ttl_days = ttl_days
        self._max_partitions = max_partitions_per_insert
        self._fsync_parts = fsync_parts

    def migrate(self) -> list[int]:
        """Applies the migrations this store has not seen; returns their versions. On a
        cluster nothing is applied (the operator applies ``afr schema --cluster``): raises
        ``ClusterSchemaError`` unless the cluster holds every migration."""
        db = self.database
        if self._cluster is not None:
            check_cluster_schema(self, db, self._cluster)
            return []
        with self._lock:
            self._client.command(f"CREATE DATABASE IF NOT EXISTS {db}")
            self._client.command(MIGRATIONS_TABLE_DDL.replace("{db}", db))
            done = {
                row[0]
                for row in self._client.query(
                    f"SELECT Version FROM {db}.{MIGRATIONS_TABLE}"
                ).result_rows
            }
            applied = []
            for migration in migrations(self._ttl_days):
                if migration.version in done:
                    continue
                for statement in migration.statements:
                    self._client.command(statement.replace("{db}", db))
                self._insert_json(
                    f"{db}.{MIGRATIONS_TABLE}",
                    ["Version", "Description", "AppliedAt"],
                    [[migration.version, migration.description, _now()]],
                )
                applied.append(migration.version)
            self._apply_ttl()
            self._apply_durability()
        return applied

    def _apply_durability(self) -> None:
        """An insert returns only once its parts (and their directories) are fsynced when
        ``fsync_parts``: the collector deletes a log segment as soon as its insert returns,
        so without it an OS crash could lose acknowledged spans. The tables the
        materialized views fill are written by the same insert, and get the same.

        A merge's part is fsynced too (``min_compressed_bytes_to_fsync_after_merge``): the
        embedded engine keeps no inactive parts (its ``old_parts_lifetime`` is 0, a server's
        480 s), so the parts a merge replaced are deleted at once and an unsynced merged part
        would be the only copy of acknowledged spans until the page cache is written back.

        An insert's parts are compact (``PART_FORMAT_SETTINGS``, ADR 43): a wide part is
        two files per column, each created and fsynced by the insert."""
        flag = int(self._fsync_parts)
        for table in (SPANS_TABLE, RUNS_TABLE, TRACE_ID_TS_TABLE, LOGS_TABLE):
            self._client.command(
                f"ALTER TABLE {self.database}.{table} MODIFY SETTING "
                f"{durability_settings(flag)}, {PART_FORMAT_SETTINGS}"
            )

    def _apply_ttl(self) -> None:
        """Makes the tables' TTL match ``ttl_days`` (set, changed or removed since the
        tables were created): the DDL only sets it at creation."""
        for table, column in (
            (SPANS_TABLE, "Timestamp"),
            (RUNS_TABLE, "Start"),
            (LOGS_TABLE, "Timestamp"),
        ):
            rows = self._client.query(
                "SELECT engine_full FROM system.tables WHERE database = {d:String} "
                "AND name = {t:String}",
                parameters={"d": self.database, "t": table},
            ).result_rows
            if not rows:
                continue
            match = re.search(r"TTL toDateTime\(\w+\) \+ toIntervalDay\((\d+)\)", rows[0][0])
            current = int(match.group(1)) if match else None
            if current == self._ttl_days:
                continue
            if self._ttl_days is None:
                self._client.command(f"ALTER TABLE {self.database}.{table} REMOVE TTL")
            else:
                self._client.command(
                    f"ALTER TABLE {self.database}.{table} MODIFY TTL "
                    f"toDateTime({column}) + toIntervalDay({int(self._ttl_days)})"
                )

    def set_model_prices(self, prices: Mapping[str, Rates]) -> None:
        """Makes ``model_prices`` hold exactly ``prices`` (USD per million tokens)."""
        with self._lock:
            self._client.command(f"TRUNCATE TABLE {self.database}.{MODEL_PRICES_TABLE}")
        self.add_model_prices(prices)

    def add_model_prices(self, prices: Mapping[str, Rates]) -> None:
        """Adds (or replaces) the prices of these models in ``model_prices``."""
        if not prices:
            return
        now = _now()
        rows = [
            [model, r.input, r.output, r.cache_read, r.cache_write, r.reasoning, r.source, now]
            for model, r in sorted(prices.items())
        ]
        with self._lock:
            self._insert_json(f"{self.database}.{MODEL_PRICES_TABLE}", list(_PRICE_COLUMNS), rows)

    def _insert_json(self, table: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Rows as JSON text, parsed by ClickHouse. (clickhouse-connect's ``insert`` of
        Python rows imports pandas, NumPy and pyarrow to ask whether they are frames: 91
        MiB of the collector process.)"""
        body = "\n".join(json.dumps(row, allow_nan=False) for row in rows).encode()
        self._client.raw_insert(table, columns, insert_block=body, fmt="JSONCompactEachRow")

    def stored_models(self, timeout_s: float = 30.0) -> list[str]:
        """The models of the model calls the store holds (what ``model_prices`` should price)."""
        rows = self.query(
            f"SELECT DISTINCT Model FROM {{db}}.{SPANS_TABLE} WHERE SpanType = 'llm' "
            f"AND Model != '' SETTINGS max_execution_time = {max(1, int(timeout_s))}"
        )
        return sorted(str(row[0]) for row in rows)

    def insert_rows(self, payload: bytes) -> None:
        """Inserts ``blocks.encode_block`` output (Native blocks, as the ingest workers write
        them), ``model.encode_rows`` output (JSON rows, as records in the log from before
        ADR 54 and the rows of a refused batch are) or ``log_model.encode_log_rows`` output
        (its prefix says so, and the rows go to the logs table); parsed by ClickHouse, not
        by Python."""
        table, columns, fmt = SPANS_TABLE, COLUMN_NAMES, ROW_FORMAT
        settings: dict[str, Any] = {
            # Sized to the window of accepted start times; a block spread wider (the log
            # recovered after a long outage) is refused and the writer splits it.
            "max_partitions_per_insert_block": self._max_partitions,
            # No merge of the block as it is written (ADR 44): the views' rows are grouped
            # by their key already, and a span sent twice is removed by the merges and by
            # FINAL, as one sent in two inserts always was. It was ~15-20% of the insert's
            # CPU.
            "optimize_on_insert": 0,
        }
        # The body after its prefix, as a view: chDB writes it to a file as it is, and a
        # slice would copy an insert's ~35 MB once more (and fault its pages in afresh).
        body: bytes | memoryview = payload
        if is_native_payload(payload):
            fmt = NATIVE_FORMAT
            # The LowCardinality columns arrive as String (the blocks module).
            settings["input_format_native_allow_types_conversion"] = 1
            body = memoryview(payload)[len(NATIVE_PREFIX) :]
        else:
            if is_log_payload(payload):
                table, columns = LOGS_TABLE, LOG_COLUMN_NAMES
                body = memoryview(payload)[len(LOGS_PREFIX) :]
            # A log record written before a column was added ends early: the missing
            # trailing values are the columns' defaults.
            settings["input_format_json_compact_allow_variable_number_of_columns"] = 1
            # Parsing on one thread: the ingest workers hold the other cores, and parallel
            # parsing's chunks in flight cost ~50 MiB of peak memory for no less CPU (ADR 43).
            settings["input_format_parallel_parsing"] = 0
        if not self._embedded and isinstance(body, memoryview):
            body = body.tobytes()  # (the HTTP client's declared types; it is sent as is)
        with self._lock:
            self._client.raw_insert(
                f"{self.database}.{table}",
                list(columns),
                # chDB's backend writes any bytes-like block to its file as it is
                # (tests/unit/collector/test_blocks.py inserts through it).
                insert_block=body,  # type: ignore[arg-type]
                fmt=fmt,
                settings=settings,
            )

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with self._lock:
            result = self._client.query(sql.replace("{db}", self.database), parameters=parameters)
            return [tuple(row) for row in result.result_rows]

    def command(self, sql: str) -> None:
        with self._lock:
            self._client.command(sql.replace("{db}", self.database))

    def close(self) -> None:
        with self._lock:
            self._client.close()
