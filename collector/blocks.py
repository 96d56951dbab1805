"""Span rows as ClickHouse Native blocks: the write-ahead log's records and the inserts'
bodies (ADR 54).

A request's spans are written as one Native block, column after column, the values as
ClickHouse holds them in memory: a string is its length and its bytes, a number its eight
bytes, a map the running count of its entries, then its keys, then its values. The insert
then has nothing to parse: into the spans table with its views, ClickHouse takes ~5 us of
the collector's CPU per row less than for the same rows as JSON (``model.encode_rows``;
~14 into a table that stores nothing), and building the columns costs the ingest workers
less than writing the JSON did (0.75-0.85x).

A block is what ClickHouse's Native format reads at protocol revision 0 (chDB, the HTTP
interface): the number of columns and of rows (LEB128 varints), then for each column its
name, its type and its values. The spans table's ``LowCardinality(String)`` columns are sent
as ``String`` and converted by the insert (``input_format_native_allow_types_conversion``):
a dictionary per block would be the encoder's work for nothing. Blocks concatenate: the
writer joins the records of one insert, and each record keeps ``NATIVE_PREFIX`` (no JSON
row begins with it) so the log, the writer and the store know its format.

``json_lines`` reads blocks back into the JSON rows ``encode_rows`` writes, for what handles
single rows: a batch the store refuses is bisected row by row and the rows it refuses alone
go to the dead-letter file as JSON lines, as before.
"""

from __future__ import annotations

import sys
from array import array
from operator import attrgetter
from typing import Any

import orjson

from collector.model import COLUMNS, SpanRecord

__all__ = [
    "NATIVE_FORMAT",
    "NATIVE_PREFIX",
    "NATIVE_TYPES",
    "BlockError",
    "block_rows",
    "encode_block",
    "is_native_payload",
    "json_lines",
    "payload_rows",
]

NATIVE_FORMAT = "Native"
# A record's first bytes: a control character no JSON row (``[``) or log record starts with.
NATIVE_PREFIX = b"\x1enative\n"

_STRING = 0
_UINT64 = 1
_BOOL = 2
_TIME = 3  # DateTime64(9): nanoseconds as Int64
_TIMES = 4  # Array(DateTime64(9))
_STRINGS = 5  # Array(String)
_MAP = 6  # Map(String, String)
_MAPS = 7  # Array(Map(String, String))

_KIND_OF_TYPE: dict[str, int] = {
    "String": _STRING,
    "UInt64": _UINT64,
    "Bool": _BOOL,
    "DateTime64(9)": _TIME,
    "Array(DateTime64(9))": _TIMES,
    "Array(String)": _STRINGS,
    "Map(String, String)": _MAP,
    "Array(Map(String, String))": _MAPS,
}

# Each column's type as sent: the table's, with LowCardinality(String) as String
# (tests/unit/collector/test_blocks.py holds them to the migrated table).
_TYPE_OF_COLUMN: dict[str, str] = {
    "Timestamp": "DateTime64(9)",
    "ResourceAttributes": "Map(String, String)",
    "SpanAttributes": "Map(String, String)",
    "Duration": "UInt64",
    "Events.Timestamp": "Array(DateTime64(9))",
    "Events.Name": "Array(String)",
    "Events.Attributes": "Array(Map(String, String))",
    "Links.TraceId": "Array(String)",
    "Links.SpanId": "Array(String)",
    "Links.TraceState": "Array(String)",
    "Links.Attributes": "Array(Map(String, String))",
    "InputTokens": "UInt64",
    "OutputTokens": "UInt64",
    "BodyAttributes": "Map(String, String)",
    "Redactions": "Array(String)",
    "Truncated": "Bool",
    "IngestedAt": "DateTime64(9)",
    "CacheReadTokens": "UInt64",
    "CacheCreationTokens": "UInt64",
    "ReasoningTokens": "UInt64",
}
NATIVE_TYPES: tuple[tuple[str, str], ...] = tuple(
    [(name, _TYPE_OF_COLUMN.get(name, "String")) for name, _ in COLUMNS]
)

_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_LITTLE = sys.byteorder == "little"
_SMALL = [bytes((size,)) for size in range(128)]  # a varint below 128 is its one byte
_row_of = attrgetter(*[field for _, field in COLUMNS])


class BlockError(ValueError):
    """Bytes that are not blocks ``encode_block`` writes (cut short, another layout)."""


def _varint(size: int) -> bytes:
    if size < 128:
        return _SMALL[size]
    out = bytearray()
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


def _header(name: str, type_name: str) -> bytes:
    encoded_name, encoded_type = name.encode(), type_name.encode()
    return _varint(len(encoded_name)) + encoded_name + _varint(len(encoded_type)) + encoded_type


_HEADERS: tuple[bytes, ...] = tuple([_header(name, type_name) for name, type_name in NATIVE_TYPES])
_KINDS: tuple[int, ...] = tuple([_KIND_OF_TYPE[type_name] for _, type_name in NATIVE_TYPES])


def _numbers(values: list[int], code: str) -> bytes:
    numbers = array(code, values)
    if not _LITTLE:
        numbers.byteswap()
    return numbers.tobytes()


def _unsigned(value: int) -> int:
    """``value`` within UInt64 (the processors clamp them already: a record built elsewhere
    never makes the block unwritable)."""
    if value < 0:
        return 0
    return value if value <= _UINT64_MAX else _UINT64_MAX


def _signed(value: int) -> int:
    if value < _INT64_MIN:
        return _INT64_MIN
    return value if value <= _INT64_MAX else _INT64_MAX


def _strings(parts: list[bytes], values: list[str]) -> None:
    for value in values:
        data = value.encode()
        size = len(data)
        parts.append(_SMALL[size] if size < 128 else _varint(size))
        parts.append(data)


def _offsets(parts: list[bytes], sizes: list[int]) -> None:
    """An array column's running ends (UInt64), from each row's length."""
    end = 0
    ends: list[int] = []
    for size in sizes:
        end += size
        ends.append(end)
    parts.append(_numbers(ends, "Q"))


def _maps(parts: list[bytes], maps: list[dict[str, str]]) -> None:
    _offsets(parts, [len(entries) for entries in maps])
    keys: list[str] = []
    values: list[str] = []
    for entries in maps:
        keys.extend(entries)
        values.extend(entries.values())
    _strings(parts, keys)
    _strings(parts, values)


def encode_block(records: list[SpanRecord]) -> bytes:
    """The records as one Native block in ``COLUMNS`` order, after ``NATIVE_PREFIX``."""
    rows: list[tuple[Any, ...]] = [_row_of(record) for record in records]
    parts: list[bytes] = [NATIVE_PREFIX, _varint(len(_KINDS)), _varint(len(rows))]
    for index, kind in enumerate(_KINDS):
        parts.append(_HEADERS[index])
        column: list[Any] = [row[index] for row in rows]
        if kind == _STRING:
            _strings(parts, column)
        elif kind == _MAP:
            _maps(parts, column)
        elif kind == _UINT64:
            parts.append(_numbers([_unsigned(value) for value in column], "Q"))
        elif kind == _TIME:
            parts.append(_numbers([_signed(value) for value in column], "q"))
        elif kind == _BOOL:
            parts.append(bytes([1 if value else 0 for value in column]))
        elif kind == _STRINGS:
            _offsets(parts, [len(values) for values in column])
            _strings(parts, [value for values in column for value in values])
        elif kind == _TIMES:
            _offsets(parts, [len(values) for values in column])
            parts.append(_numbers([_signed(value) for values in column for value in values], "q"))
        else:  # _MAPS
            _offsets(parts, [len(maps) for maps in column])
            _maps(parts, [entries for maps in column for entries in maps])
    return b"".join(parts)


def is_native_payload(payload: bytes) -> bool:
    return payload.startswith(NATIVE_PREFIX)


# --- reading blocks back -------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def varint(self) -> int:
        result = shift = 0
        data = self.data
        while True:
            if self.pos >= len(data) or shift > 63:
                raise BlockError("a varint cut short")
            byte = data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise BlockError("a block cut short")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def text(self) -> str:
        try:
            return self.take(self.varint()).decode("utf-8")
        except UnicodeDecodeError:
            raise BlockError("a string that is not UTF-8") from None

    def numbers(self, count: int, code: str) -> list[int]:
        numbers = array(code)
        numbers.frombytes(self.take(8 * count))
        if not _LITTLE:
            numbers.byteswap()
        return numbers.tolist()

    def texts(self, count: int) -> list[str]:
        return [self.text() for _ in range(count)]

    def lengths(self, count: int) -> list[int]:
        ends = self.numbers(count, "Q")
        return [end - start for start, end in zip([0, *ends], ends, strict=False)]

    def maps(self, count: int) -> list[dict[str, str]]:
        lengths = self.lengths(count)
        total = sum(lengths)
        keys, values = self.texts(total), self.texts(total)
        maps: list[dict[str, str]] = []
        at = 0
        for length in lengths:
            maps.append(dict(zip(keys[at : at + length], values[at : at + length], strict=True)))
            at += length
        return maps


def _skip_strings(reader: _Reader, count: int) -> None:
    for _ in range(count):
        size = reader.varint()  # (read before ``pos`` is: the varint moves it)
        reader.pos += size
    if reader.pos > len(reader.data):
        raise BlockError("a block cut short")


def _last_end(reader: _Reader, rows: int) -> int:
    """Skips an array column's ends (UInt64), giving the last: the elements of all rows."""
    if rows == 0:
        return 0
    reader.pos += 8 * (rows - 1)
    return reader.numbers(1, "Q")[0]


def _skip(reader: _Reader, kind: int, rows: int) -> None:
    if kind == _STRING:
        _skip_strings(reader, rows)
    elif kind in (_UINT64, _TIME):
        reader.take(8 * rows)
    elif kind == _BOOL:
        reader.take(rows)
    elif kind == _MAP:
        _skip_strings(reader, 2 * _last_end(reader, rows))
    elif kind == _STRINGS:
        _skip_strings(reader, _last_end(reader, rows))
    elif kind == _TIMES:
        reader.take(8 * _last_end(reader, rows))
    else:  # _MAPS
        _skip(reader, _MAP, _last_end(reader, rows))


def payload_rows(payload: bytes) -> int:
    """How many rows a record or an insert body holds: its blocks' rows, or (JSON rows, log
    rows) one per line. A block that does not read (never one the workers wrote: the log
    checks each record's CRC) counts the rows of the blocks before it."""
    if not is_native_payload(payload):
        return payload.count(b"\n")
    reader = _Reader(payload, len(NATIVE_PREFIX))
    total = 0
    try:
        while reader.pos < len(payload):
            width, rows = reader.varint(), reader.varint()
            for _ in range(width):
                reader.text()
                kind = _KIND_OF_TYPE.get(reader.text())
                if kind is None:
                    return total
                _skip(reader, kind, rows)
            total += rows
    except BlockError:
        pass
    return total


def _split(values: list[Any], lengths: list[int]) -> list[list[Any]]:
    out: list[list[Any]] = []
    at = 0
    for length in lengths:
        out.append(values[at : at + length])
        at += length
    return out


def _column(reader: _Reader, kind: int, rows: int) -> list[Any]:
    if kind == _STRING:
        return reader.texts(rows)
    if kind == _UINT64:
        return reader.numbers(rows, "Q")
    if kind == _TIME:
        return reader.numbers(rows, "q")
    if kind == _BOOL:
        return [byte != 0 for byte in reader.take(rows)]
    if kind == _MAP:
        return reader.maps(rows)
    lengths = reader.lengths(rows)
    if kind == _STRINGS:
        return _split(reader.texts(sum(lengths)), lengths)
    if kind == _TIMES:
        return _split(reader.numbers(sum(lengths), "q"), lengths)
    return _split(reader.maps(sum(lengths)), lengths)


def block_rows(payload: bytes) -> list[tuple[tuple[str, ...], list[list[Any]]]]:
    """Each block of ``payload`` (``NATIVE_PREFIX``, then blocks back to back: a record, or
    records joined) as (its column names, its rows): strings, ints (times in nanoseconds),
    bools, dicts, lists. Raises ``BlockError`` on bytes that are not such blocks."""
    if not is_native_payload(payload):
        raise BlockError("not Native blocks (no NATIVE_PREFIX)")
    reader = _Reader(payload, len(NATIVE_PREFIX))
    blocks: list[tuple[tuple[str, ...], list[list[Any]]]] = []
    while reader.pos < len(payload):
        width, rows = reader.varint(), reader.varint()
        names: list[str] = []
        columns: list[list[Any]] = []
        for _ in range(width):
            name, type_name = reader.text(), reader.text()
            kind = _KIND_OF_TYPE.get(type_name)
            if kind is None:
                raise BlockError(f"column {name!r} has a type no span block has: {type_name}")
            names.append(name)
            columns.append(_column(reader, kind, rows))
        blocks.append((tuple(names), [list(row) for row in zip(*columns, strict=True)]))
    return blocks


def _datetime64(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


_TIME_COLUMNS = frozenset(
    [name for name, type_name in NATIVE_TYPES if type_name == "DateTime64(9)"]
)
_COLUMN_NAMES = tuple([name for name, _ in COLUMNS])


def json_lines(payload: bytes) -> list[bytes]:
    """The rows of ``payload``'s blocks as the JSON lines ``model.encode_rows`` writes (each
    ending in a newline). Raises ``BlockError`` on bytes that are not span blocks, or a block
    whose columns are not the first of ``COLUMNS`` in order."""
    lines: list[bytes] = []
    for names, rows in block_rows(payload):
        if names != _COLUMN_NAMES[: len(names)]:
            raise BlockError("a block's columns are not the spans table's, in order")
        times = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
        events = names.index("Events.Timestamp") if "Events.Timestamp" in names else -1
        for row in rows:
            for index in times:
                row[index] = _datetime64(row[index])
            if events >= 0 and row[events]:
                row[events] = [_datetime64(ns) for ns in row[events]]
            lines.append(orjson.dumps(row) + b"\n")
    return lines
