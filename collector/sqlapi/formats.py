"""The output formats the SQL interface serves, by ClickHouse name, with their content
types; the default when neither the query nor the request names one."""

from __future__ import annotations

from dataclasses import dataclass

from collector.sqlapi.errors import Code, SqlError

__all__ = ["DEFAULT_FORMAT", "OutputFormat", "output_format"]

DEFAULT_FORMAT = "TabSeparated"


@dataclass(frozen=True)
class OutputFormat:
    name: str
    content_type: str


_TSV = "text/tab-separated-values; charset=UTF-8"
_JSON = "application/json; charset=UTF-8"
_NDJSON = "application/x-ndjson; charset=UTF-8"
_BINARY = "application/octet-stream"
_TEXT = "text/plain; charset=UTF-8"


def _formats() -> dict[str, OutputFormat]:
    table: dict[str, str] = {
        "Native": _BINARY,
        "RowBinary": _BINARY,
        "RowBinaryWithNames": _BINARY,
        "RowBinaryWithNamesAndTypes": _BINARY,
        "Parquet": _BINARY,
        "Arrow": _BINARY,
        "ArrowStream": _BINARY,
        "ORC": _BINARY,
        "Avro": _BINARY,
        "MsgPack": _BINARY,
        "BSONEachRow": _BINARY,
        "JSON": _JSON,
        "JSONStrings": _JSON,
        "JSONCompact": _JSON,
        "JSONCompactStrings": _JSON,
        "JSONColumns": _JSON,
        "JSONColumnsWithMetadata": _JSON,
        "JSONCompactColumns": _JSON,
        "JSONObjectEachRow": _JSON,
        "JSONEachRow": _NDJSON,
        "JSONStringsEachRow": _NDJSON,
        "JSONCompactEachRow": _NDJSON,
        "JSONCompactEachRowWithNames": _NDJSON,
        "JSONCompactEachRowWithNamesAndTypes": _NDJSON,
        "JSONCompactStringsEachRow": _NDJSON,
        "JSONCompactStringsEachRowWithNames": _NDJSON,
        "JSONCompactStringsEachRowWithNamesAndTypes": _NDJSON,
        "JSONEachRowWithProgress": _NDJSON,
        "JSONLines": _NDJSON,
        "JSONL": _NDJSON,
        "NDJSON": _NDJSON,
        "TabSeparated": _TSV,
        "TabSeparatedRaw": _TSV,
        "TabSeparatedWithNames": _TSV,
        "TabSeparatedWithNamesAndTypes": _TSV,
        "TabSeparatedRawWithNames": _TSV,
        "TabSeparatedRawWithNamesAndTypes": _TSV,
        "TSV": _TSV,
        "TSVRaw": _TSV,
        "TSVWithNames": _TSV,
        "TSVWithNamesAndTypes": _TSV,
        "TSVRawWithNames": _TSV,
        "TSVRawWithNamesAndTypes": _TSV,
        "CSV": "text/csv; charset=UTF-8; header=absent",
        "CSVWithNames": "text/csv; charset=UTF-8; header=present",
        "CSVWithNamesAndTypes": "text/csv; charset=UTF-8; header=present",
        "CustomSeparated": _TEXT,
        "CustomSeparatedWithNames": _TEXT,
        "CustomSeparatedWithNamesAndTypes": _TEXT,
        "Values": _TEXT,
        "Vertical": _TEXT,
        "Pretty": _TEXT,
        "PrettyCompact": _TEXT,
        "PrettyCompactMonoBlock": _TEXT,
        "PrettyCompactNoEscapes": _TEXT,
        "PrettyMonoBlock": _TEXT,
        "PrettyNoEscapes": _TEXT,
        "PrettySpace": _TEXT,
        "PrettySpaceNoEscapes": _TEXT,
        "Markdown": "text/markdown; charset=UTF-8",
        "MD": "text/markdown; charset=UTF-8",
        "XML": "application/xml; charset=UTF-8",
        "TSKV": _TEXT,
        "LineAsString": _TEXT,
        "Null": _TEXT,
    }
    return {name.lower(): OutputFormat(name, content_type) for name, content_type in table.items()}


_OUTPUT_FORMATS = _formats()


def output_format(name: str) -> OutputFormat:
    """The served output format of that name (ClickHouse's format names are case-insensitive);
    formats that read schema or template files (Protobuf, CapnProto, Template) are not."""
    found = _OUTPUT_FORMATS.get(name.lower())
    if found is None:
        raise SqlError(Code.UNKNOWN_FORMAT, f"Format {name} is not served by afr's SQL interface")
    return found
