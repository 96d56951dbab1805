"""The writer's inserts under load: one insert per interval (or per full batch), never a
drain that sends what arrived during the last insert as a small one of its own. Small
inserts are small parts: more files, fsyncs and merges for the same rows (ADR 43)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from collector.blocks import NATIVE_PREFIX, encode_block, is_native_payload, payload_rows
from collector.log_model import LOGS_PREFIX, LogRecord, encode_log_rows
from collector.model import SpanRecord, encode_rows
from collector.store import writer as writer_module
from collector.store.client import ClickHouseStore
from collector.store.wal import NATIVE_DEAD_LETTER, Batch, WriteAheadLog
from collector.store.writer import BatchWriter
from tests.integration.test_run_summary import _random_run
from tests.records import BASE_NS
from tests.waiting import wait_until


class _Recording:
    """The real store; remembers each insert's row count, and runs ``during_first`` while
    the first insert is under way (rows that arrive meanwhile)."""

    def __init__(self, store: ClickHouseStore, during_first: Any = None) -> None:
        self._store = store
        self._during_first = during_first
        self.sizes: list[int] = []

    def insert_rows(self, payload: bytes) -> None:
        if not self.sizes and self._during_first is not None:
            self._during_first()
        self._store.insert_rows(payload)
        self.sizes.append(payload_rows(payload))

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self._store.query(sql, parameters)

    def close(self) -> None:
        self._store.close()


class _Rows:
    def __init__(self) -> None:
        self._rng = random.Random(11)
        self._number = 0
        self._spare: list[SpanRecord] = []

    def take(self, count: int) -> list[SpanRecord]:
        while len(self._spare) < count:
            self._number += 1
            self._spare += _random_run(self._rng, "alpha", self._number)
        taken, self._spare = self._spare[:count], self._spare[count:]
        return taken


def _append(wal: WriteAheadLog, records: list[SpanRecord]) -> None:
    asyncio.run(wal.append(Batch(encode_block(records), len(records))))


def _setup(tmp_path: Path, during_first: Any = None) -> tuple[_Recording, WriteAheadLog]:
    store = ClickHouseStore(f"chdb://{tmp_path / 'chdb'}", "batches")
    store.migrate()
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 30, fsync=False, retry_after_s=1)
    wal.open()
    return _Recording(store, during_first), wal


def _stored(recording: _Recording) -> int:
    return int(recording.query("SELECT count() FROM {db}.otel_traces FINAL")[0][0])


def test_rows_that_arrive_during_an_insert_wait_for_the_next_batch(tmp_path: Path) -> None:
    rows = _Rows()
    wal_box: list[WriteAheadLog] = []
    recording, wal = _setup(tmp_path, during_first=lambda: _append(wal_box[0], rows.take(30)))
    wal_box.append(wal)
    writer = BatchWriter(recording, wal, max_rows=100, interval_s=3600)
    writer.start()
    try:
        _append(wal, rows.take(100))  # a full batch: inserted at once
        wait_until(lambda: recording.sizes or None, timeout_s=30, what="the first insert")
        _append(wal, rows.take(70))  # with the 30 that arrived during it: a full batch again
        wait_until(
            lambda: len(recording.sizes) >= 2 or None, timeout_s=30, what="the second insert"
        )
        assert recording.sizes == [100, 100], (
            "the 30 rows that arrived during the first insert waited for a full batch"
        )
    finally:
        assert writer.stop()
    assert _stored(recording) == 200
    wal.close()
    recording.close()


def test_a_backlog_goes_in_full_batches_back_to_back_and_the_rest_waits(
    tmp_path: Path,
) -> None:
    rows = _Rows()
    recording, wal = _setup(tmp_path)
    for _ in range(5):
        _append(wal, rows.take(50))  # 250 rows: what a log holds after an outage
    writer = BatchWriter(recording, wal, max_rows=100, interval_s=3600)
    writer.start()
    try:
        wait_until(
            lambda: len(recording.sizes) >= 2 or None,
            timeout_s=30,
            what="two full inserts without waiting for the interval",
        )
        assert recording.sizes == [100, 100]
        assert wal.ready_rows == 50, "less than a batch waits for the interval"
    finally:
        assert writer.stop(), "stopping inserts what is left"
    assert recording.sizes == [100, 100, 50]
    assert _stored(recording) == 250
    parts = recording.query(
        "SELECT DISTINCT part_type FROM system.parts WHERE database = 'batches' "
        "AND table = 'otel_traces' AND active"
    )
    assert parts == [("Compact",)], "an insert's part is one data file, not two per column"
    wal.close()
    recording.close()


def test_freed_memory_goes_back_to_the_system_after_each_insert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An insert's body (up to 32 MiB) is freed in the middle of glibc's heaps, which the
    receiver threads keep growing: the writer trims them after each insert that went in
    (ADR 46), and not on a wake-up that inserted nothing."""
    if writer_module._TRIM is None:
        pytest.skip("the C library has no malloc_trim (not glibc): nothing to trim")
    trims: list[int] = []

    def trim(pad: int) -> int:
        trims.append(pad)
        return 1

    monkeypatch.setattr(writer_module, "_TRIM", trim)
    rows = _Rows()
    recording, wal = _setup(tmp_path)
    writer = BatchWriter(recording, wal, max_rows=100, interval_s=0.05)
    writer.start()
    try:
        _append(wal, rows.take(100))
        wait_until(lambda: len(trims) >= 1 or None, timeout_s=30, what="a trim after an insert")
        _append(wal, rows.take(100))
        wait_until(lambda: len(trims) >= 2 or None, timeout_s=30, what="one after the next")
        assert writer.inserts == 2
        for _ in range(5):  # the writer's wake-ups with nothing to insert
            wal.wait_ready(100, 0.05)
        assert trims == [0, 0]
    finally:
        assert writer.stop()
    assert recording.sizes == [100, 100]
    wal.close()
    recording.close()


def _log_record(number: int) -> LogRecord:
    return LogRecord(
        project_id="alpha",
        timestamp_ns=BASE_NS + number,
        observed_ns=BASE_NS + number,
        trace_id="",
        span_id="",
        trace_flags=0,
        severity_text="INFO",
        severity_number=9,
        service_name="svc",
        body=f"log {number}",
        event_name="",
        resource_schema_url="",
        resource_attributes={},
        scope_schema_url="",
        scope_name="",
        scope_version="",
        scope_attributes={},
        log_attributes={},
        ingested_ns=BASE_NS,
        log_id=f"log-{number}",
    )


def test_a_log_of_every_record_format_goes_in_whole_after_a_restart(tmp_path: Path) -> None:
    """Records written before ADR 54 (JSON rows), after it (Native blocks) and log rows,
    interleaved in one log as an upgrade leaves it: recovered with their row counts, each
    format inserted as its own insert, every row stored once."""
    rows = _Rows()
    recording, wal = _setup(tmp_path)
    old = rows.take(25)
    new = rows.take(30)
    asyncio.run(wal.append(Batch(encode_rows(old[:10]), 10)))
    _append(wal, new[:15])
    asyncio.run(wal.append(Batch(encode_log_rows([_log_record(n) for n in range(4)]), 4)))
    asyncio.run(wal.append(Batch(encode_rows(old[10:]), 15)))
    _append(wal, new[15:])
    wal.close()
    recovered = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 30, fsync=False, retry_after_s=1)
    assert recovered.open() == 25 + 30 + 4 + 1  # a log record's prefix line, as always counted
    writer = BatchWriter(recording, recovered, max_rows=1000, interval_s=3600)
    assert writer.flush()
    assert sorted(recording.sizes) == [5, 25, 30], "one insert per format"
    stored = recording.query("SELECT SpanId FROM {db}.otel_traces FINAL ORDER BY SpanId")
    assert [span for (span,) in stored] == sorted(r.span_id for r in old + new)
    (logs,) = recording.query("SELECT count() FROM {db}.otel_logs")
    assert logs == (4,)
    assert writer.dead_lettered_rows == 0
    recovered.close()
    recording.close()


@pytest.mark.parametrize("count", [1, 2, 5])
@pytest.mark.parametrize("kind", ["native", "json", "logs"])
def test_an_insert_body_is_its_records_joined_under_one_prefix_and_goes_in(
    tmp_path: Path, kind: str, count: int
) -> None:
    """The writer copies the records once into the insert's body (each one's prefix left
    out through a view): the body is exactly the records' rows under one prefix, and the
    store takes it whole."""
    rows = _Rows()
    if kind == "logs":
        payloads = [
            encode_log_rows([_log_record(10 * n + i) for i in range(3)]) for n in range(count)
        ]
        prefix = LOGS_PREFIX
    else:
        encode = encode_block if kind == "native" else encode_rows
        payloads = [encode(rows.take(3)) for _ in range(count)]
        prefix = NATIVE_PREFIX if kind == "native" else b""
    body = writer_module._joined([Batch(payload, 3) for payload in payloads])
    assert type(body) is bytes
    assert body == prefix + b"".join(payload[len(prefix) :] for payload in payloads)
    store = ClickHouseStore(f"chdb://{tmp_path / 'chdb'}", "joined")
    store.migrate()
    store.insert_rows(body)
    counted = store.query(
        "SELECT count() FROM {db}.otel_logs"
        if kind == "logs"
        else "SELECT count() FROM {db}.otel_traces"
    )
    assert counted == [(3 * count,)]
    store.close()


class _Refusing(_Recording):
    """The real store, refusing as malformed any insert holding ``poison`` (what ClickHouse
    answers a row it cannot take), or everything Native."""

    def __init__(self, store: ClickHouseStore, poison: bytes, native_too: bool = False) -> None:
        super().__init__(store)
        self.poison = poison
        self.native_too = native_too

    def insert_rows(self, payload: bytes) -> None:
        from clickhouse_connect.driver.exceptions import DatabaseError

        if self.poison in payload or (self.native_too and is_native_payload(payload)):
            raise DatabaseError("Code: 27. DB::Exception: Cannot parse input. (CANNOT_PARSE_INPUT)")
        super().insert_rows(payload)


@pytest.mark.parametrize("where", [0, 7, 19])
def test_a_refused_row_of_a_block_is_dead_lettered_as_json_and_the_rest_stored(
    tmp_path: Path, where: int
) -> None:
    store = ClickHouseStore(f"chdb://{tmp_path / 'chdb'}", "refused")
    store.migrate()
    records = _Rows().take(20)
    records[where].span_name = "poison-row"
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 30, fsync=False, retry_after_s=1)
    wal.open()
    _append(wal, records[:12])
    _append(wal, records[12:])
    refusing = _Refusing(store, b"poison-row")
    writer = BatchWriter(refusing, wal, max_rows=1000, interval_s=3600)
    assert writer.flush()
    stored = {span for (span,) in store.query("SELECT SpanId FROM {db}.otel_traces FINAL")}
    assert stored == {r.span_id for r in records} - {records[where].span_id}
    (line,) = (tmp_path / "wal" / "dead-letter.jsonl").read_bytes().splitlines()
    assert line == encode_rows([records[where]]).rstrip(b"\n"), "the row, as JSON"
    assert writer.dead_lettered_rows == 1
    wal.close()
    store.close()


def test_a_refused_batch_that_does_not_read_as_blocks_is_set_aside_whole(tmp_path: Path) -> None:
    store = ClickHouseStore(f"chdb://{tmp_path / 'chdb'}", "unreadable")
    store.migrate()
    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 30, fsync=False, retry_after_s=1)
    wal.open()
    rows = _Rows()
    whole, cut = encode_block(rows.take(2)), encode_block(rows.take(3))
    damaged = whole + cut[len(NATIVE_PREFIX) : -5]  # a readable block, then one cut short
    asyncio.run(wal.append(Batch(damaged, 5)))  # (the log's CRC holds: written so)
    writer = BatchWriter(_Refusing(store, b"-", native_too=True), wal, max_rows=100, interval_s=1)
    assert writer.flush(), "the log moves on"
    assert (tmp_path / "wal" / NATIVE_DEAD_LETTER).read_bytes() == damaged
    assert wal.ready_rows == 0
    assert (writer.dead_lettered_rows, writer.inserted_rows) == (5, 0)
    wal.close()
    store.close()
