"""Native format for clients that send ``client_protocol_version``.

chDB writes Native as for protocol revision 0. A ClickHouse server answering an HTTP request
with ``client_protocol_version=N`` writes each block as for revision N: a block-info header
first (N > 0) and, from revision 54454, a "custom serialization" flag after each column's
type. clickhouse-go (so Grafana's ClickHouse datasource over HTTP) always asks for 54460 and
decodes exactly that; clickhouse-connect asks for 54405 and checks for the header.

The column data itself is the same (chDB writes the default serialization, flag 0), so the
transcoder only has to find where each column ends: it walks the data by type, copying bytes,
and refuses types whose layout it does not know (aggregate states, Dynamic, JSON, Variant).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from collector.sqlapi.errors import Code, SqlError

__all__ = ["CUSTOM_SERIALIZATION_REVISION", "NativeTranscoded", "transcode"]

CUSTOM_SERIALIZATION_REVISION = 54454
# BlockInfo as a server writes it: field 1 is_overflows=false, field 2 bucket_num=-1, end.
BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"

_FIXED_WIDTH = {
    "UInt8": 1,
    "Int8": 1,
    "Bool": 1,
    "Enum8": 1,
    "UInt16": 2,
    "Int16": 2,
    "Date": 2,
    "BFloat16": 2,
    "Enum16": 2,
    "UInt32": 4,
    "Int32": 4,
    "Float32": 4,
    "Date32": 4,
    "DateTime": 4,
    "IPv4": 4,
    "Time": 4,
    "Decimal32": 4,
    "UInt64": 8,
    "Int64": 8,
    "Float64": 8,
    "DateTime64": 8,
    "Time64": 8,
    "Decimal64": 8,
    "UInt128": 16,
    "Int128": 16,
    "UUID": 16,
    "IPv6": 16,
    "Decimal128": 16,
    "UInt256": 32,
    "Int256": 32,
    "Decimal256": 32,
    # A Nothing column carries one placeholder byte per row.
    "Nothing": 1,
}
_ALIASES = {
    "Point": "Tuple(Float64, Float64)",
    "Ring": "Array(Point)",
    "LineString": "Array(Point)",
    "MultiLineString": "Array(LineString)",
    "Polygon": "Array(Ring)",
    "MultiPolygon": "Array(Polygon)",
}


@dataclass(frozen=True)
class NativeTranscoded:
    body: bytes
    rows: int


class _NotTranscodable(Exception):
    pass


@dataclass(frozen=True)
class _Type:
    """A parsed type name: enough structure to skip its data."""

    name: str
    args: tuple[str, ...]


def _parse(type_name: str) -> _Type:
    type_name = type_name.strip()
    type_name = _ALIASES.get(type_name, type_name)
    paren = type_name.find("(")
    if paren < 0:
        return _Type(type_name, ())
    if not type_name.endswith(")"):
        raise _NotTranscodable(type_name)
    return _Type(type_name[:paren].strip(), tuple(_split_args(type_name[paren + 1 : -1])))


def _split_args(text: str) -> list[str]:
    args: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "'`\"":
            i = _skip_quoted(text, i, c)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    args.append(text[start:].strip())
    return args


def _skip_quoted(text: str, start: int, quote: str) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == quote:
            return i + 1
        else:
            i += 1
    return i


_ELEMENT_NAME = re.compile(r"^(?:`(?:[^`\\]|\\.)*`|[A-Za-z_][A-Za-z0-9_.]*)\s+(?=\S)")


def _element_type(arg: str) -> str:
    """``name Type`` (a named Tuple or Nested element) -> ``Type``."""
    match = _ELEMENT_NAME.match(arg)
    return arg[match.end() :] if match is not None else arg


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def varint(self) -> int:
        result, shift = 0, 0
        data = self.data
        while True:
            byte = data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7

    def uint64(self) -> int:
        value = int.from_bytes(self.data[self.pos : self.pos + 8], "little")
        self.advance(8)
        return value

    def advance(self, size: int) -> None:
        if self.pos + size > len(self.data):
            raise IndexError("Native data ends inside a column")
        self.pos += size

    def string(self) -> str:
        size = self.varint()
        start = self.pos
        self.advance(size)
        return self.data[start : self.pos].decode("utf-8", "replace")


def _skip_prefix(reader: _Reader, kind: _Type) -> None:
    """The serialization state prefixes, written for the whole column before any data."""
    name = kind.name
    if name == "LowCardinality":
        reader.advance(8)  # key serialization version
    elif name in ("Nullable", "Array", "SimpleAggregateFunction"):
        _skip_prefix(reader, _parse(kind.args[-1]))
    elif name == "Map":
        for arg in kind.args:
            _skip_prefix(reader, _parse(arg))
    elif name in ("Tuple", "Nested"):
        for arg in kind.args:
            _skip_prefix(reader, _parse(_element_type(arg)))


def _skip_data(reader: _Reader, kind: _Type, rows: int) -> None:
    if rows == 0:
        return
    skip = _SKIPPERS.get(kind.name)
    if skip is not None:
        skip(reader, kind, rows)
        return
    width = _FIXED_WIDTH.get(kind.name)
    if width is None:
        raise _NotTranscodable(kind.name)
    reader.advance(width * rows)


def _skip_string(reader: _Reader, kind: _Type, rows: int) -> None:
    # The hot loop of a transcode (one varint per row): inlined, with the one-byte length of
    # short strings as the fast path.
    data, pos = reader.data, reader.pos
    for _ in range(rows):
        size = data[pos]
        pos += 1
        if size >= 0x80:
            size &= 0x7F
            shift = 7
            while True:
                byte = data[pos]
                pos += 1
                size |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
        pos += size
    if pos > len(data):
        raise IndexError("Native data ends inside a column")
    reader.pos = pos


def _skip_fixed_string(reader: _Reader, kind: _Type, rows: int) -> None:
    reader.advance(int(kind.args[0]) * rows)


def _skip_decimal(reader: _Reader, kind: _Type, rows: int) -> None:
    precision = int(kind.args[0])
    width = 4 if precision <= 9 else 8 if precision <= 18 else 16 if precision <= 38 else 32
    reader.advance(width * rows)


def _skip_nullable(reader: _Reader, kind: _Type, rows: int) -> None:
    reader.advance(rows)  # the null map
    _skip_data(reader, _parse(kind.args[0]), rows)


def _skip_array(reader: _Reader, kind: _Type, rows: int) -> None:
    reader.advance(8 * (rows - 1))
    total = reader.uint64()  # offsets are cumulative: the last one is the element count
    _skip_data(reader, _parse(kind.args[0]), total)


def _skip_map(reader: _Reader, kind: _Type, rows: int) -> None:
    reader.advance(8 * (rows - 1))
    total = reader.uint64()
    for arg in kind.args:
        _skip_data(reader, _parse(arg), total)


def _skip_tuple(reader: _Reader, kind: _Type, rows: int) -> None:
    for arg in kind.args:
        _skip_data(reader, _parse(_element_type(arg)), rows)


def _skip_nested(reader: _Reader, kind: _Type, rows: int) -> None:
    reader.advance(8 * (rows - 1))
    total = reader.uint64()
    _skip_tuple(reader, kind, total)


def _skip_last_arg(reader: _Reader, kind: _Type, rows: int) -> None:
    _skip_data(reader, _parse(kind.args[-1]), rows)


_NEED_GLOBAL_DICTIONARY = 1 << 8
_HAS_ADDITIONAL_KEYS = 1 << 9
_INDEX_WIDTH = {0: 1, 1: 2, 2: 4, 3: 8}


def _skip_low_cardinality(reader: _Reader, kind: _Type, rows: int) -> None:
    inner = _parse(kind.args[0])
    dictionary = _parse(inner.args[0]) if inner.name == "Nullable" else inner
    while rows > 0:
        index_type = reader.uint64()
        if index_type & _NEED_GLOBAL_DICTIONARY:
            raise _NotTranscodable("LowCardinality with a global dictionary")
        if index_type & _HAS_ADDITIONAL_KEYS:
            _skip_data(reader, dictionary, reader.uint64())
        indexes = reader.uint64()
        if indexes == 0 or indexes > rows:
            raise _NotTranscodable("LowCardinality index count")
        reader.advance(_INDEX_WIDTH[index_type & 0xFF] * indexes)
        rows -= indexes


_SKIPPERS: dict[str, Callable[[_Reader, _Type, int], None]] = {
    "String": _skip_string,
    "FixedString": _skip_fixed_string,
    "Decimal": _skip_decimal,
    "Nullable": _skip_nullable,
    "Array": _skip_array,
    "Map": _skip_map,
    "Tuple": _skip_tuple,
    "Nested": _skip_nested,
    "LowCardinality": _skip_low_cardinality,
    "SimpleAggregateFunction": _skip_last_arg,
}
for _interval in (
    "Nanosecond",
    "Microsecond",
    "Millisecond",
    "Second",
    "Minute",
    "Hour",
    "Day",
    "Week",
    "Month",
    "Quarter",
    "Year",
):
    _FIXED_WIDTH[f"Interval{_interval}"] = 8


def transcode(data: bytes, revision: int) -> NativeTranscoded:
    """chDB's revision-0 Native output as a server writes it for ``client_protocol_version``
    = ``revision``. Revision 0 is passed through untouched."""
    if revision <= 0:
        return NativeTranscoded(data, -1)
    out = bytearray()
    reader = _Reader(data)
    rows_total = 0
    column = "?"
    try:
        while reader.pos < len(data):
            start = reader.pos
            columns = reader.varint()
            rows = reader.varint()
            rows_total += rows
            out += BLOCK_INFO
            out += data[start : reader.pos]
            for _ in range(columns):
                start = reader.pos
                column = reader.string()
                kind = _parse(reader.string())
                out += data[start : reader.pos]
                if revision >= CUSTOM_SERIALIZATION_REVISION:
                    out.append(0)
                start = reader.pos
                if rows:
                    _skip_prefix(reader, kind)
                    _skip_data(reader, kind, rows)
                out += data[start : reader.pos]
    except _NotTranscodable as refused:
        raise SqlError(
            Code.NOT_IMPLEMENTED,
            f"Column {column} has a type ({refused}) that afr's SQL interface cannot send in "
            f"Native to a client of protocol revision {revision}: cast it (toString, "
            "finalizeAggregation) or ask for another format",
        ) from None
    except (IndexError, ValueError):
        raise SqlError(
            Code.NOT_IMPLEMENTED,
            f"Column {column}: the engine's Native output could not be re-framed for protocol "
            f"revision {revision}",
        ) from None
    return NativeTranscoded(bytes(out), rows_total)
