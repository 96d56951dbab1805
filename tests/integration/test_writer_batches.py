"""The writer's inserts under load: one insert per interval (or per full batch), never a
drain that sends what arrived during the last insert as a small one of its own. Small
inserts are small parts: more files, fsyncs and merges for the same rows (ADR 43)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from collector.model import SpanRecord, encode_rows
from collector.store import writer as writer_module
from collector.store.client import ClickHouseStore
from collector.store.wal import Batch, WriteAheadLog
from collector.store.writer import BatchWriter
from tests.integration.test_run_summary import _random_run
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
        self.sizes.append(payload.count(b"\n"))

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
    asyncio.run(wal.append(Batch(encode_rows(records), len(records))))


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
