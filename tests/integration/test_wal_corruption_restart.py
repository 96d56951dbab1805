"""A collector restarting on a write-ahead log with a damaged record in the middle stores
every other acknowledged span once, says where and how much it skipped in a warning, and
counts it on /healthz (ADR 28)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import grpc
import pytest

from collector.store.wal import read_segment
from tests.integration.conftest import start_collector
from tests.integration.test_collector_faults import _health, _send
from tests.integration.test_collector_ingest import TRACE

RECORD_HEADER = 16  # marker, length, length check, CRC


def test_a_restart_skips_a_corrupt_record_and_keeps_the_ones_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    thread, first = start_collector(tmp_path / "first")
    copied = tmp_path / "second" / "wal"
    try:
        first.store.failing = True  # everything acknowledged stays in the log
        for number in range(1, 6):
            assert _send(first, f"span {number}", number) == grpc.StatusCode.OK
        # The log as a collector killed now would leave it (every record is fsynced).
        copied.mkdir(parents=True, mode=0o700)
        for segment in (tmp_path / "first" / "wal").glob("segment-*.wal"):
            shutil.copy(segment, copied / segment.name)
        first.store.failing = False
    finally:
        thread.stop()
    (segment,) = [path for path in copied.iterdir() if b"span 3" in path.read_bytes()]
    data = bytearray(segment.read_bytes())
    (hit,) = [p for p in read_segment(segment).payloads if b"span 3" in p]
    start = data.index(hit) - RECORD_HEADER
    data[data.index(b"span 3") + 1] ^= 0x01  # one flipped bit in the third of five records
    segment.write_bytes(data)

    with caplog.at_level(logging.WARNING, logger="afr.collector.wal"):
        thread, second = start_collector(tmp_path / "second")
    try:
        assert second.collector.recovered_rows == 4, "each intact record once"
        names = [span["name"] for span in second.run(TRACE.hex())["spans"]]
        assert sorted(names) == ["span 1", "span 2", "span 4", "span 5"]
        status, health = _health(second)
        assert status == 200
        assert health["wal_corrupt_records_skipped"] == 1
        assert health["wal_corrupt_bytes_skipped"] == RECORD_HEADER + len(hit)
    finally:
        thread.stop()
    end = start + RECORD_HEADER + len(hit)
    warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert any(f"at bytes {start}-{end};" in message for message in warnings), warnings
