"""The testbed's check of acknowledged rows left in the write-ahead log reads the log the
collector writes (any record format, past a damaged record), so a drain check cannot pass
because it read nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.blocks import encode_block
from collector.model import encode_rows
from testbed.validator import pending_in_log
from tests.records import span_record
from tests.unit.collector.test_wal_recovery import write_log


@pytest.mark.parametrize("encode", [encode_block, encode_rows], ids=["native", "json"])
def test_rows_left_in_the_log_are_found_also_past_a_damaged_record(
    tmp_path: Path, encode: Any
) -> None:
    spans = [span_record(span_id=f"{i:016x}") for i in range(6)]
    payloads = [encode([span]) for span in spans]
    segment = write_log(tmp_path / "wal", payloads)
    expected = [(s.project_id, s.trace_id, s.span_id) for s in spans]
    assert pending_in_log(tmp_path) == expected

    data = bytearray(segment.read_bytes())
    third = data.index(payloads[2])
    data[third + 5] ^= 0x01  # one flipped bit inside the third record
    segment.write_bytes(bytes(data))
    assert pending_in_log(tmp_path) == expected[:2] + expected[3:]
