"""Spans written as Native blocks (ADR 54) are stored exactly as the JSON rows they replace:
every column, every kind of value, the varint boundaries of string lengths, values out of a
column's range; blocks read back into the same JSON rows; a record's rows are counted
without reading it; bytes that are not blocks are refused, never misread."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from collector.blocks import (
    NATIVE_PREFIX,
    NATIVE_TYPES,
    BlockError,
    block_rows,
    encode_block,
    json_lines,
    payload_rows,
)
from collector.log_model import LOGS_PREFIX
from collector.model import COLUMN_NAMES, SpanRecord, encode_rows
from collector.store.client import ClickHouseStore
from tests.records import BASE_NS, span_record

UINT64_MAX = (1 << 64) - 1


def _text(rng: random.Random, size: int) -> str:
    alphabet = 'abc xyz"\\\n\t{}[]:,é中😀\x00\x1f\u2028'
    return "".join(rng.choice(alphabet) for _ in range(size))


def _attributes(rng: random.Random, entries: int) -> dict[str, str]:
    return {f"k{i}.{_text(rng, 3)}": _text(rng, rng.randrange(0, 40)) for i in range(entries)}


def _random_record(rng: random.Random, number: int) -> SpanRecord:
    events = rng.randrange(0, 4)
    links = rng.randrange(0, 3)
    return span_record(
        timestamp_ns=BASE_NS + rng.randrange(0, 10**12),
        span_id=f"{number:016x}",
        parent_span_id=rng.choice(("", f"{number + 1:016x}")),
        trace_state=_text(rng, rng.randrange(0, 5)),
        span_name=_text(rng, rng.randrange(0, 30)),
        resource_attributes=_attributes(rng, rng.randrange(0, 5)),
        span_attributes=_attributes(rng, rng.randrange(0, 12)),
        duration_ns=rng.choice((0, 1, rng.randrange(0, 1 << 63), UINT64_MAX)),
        status_code=rng.choice(("Unset", "Ok", "Error")),
        status_message=_text(rng, rng.randrange(0, 20)),
        event_timestamps=[BASE_NS + rng.randrange(0, 10**9) for _ in range(events)],
        event_names=[_text(rng, rng.randrange(0, 10)) for _ in range(events)],
        event_attributes=[_attributes(rng, rng.randrange(0, 3)) for _ in range(events)],
        link_trace_ids=[f"{rng.getrandbits(128):032x}" for _ in range(links)],
        link_span_ids=[f"{rng.getrandbits(64):016x}" for _ in range(links)],
        link_trace_states=[_text(rng, rng.randrange(0, 4)) for _ in range(links)],
        link_attributes=[_attributes(rng, rng.randrange(0, 3)) for _ in range(links)],
        span_type=rng.choice(("llm", "tool", "agent", "other")),
        model=rng.choice(("", "gpt-4o")),
        input_tokens=rng.choice((0, rng.randrange(0, 10**6), UINT64_MAX)),
        output_tokens=rng.randrange(0, 10**4),
        cache_read_tokens=rng.randrange(0, 100),
        reasoning_tokens=rng.randrange(0, 100),
        input=_text(rng, rng.choice((0, 127, 128, 16383, 16384, 20000))),
        output=_text(rng, rng.randrange(0, 300)),
        input_key=rng.choice(("", "input.value")),
        body_attributes=_attributes(rng, rng.randrange(0, 2)),
        redactions=[_text(rng, 12) for _ in range(rng.randrange(0, 3))],
        truncated=rng.random() < 0.3,
        failure_cause=rng.choice(("", "tool_error")),
    )


def _matrix() -> list[list[SpanRecord]]:
    """Batches covering each kind of value: empty and full collections, lengths at the
    varint boundaries (127/128, 16383/16384 bytes, and a 2 MiB body), text beyond ASCII,
    control characters, the UInt64 limits."""
    rng = random.Random(54)
    batches = [[_random_record(rng, n) for n in range(start, start + 40)] for start in (0, 40)]
    boundaries = [
        span_record(span_id=f"{i:016x}", input="x" * size, output="é" * (size // 2))
        for i, size in enumerate((0, 1, 127, 128, 129, 16383, 16384, 2 << 20))
    ]
    return [*batches, boundaries, [span_record()]]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseStore]:
    path = tmp_path_factory.mktemp("blocks")
    opened = ClickHouseStore(f"chdb://{path}/chdb", "afr")
    opened.migrate()
    yield opened
    opened.close()


def test_the_types_sent_are_the_spans_tables_with_low_cardinality_as_string(
    store: ClickHouseStore,
) -> None:
    table = store.query(
        "SELECT name, type FROM system.columns WHERE database = 'afr' AND table = "
        "'otel_traces' ORDER BY position"
    )
    expected = [(name, kind.replace("LowCardinality(String)", "String")) for name, kind in table]
    assert list(NATIVE_TYPES) == expected
    assert [name for name, _ in NATIVE_TYPES] == list(COLUMN_NAMES)


def _stored(store: ClickHouseStore, table: str) -> list[tuple[Any, ...]]:
    return store.query(f"SELECT * FROM afr.{table} ORDER BY SpanId, Input")  # noqa: S608


@pytest.mark.parametrize("index", range(len(_matrix())))
def test_a_block_is_stored_as_the_json_rows_it_replaces(store: ClickHouseStore, index: int) -> None:
    records = _matrix()[index]
    native = encode_block(records)
    assert native.startswith(NATIVE_PREFIX)
    _insert_into(store, f"native_{index}", native)
    _insert_into(store, f"json_{index}", encode_rows(records))
    stored_native = _stored(store, f"native_{index}")
    assert len(stored_native) == len(records)
    assert stored_native == _stored(store, f"json_{index}")


def _insert_into(store: ClickHouseStore, table: str, payload: bytes) -> None:
    """``payload`` through ``insert_rows`` (its settings, its format choice), into a copy of
    the spans table, ``afr.{table}``."""
    store.command(f"CREATE TABLE afr.{table} AS afr.otel_traces ENGINE = MergeTree ORDER BY ()")
    # insert_rows writes to {database}.otel_traces: a database whose table passes it on.
    original, database = store.database, f"t_{table}"
    store.command(f"DROP DATABASE IF EXISTS {database}")
    store.command(f"CREATE DATABASE {database}")
    store.command(f"CREATE TABLE {database}.otel_traces AS afr.otel_traces ENGINE = Null")
    view = f"CREATE MATERIALIZED VIEW {database}.copy TO afr.{table} AS SELECT * FROM "  # noqa: S608
    store.command(view + f"{database}.otel_traces")
    store.database = database
    try:
        store.insert_rows(payload)
    finally:
        store.database = original


@pytest.mark.parametrize("index", range(len(_matrix())))
def test_blocks_read_back_into_the_json_rows(index: int) -> None:
    records = _matrix()[index]
    assert b"".join(json_lines(encode_block(records))) == encode_rows(records)
    ((names, rows),) = block_rows(encode_block(records))
    assert names == COLUMN_NAMES
    assert [row[COLUMN_NAMES.index("SpanId")] for row in rows] == [r.span_id for r in records]


def test_values_out_of_a_columns_range_are_clamped_not_refused() -> None:
    record = span_record(duration_ns=-5, input_tokens=1 << 70, timestamp_ns=1 << 70)
    ((_, (row,)),) = block_rows(encode_block([record]))
    assert row[COLUMN_NAMES.index("Duration")] == 0
    assert row[COLUMN_NAMES.index("InputTokens")] == UINT64_MAX
    assert row[COLUMN_NAMES.index("Timestamp")] == (1 << 63) - 1


def test_records_joined_as_the_writer_joins_them_read_as_all_their_rows() -> None:
    batches = _matrix()
    joined = NATIVE_PREFIX + b"".join(encode_block(b)[len(NATIVE_PREFIX) :] for b in batches)
    assert payload_rows(joined) == sum(len(b) for b in batches)
    assert len(block_rows(joined)) == len(batches)
    assert b"".join(json_lines(joined)) == b"".join(encode_rows(b) for b in batches)


@pytest.mark.parametrize(
    ("payload", "rows"),
    [
        (encode_rows([span_record(), span_record()]), 2),
        (LOGS_PREFIX + b"[1]\n[2]\n[3]\n", 4),  # the prefix's own line, as the log counted it
        (encode_block([span_record(span_name="a\nb\nc")]), 1),
        (encode_block([]), 0),
    ],
)
def test_a_records_rows_are_counted_in_each_format(payload: bytes, rows: int) -> None:
    assert payload_rows(payload) == rows


def test_bytes_that_are_not_blocks_are_refused_at_every_cut() -> None:
    payload = encode_block([span_record(span_attributes={"k": "v"}), span_record()])
    assert block_rows(payload[: len(NATIVE_PREFIX)]) == []  # no block: no rows
    for cut in range(len(NATIVE_PREFIX) + 1, len(payload)):
        with pytest.raises(BlockError):
            block_rows(payload[:cut])
        # Counting never raises: the rows of the blocks before the damage (none here).
        assert payload_rows(payload[:cut]) == 0
    with pytest.raises(BlockError, match="NATIVE_PREFIX"):
        block_rows(encode_rows([span_record()]))
    wrong_type = payload.replace(b"\x06UInt64", b"\x06Int128", 1)
    with pytest.raises(BlockError, match="type"):
        block_rows(wrong_type)
    not_utf8 = payload.replace(b"\x04step", b"\x04st\xffp", 1)
    with pytest.raises(BlockError, match="UTF-8"):
        json_lines(not_utf8)


def test_a_block_of_columns_not_the_tables_is_not_read_as_rows() -> None:
    payload = encode_block([span_record()])
    swapped = payload.replace(b"\x07TraceId", b"\x07TraceIx", 1)
    assert block_rows(swapped)  # a block, but not of these columns in this order
    with pytest.raises(BlockError, match="columns"):
        json_lines(swapped)


def test_spans_are_stored_from_a_block_with_the_tables_views(store: ClickHouseStore) -> None:
    records = [span_record(span_id=f"{i:016x}", span_name=f"step {i}") for i in range(3)]
    store.insert_rows(encode_block(records))
    rows = store.query("SELECT SpanName FROM {db}.otel_traces ORDER BY SpanName")
    assert rows == [("step 0",), ("step 1",), ("step 2",)]
    # The materialized views read the block as they read JSON rows: the run is summarized.
    (runs,) = store.query(
        "SELECT count() FROM {db}.runs WHERE TraceId = {t:String}", {"t": records[0].trace_id}
    )
    assert runs == (1,)
    assert orjson.loads(json_lines(encode_block(records[:1]))[0])[5] == "step 0"
