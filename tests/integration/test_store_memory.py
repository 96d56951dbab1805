"""The embedded store's memory in the collector process (ADR 46). Under load the merges of
the spans table were the process's peaks: a merge of compact parts into a compact part holds
every column of its rows at once, so a merge into a part past ``WIDE_PART_BYTES`` goes column
by column into a wide part (an insert's part stays compact: ADR 43). And the store loads no
pandas, NumPy or pyarrow (91 MiB), which chDB and clickhouse-connect import when installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import chdb
import pytest

from bench.collector_bench import make_requests
from collector.blocks import NATIVE_PREFIX
from collector.pipeline import process_request
from collector.privacy import default_processors
from collector.settings import CollectorSettings
from collector.store.client import ClickHouseStore
from collector.store.cluster import WIDE_PART_BYTES
from tests.records import BASE_NS


def _payloads(inserts: int, requests: int) -> list[bytes]:
    """``inserts`` insert bodies of ``requests`` exports each (504 spans: OpenInference
    traces of an agent run, ~3.3 KB per span on the wire), through the ingest pipeline as
    the collector stores them."""
    processors = default_processors(CollectorSettings(redaction_key="merges-key"))
    # Joined as the writer joins records: one NATIVE_PREFIX, the blocks back to back.
    return [
        NATIVE_PREFIX
        + b"".join(
            process_request(processors, raw, False, "p", BASE_NS).payload[len(NATIVE_PREFIX) :]
            for raw in make_requests(requests, seed=100 + insert)
        )
        for insert in range(inserts)
    ]


def _parts(store: ClickHouseStore) -> list[tuple[str, int]]:
    return [
        (str(kind), int(size))
        for kind, size in store.query(
            "SELECT part_type, data_uncompressed_bytes FROM system.parts "
            "WHERE database = {db:String} AND table = 'otel_traces' AND active",
            {"db": store.database},
        )
    ]


def _merge(store: ClickHouseStore, path: Path) -> tuple[int, set[str]]:
    """Merges the spans table's parts into one: the merge's peak memory and its algorithms,
    seen from another connection while it runs."""
    peak, algorithms, done = [0], set(), threading.Event()
    connect: Any = chdb.connect  # untyped in chdb
    observer = connect(f"file:{path}")

    def watch() -> None:
        while not done.is_set():
            for line in (
                observer.query(
                    "SELECT memory_usage, merge_algorithm FROM system.merges "
                    "WHERE database = {db:String}",
                    "TSV",
                    params={"db": store.database},
                )
                .data()
                .splitlines()
            ):
                memory, algorithm = line.split("\t")
                peak[0] = max(peak[0], int(memory))
                algorithms.add(algorithm)
            done.wait(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        store.command("SYSTEM START MERGES {db}.otel_traces")
        store.command("OPTIMIZE TABLE {db}.otel_traces FINAL")
    finally:
        done.set()
        watcher.join()
        observer.close()
    return peak[0], algorithms


@pytest.mark.slow
def test_a_large_merge_goes_column_by_column_into_a_wide_part_and_holds_less(
    tmp_path: Path,
) -> None:
    payloads = _payloads(inserts=6, requests=16)
    path = tmp_path / "chdb"
    peaks = {}
    for database in ("merges", "compact"):
        store = ClickHouseStore(f"chdb://{path}", database)
        store.migrate()
        if database == "compact":  # the settings before ADR 46, for the same parts
            store.command(
                "ALTER TABLE {db}.otel_traces MODIFY SETTING min_bytes_for_wide_part = 268435456"
            )
        store.command("SYSTEM STOP MERGES {db}.otel_traces")
        for payload in payloads:
            store.insert_rows(payload)
        parts = _parts(store)
        assert [kind for kind, _ in parts] == ["Compact"] * 6, "an insert's part is compact"
        assert all(size < WIDE_PART_BYTES for _, size in parts)
        assert sum(size for _, size in parts) > WIDE_PART_BYTES
        peaks[database], algorithms = _merge(store, path)
        assert peaks[database] > 0, "the merge was seen running"
        if database == "merges":
            # (a background merge of two or three of the parts, below the size, may come
            # first: horizontal, into a compact part)
            assert "Vertical" in algorithms and [kind for kind, _ in _parts(store)] == ["Wide"]
        else:
            assert "Vertical" not in algorithms
        store.close()
    assert peaks["merges"] < 0.85 * peaks["compact"], peaks


_STORE_LIFE = """
import json, sys, time
from afr_common.prices import Rates
from collector.store.client import ClickHouseStore
from collector.model import encode_rows
from tests.records import span_record
store = ClickHouseStore(sys.argv[1])
store.migrate()
store.add_model_prices({"gpt-4o": Rates(2.5, 10.0, 1.25, 0.0, 0.0)})
store.insert_rows(encode_rows([span_record(span_name="step")]))
stored = store.query("SELECT count() FROM {db}.otel_traces")[0][0]
applied = store.query(
    "SELECT toUnixTimestamp64Milli(max(AppliedAt)) FROM {db}.schema_migrations"
)[0][0]
priced = store.query(
    "SELECT InputUsdPerMTok, toUnixTimestamp64Milli(UpdatedAt) FROM {db}.model_prices FINAL"
)[0]
loaded = sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules)
import pyarrow  # others in the process still can
print(json.dumps({"stored": stored, "applied": applied, "priced": list(priced),
                  "loaded": loaded, "pyarrow": pyarrow.__version__}))
"""


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/New_York"])
def test_the_store_loads_no_dataframe_library_and_its_times_are_right_in_any_zone(
    tmp_path: Path, zone: str
) -> None:
    """Migrations and prices are written as JSON text, not as Python rows (clickhouse-connect
    imports pandas to ask whether rows are a frame); chDB is imported without pyarrow. The
    times they store are the moment they were written, whatever the machine's zone."""
    before = time.time()
    done = subprocess.run(
        [sys.executable, "-c", _STORE_LIFE, f"chdb://{tmp_path / 'chdb'}"],
        env={**os.environ, "TZ": zone},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    after = time.time()
    life = json.loads(done.stdout.strip().splitlines()[-1])
    assert life["loaded"] == [], "the store imported a dataframe library"
    assert life["stored"] == 1 and life["pyarrow"]
    assert life["priced"][0] == 2.5
    for stamp in (life["applied"], life["priced"][1]):
        assert before * 1000 - 1 <= stamp <= after * 1000 + 1, (zone, stamp, before, after)
