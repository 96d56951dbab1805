"""Implausible start times are refused span by span; TTL changes reach existing tables; an
insert spread over more daily partitions than the window allows is split, not lost."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.model import encode_rows
from collector.store.client import ClickHouseStore
from collector.store.wal import Batch, WriteAheadLog
from collector.store.writer import BatchWriter
from tests.integration.conftest import start_collector
from tests.integration.test_collector_ingest import _grpc_export
from tests.integration.test_run_summary import _random_run

DAY_NS = 86_400 * 1_000_000_000


def _span(trace: bytes, number: int, name: str, start_ns: int) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace,
        span_id=number.to_bytes(8, "big"),
        name=name,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 1_000_000,
    )


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_spans_outside_the_window_are_refused_alone(tmp_path: Path, transport: str) -> None:
    thread, running = start_collector(
        tmp_path / "data", max_span_age_days=30, max_span_future_s=3600
    )
    try:
        now = time.time_ns()
        trace = bytes.fromhex("cd" * 15 + ("01" if transport == "grpc" else "02"))
        request = trace_service_pb2.ExportTraceServiceRequest()
        spans = request.resource_spans.add().scope_spans.add().spans
        spans.extend(
            [
                _span(trace, 1, "now", now),
                _span(trace, 2, "29 days ago", now - 29 * DAY_NS),
                _span(trace, 3, "two years ago", now - 730 * DAY_NS),
                _span(trace, 4, "tomorrow", now + DAY_NS),
            ]
        )
        if transport == "grpc":
            code, _, _ = _grpc_export(running, request)
            assert code == grpc.StatusCode.OK
        else:
            answer = httpx.post(
                running.http_url + "/v1/traces",
                content=request.SerializeToString(),
                headers={**running.headers(), "content-type": "application/x-protobuf"},
            )
            reply = trace_service_pb2.ExportTraceServiceResponse()
            reply.ParseFromString(answer.content)
            assert answer.status_code == 200
            assert reply.partial_success.rejected_spans == 2
            assert "outside the accepted window" in reply.partial_success.error_message
        names = {span["name"] for span in running.run(trace.hex())["spans"]}
        assert names == {"now", "29 days ago"}
        assert running.collector.pipeline.stats.spans_rejected == 2
    finally:
        thread.stop()


def _ttl(store: ClickHouseStore, table: str) -> str:
    (engine,) = store.query(
        "SELECT engine_full FROM system.tables WHERE database = {d:String} AND name = {t:String}",
        {"d": store.database, "t": table},
    )[0]
    return str(engine)


def test_a_ttl_change_reaches_the_existing_tables(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'chdb'}"
    for ttl_days, expected in ((None, None), (7, "7"), (30, "30"), (None, None)):
        store = ClickHouseStore(dsn, "ttl", ttl_days=ttl_days)
        store.migrate()
        for table in ("otel_traces", "runs"):
            engine = _ttl(store, table)
            if expected is None:
                assert " TTL " not in engine, (ttl_days, table, engine)
            else:
                assert f"toIntervalDay({expected})" in engine, (ttl_days, table, engine)
        store.close()


def test_an_insert_over_too_many_partitions_is_split_not_lost(tmp_path: Path) -> None:
    """What a log recovered after a long outage can hold: rows over more days than the
    guard allows in one insert block. The writer splits it; nothing is dead-lettered."""
    store = ClickHouseStore(f"chdb://{tmp_path / 'chdb'}", "split", max_partitions_per_insert=3)
    store.migrate()
    import random

    rng = random.Random(3)
    spans = []
    for day in range(12):
        for span in _random_run(rng, "alpha", day):
            span.timestamp_ns -= day * DAY_NS
            spans.append(span)
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 30, fsync=False, retry_after_s=1)
    wal.open()
    writer = BatchWriter(store, wal, max_rows=10_000, interval_s=60)
    import asyncio

    asyncio.run(wal.append(Batch(encode_rows(spans), len(spans))))
    assert writer.flush()
    assert writer.failed_inserts >= 1, "the guard refused the first, 12-day insert"
    assert writer.dead_lettered_rows == 0
    stored = store.query("SELECT count() FROM {db}.otel_traces FINAL")[0][0]
    assert stored == len(spans)
    wal.close()
    store.close()


def test_inserted_and_merged_parts_are_fsynced_unless_turned_off(tmp_path: Path) -> None:
    from collector.settings import CollectorSettings

    assert CollectorSettings().store_fsync, "on by default"
    dsn = f"chdb://{tmp_path / 'chdb'}"
    for fsync in (True, False, True):
        store = ClickHouseStore(dsn, "durable", fsync_parts=fsync)
        store.migrate()
        for table in ("otel_traces", "runs", "otel_traces_trace_id_ts"):
            engine = _ttl(store, table)
            assert f"fsync_after_insert = {int(fsync)}" in engine, engine
            assert f"fsync_part_directory = {int(fsync)}" in engine, engine
            # the embedded engine deletes the parts a merge replaced at once: the merged
            # part must be on disk before that
            assert f"min_compressed_bytes_to_fsync_after_merge = {int(fsync)}" in engine, engine
        store.close()
