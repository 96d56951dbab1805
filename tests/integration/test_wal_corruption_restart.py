"""A collector restarting on a write-ahead log with a damaged record in the middle stores
every other acknowledged span and says on /healthz that it skipped one (ADR 28)."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc

from tests.integration.conftest import start_collector
from tests.integration.test_collector_faults import _health, _names, _send


def test_a_restart_skips_a_corrupt_record_and_keeps_the_ones_after_it(tmp_path: Path) -> None:
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
    (segment,) = [path for path in copied.iterdir() if b'"span 3"' in path.read_bytes()]
    data = bytearray(segment.read_bytes())
    data[data.index(b'"span 3"') + 2] ^= 0x01  # one flipped bit in the third of five records
    segment.write_bytes(data)

    thread, second = start_collector(tmp_path / "second")
    try:
        assert second.collector.recovered_rows == 4
        assert _names(second) == {"span 1", "span 2", "span 4", "span 5"}
        status, health = _health(second)
        assert (status, health["wal_corrupt_records_skipped"]) == (200, 1)
    finally:
        thread.stop()
