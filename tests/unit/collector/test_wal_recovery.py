"""Recovery of the write-ahead log from damage inside a segment (ADR 28).

A damaged record costs only itself: every intact record around it comes back exactly once,
in order, and nothing damaged comes back. The matrix covers each field of a record (marker,
length, length check, CRC, payload) in the first, a middle (the 16th of 30), the
last-but-one and the last record, a checked length pointing past the end of the file,
damage spanning records (two in a row, three apart, every other one, a zeroed page), damage
next to a torn tail, payloads that hold the marker, a damaged segment header and segments
in the format before the marker.
Sweeps flip every byte, cut the file at every length and zero a window at every offset of a
small log.

The on-disk format is written out here on purpose, apart from the module: a change to it
must be a decision (and a reader for the old one), not a side effect.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.store.wal import Batch, WriteAheadLog, read_segment

SEGMENT_HEADER = b"\xffAFRWAL\x02"
MARKER = b"\xfeREC"
RECORD = struct.Struct("<4sIII")  # marker, length, length ^ 0xffffffff, crc32(payload)
FORMAT_1 = struct.Struct("<II")  # length, crc32(payload), no segment header
RECORDS = 30
FIRST, MIDDLE, LAST_BUT_ONE, LAST = 0, 15, RECORDS - 2, RECORDS - 1  # MIDDLE: 16th of 30
WHERE = [("first", FIRST), ("middle", MIDDLE), ("last-but-one", LAST_BUT_ONE), ("last", LAST)]


def rows(count: int = RECORDS) -> list[bytes]:
    """Payloads like the collector's (JSONCompactEachRow), each distinct, of varied sizes."""
    return [
        b'["shop","%032x","span %02d","%s"]\n' % (number, number, b"x" * (200 + 37 * number % 300))
        for number in range(count)
    ]


def write_log(directory: Path, payloads: list[bytes]) -> Path:
    """The payloads appended through the log itself; the one segment file they are in."""
    wal = WriteAheadLog(directory, max_bytes=1 << 30, fsync=False, retry_after_s=1)
    wal.open()

    async def append_all() -> None:
        for payload in payloads:
            await wal.append(Batch(payload, payload.count(b"\n")))

    asyncio.run(append_all())
    wal.close()
    (segment,) = directory.glob("segment-*.wal")
    return segment


@dataclass
class Recovered:
    payloads: list[bytes]
    rows: int
    corrupt_records: int
    corrupt_bytes: int


def recover(directory: Path) -> Recovered:
    """What a collector restarting on ``directory`` would insert."""
    wal = WriteAheadLog(directory, max_bytes=1 << 30, fsync=False, retry_after_s=1)
    recovered_rows = wal.open()
    try:
        payloads = [batch.payload for batch in wal.take()]
    finally:
        wal.close()
    return Recovered(
        payloads, recovered_rows, wal.corrupt_records_skipped, wal.corrupt_bytes_skipped
    )


@dataclass
class Layout:
    """Where each record of a freshly written segment starts and ends."""

    starts: list[int]
    ends: list[int]

    def payload(self, index: int) -> int:
        return self.starts[index] + RECORD.size

    def size(self, index: int) -> int:
        return self.ends[index] - self.starts[index]


def layout_of(data: bytes | bytearray, payloads: list[bytes]) -> Layout:
    assert data.startswith(SEGMENT_HEADER)
    starts, ends = [], []
    offset = len(SEGMENT_HEADER)
    for payload in payloads:
        header = RECORD.pack(MARKER, len(payload), len(payload) ^ 0xFFFFFFFF, zlib.crc32(payload))
        assert data[offset : offset + RECORD.size] == header, "the format this file pins"
        assert data[offset + RECORD.size : offset + RECORD.size + len(payload)] == payload
        starts.append(offset)
        offset += RECORD.size + len(payload)
        ends.append(offset)
    assert offset == len(data)
    return Layout(starts, ends)


def set_length(data: bytearray, start: int, length: int) -> None:
    """A length that passes the length check: only the CRC or the file's end can tell."""
    struct.pack_into("<II", data, start + 4, length, length ^ 0xFFFFFFFF)


Damage = Callable[[bytearray, Layout], bytearray]


def flip(field_offset: int | None, *indexes: int, mask: int = 0x01) -> Damage:
    """Flips bits of one byte of each record: at ``field_offset`` into the record, or in the
    middle of its payload."""

    def damage(data: bytearray, layout: Layout) -> bytearray:
        for index in indexes:
            if field_offset is None:
                at = layout.payload(index) + (layout.ends[index] - layout.payload(index)) // 2
            else:
                at = layout.starts[index] + field_offset
            data[at] ^= mask
        return data

    return damage


def length_to(length_of: Callable[[bytearray, Layout, int], int], index: int) -> Damage:
    def damage(data: bytearray, layout: Layout) -> bytearray:
        set_length(data, layout.starts[index], length_of(data, layout, index))
        return data

    return damage


def past_the_end(data: bytearray, layout: Layout, index: int) -> int:
    return len(data) - layout.payload(index) + 1


def huge(data: bytearray, layout: Layout, index: int) -> int:
    return 0x7FFFFFFF


def shorter(data: bytearray, layout: Layout, index: int) -> int:
    return layout.size(index) - RECORD.size - 10


def longer(data: bytearray, layout: Layout, index: int) -> int:
    return layout.size(index) - RECORD.size + 100


def then(*damages: Damage) -> Damage:
    def damage(data: bytearray, layout: Layout) -> bytearray:
        for each in damages:
            data = each(data, layout)
        return data

    return damage


def cut_inside(index: int, into_record: int) -> Damage:
    """The file ends ``into_record`` bytes into record ``index``: a write the crash cut."""

    def damage(data: bytearray, layout: Layout) -> bytearray:
        return data[: layout.starts[index] + into_record]

    return damage


def zeros_from(index: int) -> Damage:
    """Zeros from the start of record ``index`` to the end: space allocated, not written."""

    def damage(data: bytearray, layout: Layout) -> bytearray:
        start = layout.starts[index]
        data[start:] = bytes(len(data) - start)
        return data

    return damage


MARKER_AT, LENGTH_AT, CHECK_AT, CRC_AT, PAYLOAD = 0, 4, 8, 12, None

# (damage, records lost, records of them counted as corrupt: the rest is a torn tail)
MATRIX: dict[str, tuple[Damage, set[int], set[int]]] = {
    **{
        f"{field} of the {where} record": (flip(at, index, mask=0x20), {index}, {index})
        for field, at in [
            ("payload byte", PAYLOAD),
            ("marker", MARKER_AT),
            ("length low byte", LENGTH_AT),
            ("length high byte", LENGTH_AT + 3),
            ("length check", CHECK_AT),
            ("crc", CRC_AT),
        ]
        for where, index in WHERE
    },
    **{
        f"checked length {name} in the {where} record": (length_to(length, index), {index}, {index})
        for name, length in [("shorter", shorter), ("longer", longer)]
        for where, index in WHERE[:3]
    },
    **{
        f"checked length {name} in the {where} record": (length_to(length, index), {index}, {index})
        for name, length in [("past the end", past_the_end), ("huge", huge)]
        for where, index in WHERE[:3]
    },
    "checked length shorter in the last record": (length_to(shorter, LAST), {LAST}, {LAST}),
    # A checked length past the end in the last record is what a torn write looks like.
    "checked length past the end in the last record": (
        length_to(past_the_end, LAST),
        {LAST},
        set(),
    ),
    "two in a row (payloads)": (flip(PAYLOAD, 15, 16), {15, 16}, {15, 16}),
    "two in a row (marker, then crc)": (
        then(flip(MARKER_AT, 15), flip(CRC_AT, 16)),
        {15, 16},
        {15, 16},
    ),
    "two apart": (flip(PAYLOAD, 3, 20), {3, 20}, {3, 20}),
    "three apart (payload, length, crc)": (
        then(flip(PAYLOAD, FIRST), flip(LENGTH_AT, MIDDLE), flip(CRC_AT, LAST_BUT_ONE)),
        {FIRST, MIDDLE, LAST_BUT_ONE},
        {FIRST, MIDDLE, LAST_BUT_ONE},
    ),
    "the first two (marker, then payload)": (
        then(flip(MARKER_AT, 0, mask=0xFF), flip(PAYLOAD, 1)),
        {0, 1},
        {0, 1},
    ),
    "every other record": (
        flip(PAYLOAD, *range(0, RECORDS, 2)),
        set(range(0, RECORDS, 2)),
        set(range(0, RECORDS, 2)),
    ),
    "torn tail (cut in the payload)": (cut_inside(LAST, RECORD.size + 20), {LAST}, set()),
    "torn tail (cut in the header)": (cut_inside(LAST, 7), {LAST}, set()),
    "torn tail (zeros to the end)": (zeros_from(LAST), {LAST}, set()),
    "corrupt record, then a torn tail": (
        then(flip(PAYLOAD, LAST - 1), cut_inside(LAST, RECORD.size + 20)),
        {LAST - 1, LAST},
        {LAST - 1},
    ),
    "corrupt record, then a tail cut in the header": (
        then(flip(CRC_AT, LAST - 1), cut_inside(LAST, 9)),
        {LAST - 1, LAST},
        {LAST - 1},
    ),
}


@pytest.mark.parametrize("case", MATRIX)
def test_every_intact_record_survives_damage_to_others(tmp_path: Path, case: str) -> None:
    damage, lost, counted = MATRIX[case]
    payloads = rows()
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    layout = layout_of(data, payloads)
    segment.write_bytes(damage(data, layout))

    recovered = recover(tmp_path)

    intact = [payload for index, payload in enumerate(payloads) if index not in lost]
    assert recovered.payloads == intact, "every intact record once, in order, nothing else"
    assert len(set(recovered.payloads)) == len(recovered.payloads), "none twice"
    assert recovered.rows == len(intact)
    assert recovered.corrupt_records == len(counted)
    assert recovered.corrupt_bytes == sum(layout.size(index) for index in counted)
    assert read_segment(segment).skipped == stretches_of(layout, counted)


def stretches_of(layout: Layout, indexes: set[int]) -> list[tuple[int, int]]:
    """The byte ranges the records ``indexes`` cover, neighbours joined."""
    stretches: list[tuple[int, int]] = []
    for index in sorted(indexes):
        if stretches and stretches[-1][1] == layout.starts[index]:
            stretches[-1] = (stretches[-1][0], layout.ends[index])
        else:
            stretches.append((layout.starts[index], layout.ends[index]))
    return stretches


def test_damage_is_logged_as_figures_never_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    payloads = rows()
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    layout = layout_of(data, payloads)
    data = flip(PAYLOAD, MIDDLE)(data, layout)
    segment.write_bytes(cut_inside(LAST, 30)(data, layout))

    with caplog.at_level(logging.WARNING, logger="afr.collector.wal"):
        recover(tmp_path)

    messages = [record.getMessage() for record in caplog.records]
    skipped = (
        f"{segment.name}: skipped {layout.size(MIDDLE)} corrupt bytes in 1 places (at least 1 "
        f"records) at bytes {layout.starts[MIDDLE]}-{layout.ends[MIDDLE]}; recovered the "
        f"{RECORDS - 2} intact records"
    )
    assert any(skipped in message for message in messages), messages
    assert any(f"torn record at byte {layout.starts[LAST]}" in message for message in messages)
    assert not any("span " in message or "shop" in message for message in messages)


def test_a_warning_names_the_first_stretches_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    payloads = rows()
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    layout = layout_of(data, payloads)
    damaged = list(range(0, RECORDS, 2))  # 15 apart
    segment.write_bytes(flip(PAYLOAD, *damaged)(data, layout))

    with caplog.at_level(logging.WARNING, logger="afr.collector.wal"):
        recover(tmp_path)

    named = ", ".join(f"{layout.starts[i]}-{layout.ends[i]}" for i in damaged[:8])
    (message,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert f"in 15 places (at least 15 records) at bytes {named} and 7 more;" in message


@pytest.mark.parametrize("page_at", [4096, 4096 + 1234], ids=["aligned", "unaligned"])
def test_a_zeroed_page_costs_only_the_records_on_it(tmp_path: Path, page_at: int) -> None:
    payloads = rows()
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    layout = layout_of(data, payloads)
    page_end = page_at + 4096
    assert page_end < layout.starts[LAST], "the page is in the middle"
    data[page_at:page_end] = bytes(4096)
    segment.write_bytes(data)

    recovered = recover(tmp_path)

    lost = {
        index
        for index in range(RECORDS)
        if layout.starts[index] < page_end and layout.ends[index] > page_at
    }
    assert len(lost) >= 10
    assert recovered.payloads == [p for index, p in enumerate(payloads) if index not in lost]
    assert recovered.corrupt_bytes == sum(layout.size(index) for index in lost)
    assert recovered.corrupt_records >= 1, "a lower bound: zeroed headers cannot be counted"


def fake_header(length: int) -> bytes:
    """A marker and a length that passes its check, inside a payload; the CRC is wrong."""
    return MARKER + struct.pack("<III", length, length ^ 0xFFFFFFFF, 0xDEADBEEF)


def with_fake_header(payload: bytes, length: int) -> bytes:
    """The payload with a false record header in place of 16 bytes of its filler."""
    at = payload.index(b"xxx")
    return payload[:at] + fake_header(length) + payload[at + RECORD.size :]


def rows_holding_markers(holder: int) -> list[bytes]:
    """Rows where record ``holder`` holds a false record header whose length reaches over
    the three records after it and ends exactly where a real record starts."""
    payloads = rows()
    plain = payloads[holder]
    after_it = len(plain) - plain.index(b"xxx") - RECORD.size
    reach = sum(RECORD.size + len(p) for p in payloads[holder + 1 : holder + 4])
    payloads[holder] = with_fake_header(plain, after_it + reach)
    assert len(payloads[holder]) == len(plain)
    return payloads


@pytest.mark.parametrize(
    ("damaged", "lost"),
    [
        (None, set()),
        (MIDDLE, {MIDDLE}),  # the record holding the false header
        (MIDDLE - 1, {MIDDLE - 1}),  # the record before it: the resync passes over it
    ],
    ids=["undamaged", "holder damaged", "record before damaged"],
)
def test_a_false_marker_in_a_payload_is_rejected_by_its_crc(
    tmp_path: Path, damaged: int | None, lost: set[int]
) -> None:
    payloads = rows_holding_markers(MIDDLE)
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    layout = layout_of(data, payloads)
    if damaged is not None:
        data = flip(CRC_AT, damaged)(data, layout)
    segment.write_bytes(data)

    recovered = recover(tmp_path)

    assert recovered.payloads == [p for index, p in enumerate(payloads) if index not in lost]
    assert recovered.corrupt_bytes == sum(layout.size(index) for index in lost)


def test_a_false_marker_reaching_past_the_end_does_not_end_the_segment(tmp_path: Path) -> None:
    payloads = rows()
    payloads[MIDDLE] = with_fake_header(payloads[MIDDLE], 1 << 20)
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    segment.write_bytes(flip(PAYLOAD, MIDDLE)(data, layout_of(data, payloads)))

    recovered = recover(tmp_path)

    assert recovered.payloads == payloads[:MIDDLE] + payloads[MIDDLE + 1 :]


@pytest.mark.parametrize(
    ("damage", "lost"),
    [
        (flip(-5, FIRST, mask=0xFF), set()),
        (then(flip(-8, FIRST, mask=0xFF), flip(PAYLOAD, FIRST)), {FIRST}),
    ],
    ids=["header byte", "header and first record"],
)
def test_a_damaged_segment_header_does_not_lose_the_segment(
    tmp_path: Path, damage: Damage, lost: set[int]
) -> None:
    payloads = rows()
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    segment.write_bytes(damage(data, layout_of(data, payloads)))

    recovered = recover(tmp_path)

    assert recovered.payloads == [p for index, p in enumerate(payloads) if index not in lost]
    assert recovered.corrupt_records == len(lost)


# --- segments from before the marker (format 1) ---------------------------------------------


def format_1(payloads: list[bytes]) -> bytes:
    return b"".join(FORMAT_1.pack(len(p), zlib.crc32(p)) + p for p in payloads)


def test_segments_of_format_1_are_recovered_and_new_records_use_format_2(tmp_path: Path) -> None:
    old = rows(12)
    torn = format_1(old[8:])[:-5]  # the upgrade's predecessor crashed mid-write
    (tmp_path / "segment-000000000001.wal").write_bytes(format_1(old[:4]))
    (tmp_path / "segment-000000000002.wal").write_bytes(format_1(old[4:8]) + torn)

    wal = WriteAheadLog(tmp_path, max_bytes=1 << 30, fsync=False, retry_after_s=1)
    assert wal.open() == 11, "every complete record; the torn last one is ignored"
    try:
        batches = wal.take()
        assert [batch.payload for batch in batches] == old[:11]
        wal.release(batches)
        assert not (tmp_path / "segment-000000000001.wal").exists(), "released as before"
        new = b'["shop","new","span after the upgrade"]\n'
        asyncio.run(wal.append(Batch(new, 1)))
    finally:
        wal.close()
    (segment,) = tmp_path.glob("segment-*.wal")
    assert segment.read_bytes().startswith(SEGMENT_HEADER)
    assert read_segment(segment).payloads == [new]


@pytest.mark.parametrize(
    "contents",
    [b"", SEGMENT_HEADER[:5], SEGMENT_HEADER, bytes(4096)],
    ids=["empty", "header cut", "header only", "zeros"],
)
def test_a_segment_with_nothing_complete_recovers_nothing_and_goes(
    tmp_path: Path, contents: bytes
) -> None:
    segment = tmp_path / "segment-000000000001.wal"
    segment.write_bytes(contents)

    recovered = recover(tmp_path)

    assert (recovered.payloads, recovered.corrupt_records) == ([], 0)
    assert not segment.exists()


# --- sweeps over a small log ---------------------------------------------------------------


def small_log(tmp_path: Path) -> tuple[Path, list[bytes], bytes, Layout]:
    payloads = [b'["shop","span %d","%s"]\n' % (n, b"y" * (9 * n)) for n in range(5)]
    segment = write_log(tmp_path / "wal", payloads)
    data = segment.read_bytes()
    return segment, payloads, data, layout_of(data, payloads)


def record_holding(layout: Layout, position: int) -> int | None:
    for index, (start, end) in enumerate(zip(layout.starts, layout.ends, strict=True)):
        if start <= position < end:
            return index
    return None


def test_any_one_byte_flipped_costs_at_most_its_record(tmp_path: Path) -> None:
    segment, payloads, data, layout = small_log(tmp_path)
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0xFF
        segment.write_bytes(damaged)
        read = read_segment(segment)
        hit = record_holding(layout, position)
        intact = [p for index, p in enumerate(payloads) if index != hit]
        assert read.payloads == intact, position
        assert read.corrupt_records == (hit is not None), position
        size = len(SEGMENT_HEADER) if hit is None else layout.size(hit)
        assert read.corrupt_bytes == size, position


def test_a_file_cut_anywhere_keeps_what_precedes_the_cut_quietly(tmp_path: Path) -> None:
    segment, payloads, data, layout = small_log(tmp_path)
    for length in range(len(data) + 1):
        segment.write_bytes(data[:length])
        read = read_segment(segment)
        complete = [p for p, end in zip(payloads, layout.ends, strict=True) if end <= length]
        assert read.payloads == complete, length
        assert (read.corrupt_records, read.corrupt_bytes) == (0, 0), length


def test_a_zeroed_window_anywhere_costs_only_the_records_under_it(tmp_path: Path) -> None:
    segment, payloads, data, layout = small_log(tmp_path)
    for start in range(0, len(data) - 24, 3):
        end = start + 24
        damaged = bytearray(data)
        damaged[start:end] = bytes(end - start)
        segment.write_bytes(damaged)
        read = read_segment(segment)
        intact = [
            p
            for p, first, last in zip(payloads, layout.starts, layout.ends, strict=True)
            if last <= start or first >= end
        ]
        assert read.payloads == intact, start


def test_a_damaged_header_over_a_single_record_still_reads_it(tmp_path: Path) -> None:
    payloads = rows(1)
    segment = write_log(tmp_path, payloads)
    data = bytearray(segment.read_bytes())
    data[2] ^= 0xFF
    segment.write_bytes(data)

    assert recover(tmp_path).payloads == payloads
