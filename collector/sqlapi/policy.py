"""What the SQL interface serves: the statement, function, setting and format policy.

Pure functions over text and parameters. The engine's ``readonly=1`` is the guarantee against
writes and most outside reads (ADR 17); this module refuses what chDB lets through even so
(scalar ``file()``, ``INTO OUTFILE``, ``KILL``, multi-statements, chDB's ``python()``), and
says clearly why. Statements are checked in the engine's own canonical rendering of the query
(``formatQuery``: no comments, no heredocs, one quoting style), so the lexer below never has
to agree with ClickHouse's on the tricky corners.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.sqlapi.errors import Code, SqlError

__all__ = [
    "DEFAULT_FORMAT",
    "READ_STATEMENTS",
    "TRANSPORT_PARAMS",
    "Limits",
    "OutputFormat",
    "RequestOptions",
    "Token",
    "check_statement",
    "connection_settings",
    "denied_functions",
    "output_format",
    "refuse_writes",
    "resolve_options",
    "tokens",
]

DEFAULT_FORMAT = "TabSeparated"

READ_STATEMENTS = frozenset({"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN"})

# URL parameters a ClickHouse server's HTTP handler consumes itself (or that only shape the
# HTTP exchange); never passed to the engine as settings.
TRANSPORT_PARAMS = frozenset(
    {
        "add_http_cors_header",
        "buffer_size",
        "cancel_http_readonly_queries_on_client_close",
        "client_protocol_version",
        "close_session",
        "compress",
        "database",
        "decompress",
        "default_format",
        "enable_http_compression",
        "http_headers_progress_interval_ms",
        "http_native_compression_disable_checksumming_on_decompress",
        "http_response_buffer_size",
        "http_wait_end_of_query",
        "http_write_exception_in_output_format",
        "http_zlib_compression_level",
        "max_query_size",
        "password",
        "query",
        "query_id",
        "quota_key",
        "role",
        "send_progress_in_http_headers",
        "session_check",
        "session_id",
        "session_timeout",
        "stacktrace",
        "user",
        "wait_end_of_query",
    }
)

# Settings that would lift the read-only guarantee, or make a format read or write a file or
# reach the network.
DENIED_SETTINGS = frozenset(
    {
        "readonly",
        # A project credential's filters are the handle's own (tenancy.py): never the client's.
        "additional_table_filters",
        "additional_result_filter",
        "enable_analyzer",
        "allow_ddl",
        "allow_introspection_functions",
        "dialect",
        "format_avro_schema_registry_url",
        "format_schema",
        "format_schema_source",
        "format_template_resultset",
        "format_template_row",
        "input_format_record_errors_file_path",
        "output_format_schema",
    }
)
DENIED_SETTING_PREFIXES = ("allow_experimental_",)
# And for a project credential: a cached result is shared across handles, whose filters differ.
PROJECT_DENIED_SETTINGS = frozenset(
    {
        "use_query_cache",
        "enable_reads_from_query_cache",
        "enable_writes_to_query_cache",
        # The order that runs the project's filter first (tenancy.SCOPED_SETTINGS).
        "optimize_move_to_prewhere",
        "allow_reorder_prewhere_conditions",
        "query_plan_merge_filters",
        "short_circuit_function_evaluation",
        "enable_scalar_subquery_optimization",
        "apply_prewhere_after_final",
    }
)
PROJECT_DENIED_SETTING_PREFIXES = ("query_cache_",)

# Table functions that only compute, or read this engine's own tables; every other table
# function the engine knows (file, url, s3, remote, mysql, python, ...) is refused by name.
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "format",
        "fuzzjson",
        "fuzzquery",
        "generate_series",
        "generaterandom",
        "generateseries",
        "loop",
        "merge",
        "mergetreeanalyzeindexes",
        "mergetreeanalyzeindexesuuid",
        "mergetreecodecblockcounts",
        "mergetreeindex",
        "mergetreeprojection",
        "mergetreetextindex",
        "null",
        "numbers",
        "numbers_mt",
        "primes",
        "prometheusquery",
        "prometheusqueryrange",
        "timeseriesdata",
        "timeseriesmetricfamilies",
        "timeseriesmetrics",
        "timeseriessamples",
        "timeseriesselector",
        "timeseriestags",
        "values",
        "view",
        "viewexplain",
        "viewifpermitted",
        "zeros",
        "zeros_mt",
    }
)
# Known outside readers, refused even if the engine's catalog could not be read.
DENIED_TABLE_FUNCTIONS = frozenset(
    {
        "arrowstream",
        "azureblobstorage",
        "azureblobstoragecluster",
        "bigquery",
        "cluster",
        "clusterallreplicas",
        "cosn",
        "deltalake",
        "deltalakeazure",
        "deltalakecluster",
        "deltalakelocal",
        "deltalakes3",
        "dictionary",
        "eval",
        "executable",
        "file",
        "filecluster",
        "filesystem",
        "gcs",
        "hdfs",
        "hdfscluster",
        "hudi",
        "iceberg",
        "icebergazure",
        "iceberghdfs",
        "iceberglocal",
        "icebergs3",
        "input",
        "jdbc",
        "mongodb",
        "mysql",
        "odbc",
        "oss",
        "paimon",
        "postgresql",
        "python",
        "redis",
        "remote",
        "remotesecure",
        "s3",
        "s3cluster",
        "sqlite",
        "url",
        "urlcluster",
        "ytsaurus",
    }
)
# Scalar functions that read files (file() works under readonly=1 in chDB 26.9), call out to
# a model provider, or read the process's own memory.
DENIED_SCALAR_FUNCTIONS = frozenset(
    {
        "file",
        "addresstoline",
        "addresstolinewithinlines",
        "addresstosymbol",
        "demangle",
        "aiclassify",
        "aiembed",
        "aiextract",
        "aifilter",
        "aigenerate",
        "airedact",
        "aisimilarity",
        "aitranslate",
        "catboostevaluate",
        "naivebayesclassifier",
        "naivebayesclassifierwithallprobs",
        "naivebayesclassifierwithprob",
    }
)


def denied_functions(table_functions: Iterable[str] = ()) -> frozenset[str]:
    """Lower-case names refused in call position: the static lists, plus every table function
    of the engine's catalog that is not known to be safe (a new outside reader is refused)."""
    catalog = {name.lower() for name in table_functions}
    return DENIED_TABLE_FUNCTIONS | DENIED_SCALAR_FUNCTIONS | (catalog - SAFE_TABLE_FUNCTIONS)


@dataclass(frozen=True)
class Limits:
    """The interface's caps; a client may lower one, never raise it."""

    max_execution_time_s: float
    max_memory_bytes: int
    max_result_bytes: int | None
    max_result_rows: int | None
    max_query_bytes: int
    thread_priority: int = 10
    """The nice value of a query's engine threads (ClickHouse's ``os_thread_priority``): ingest,
    at 0, wins the CPU from dashboards. A client cannot change it."""
    max_threads: int | None = None
    """Engine threads per query (``max_threads``); a client may lower it. None: the engine's."""


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


@dataclass(frozen=True)
class RequestOptions:
    """One request's URL parameters, sorted into what the interface and the engine use."""

    settings: dict[str, str] = field(default_factory=dict)
    """Client settings the engine applies: validated names, values safe in a connection string."""
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters (``param_<name>``), bound by the engine, never spliced into SQL."""
    database: str | None = None
    default_format: str | None = None
    query_id: str | None = None
    client_protocol_version: int = 0
    http_compression: bool = True
    zlib_level: int = 3
    max_query_bytes: int = 0


_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DATABASE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# chDB percent-decodes a connection string before splitting it at '&' (so a value holding
# "%26readonly%3D0" would turn read-only off) and reads '+' as a space and an empty value as
# 1: a value goes in only when it has none of those characters.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:/,\-]{1,256}$")


def _capped_number(name: str, value: str, cap: float, as_int: bool) -> float:
    try:
        number = float(int(value)) if as_int else float(value)
    except ValueError:
        raise SqlError(
            Code.BAD_ARGUMENTS, f"Setting {name}: cannot parse {value!r} as a number"
        ) from None
    if not math.isfinite(number) or number < 0:
        raise SqlError(Code.BAD_ARGUMENTS, f"Setting {name}: {value!r} is not a valid limit")
    if number == 0 or number > cap:
        shown = f"{cap:g}" if not as_int else str(int(cap))
        raise SqlError(
            Code.READONLY,
            f"Cannot modify '{name}' setting to {value}: afr's SQL interface allows at most "
            f"{shown} (0, no limit, is refused)",
        )
    return number


def resolve_options(
    items: Sequence[tuple[str, str]],
    *,
    known_settings: frozenset[str],
    limits: Limits,
    scoped: bool = False,
) -> RequestOptions:
    """Sorts URL parameters (and multipart form fields) into transport options, query
    parameters and engine settings; refuses an unknown, denied or limit-lifting setting
    (``scoped``: a project credential's request, denied the query cache too)."""
    settings: dict[str, str] = {}
    params: dict[str, str] = {}
    transport: dict[str, str] = {}
    caps: dict[str, tuple[float, bool]] = {
        "max_execution_time": (limits.max_execution_time_s, False),
        "max_memory_usage": (float(limits.max_memory_bytes), True),
    }
    if limits.max_result_bytes is not None:
        caps["max_result_bytes"] = (float(limits.max_result_bytes), True)
    if limits.max_result_rows is not None:
        caps["max_result_rows"] = (float(limits.max_result_rows), True)
    for name, value in items:
        if name.startswith("param_") and len(name) > len("param_"):
            params[name[len("param_") :]] = value
        elif name in TRANSPORT_PARAMS:
            transport[name] = value
        else:
            if scoped and (
                name in PROJECT_DENIED_SETTINGS or name.startswith(PROJECT_DENIED_SETTING_PREFIXES)
            ):
                raise SqlError(
                    Code.READONLY,
                    f"Cannot modify '{name}' setting: not served to a project credential",
                )
            settings[name] = _checked_setting(name, value, known_settings, caps)
    return RequestOptions(
        settings=settings,
        params=params,
        database=_database(transport.get("database")),
        default_format=transport.get("default_format") or None,
        query_id=transport.get("query_id") or None,
        client_protocol_version=_int_param(transport, "client_protocol_version", 0),
        http_compression=transport.get("enable_http_compression", "1") not in ("0", "false"),
        zlib_level=min(9, max(1, _int_param(transport, "http_zlib_compression_level", 3))),
        max_query_bytes=int(
            _capped_number(
                "max_query_size",
                transport.get("max_query_size", str(limits.max_query_bytes)),
                float(limits.max_query_bytes),
                as_int=True,
            )
        ),
    )


def _checked_setting(
    name: str, value: str, known: frozenset[str], caps: Mapping[str, tuple[float, bool]]
) -> str:
    if not _SETTING_NAME.match(name) or name not in known:
        raise SqlError(Code.UNKNOWN_SETTING, f"Unknown setting '{name[:100]}'")
    if name in DENIED_SETTINGS or name.startswith(DENIED_SETTING_PREFIXES):
        raise SqlError(
            Code.READONLY, f"Cannot modify '{name}' setting: afr's SQL interface is read-only"
        )
    if not _SAFE_VALUE.match(value):
        raise SqlError(
            Code.BAD_ARGUMENTS,
            f"Setting {name}: the value must be 1 to 256 letters, digits or _ . : / , - "
            "(the embedded engine takes settings from a URL-like string)",
        )
    if name in caps:
        cap, as_int = caps[name]
        _capped_number(name, value, cap, as_int)
    return value


def _database(value: str | None) -> str | None:
    if not value:
        return None
    if not _DATABASE.match(value):
        raise SqlError(Code.UNKNOWN_DATABASE, f"Database {value[:100]} does not exist")
    return value


def _int_param(transport: Mapping[str, str], name: str, default: int) -> int:
    raw = transport.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SqlError(Code.BAD_ARGUMENTS, f"Cannot parse {name}={raw[:40]!r}") from None


def connection_settings(
    options: RequestOptions, limits: Limits, *, database: str, query_bytes: int
) -> list[tuple[str, str]]:
    """The settings of the request's engine handle, in connection-string order: the client's
    accepted settings first, then ours, so that ours win (the last value of a key is kept)."""
    ours: dict[str, str] = {
        "database": options.database or database,
        "max_execution_time": _number(
            min(limits.max_execution_time_s, _client(options, "max_execution_time"))
        ),
        "max_memory_usage": str(
            int(min(limits.max_memory_bytes, _client(options, "max_memory_usage")))
        ),
        # Room for the query quoted inside formatQuery('...'); its real size is checked apart.
        "max_query_size": str(2 * query_bytes + 1024),
    }
    if limits.max_result_bytes is not None:
        ours["max_result_bytes"] = str(
            int(min(limits.max_result_bytes, _client(options, "max_result_bytes")))
        )
    if limits.max_result_rows is not None:
        ours["max_result_rows"] = str(
            int(min(limits.max_result_rows, _client(options, "max_result_rows")))
        )
    if limits.max_threads is not None:
        asked = _client(options, "max_threads") or math.inf  # 0: the engine's "auto"
        ours["max_threads"] = str(int(min(limits.max_threads, asked)))
    if "session_timezone" not in options.settings:
        ours["session_timezone"] = "UTC"
    ours["os_thread_priority"] = str(limits.thread_priority)
    ours["readonly"] = "1"
    client = [(name, value) for name, value in options.settings.items() if name not in ours]
    return client + list(ours.items())


def _client(options: RequestOptions, name: str) -> float:
    value = options.settings.get(name)
    return math.inf if value is None else float(value)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


@dataclass(frozen=True)
class Token:
    kind: str
    """``word`` (bare identifier or keyword), ``ident`` (quoted identifier), ``string``,
    ``number``, ``param`` (a ``{name:Type}`` substitution) or ``punct``."""
    text: str


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"(?:0[xX][0-9A-Fa-f]+|0[bB][01]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_HEREDOC = re.compile(r"\$([A-Za-z0-9_]*)\$")


def tokens(sql: str) -> list[Token]:
    """ClickHouse's lexical structure, enough to find calls, clauses and statement ends:
    comments are dropped, quoted text kept whole. An unterminated literal is a syntax error."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i) or sql.startswith("# ", i) or sql.startswith("#!", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
        elif c in "'\"`":
            end = _quoted_end(sql, i, c)
            out.append(Token("string" if c == "'" else "ident", _unquote(sql[i + 1 : end - 1], c)))
            i = end
        elif c == "$" and (heredoc := _HEREDOC.match(sql, i)) is not None:
            closing = sql.find(heredoc.group(0), heredoc.end())
            if closing < 0:
                raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated heredoc")
            out.append(Token("string", sql[heredoc.end() : closing]))
            i = closing + len(heredoc.group(0))
        elif c == "{":
            end = sql.find("}", i)
            if end < 0:
                raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated substitution")
            out.append(Token("param", sql[i : end + 1]))
            i = end + 1
        elif (word := _WORD.match(sql, i)) is not None:
            out.append(Token("word", word.group(0)))
            i = word.end()
        elif (number := _NUMBER.match(sql, i)) is not None:
            out.append(Token("number", number.group(0)))
            i = number.end()
        else:
            out.append(Token("punct", c))
            i += 1
    return out


def _skip_block_comment(sql: str, start: int) -> int:
    depth, i = 0, start
    while i < len(sql):
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated comment")


def _quoted_end(sql: str, start: int, quote: str) -> int:
    i = start + 1
    while i < len(sql):
        c = sql[i]
        if c == "\\":
            i += 2
        elif c == quote:
            if sql.startswith(quote * 2, i):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    raise SqlError(Code.SYNTAX_ERROR, "Syntax error: unterminated quoted literal")


def _unquote(body: str, quote: str) -> str:
    return re.sub(r"\\(.)", r"\1", body.replace(quote * 2, quote))


@dataclass(frozen=True)
class Statement:
    kind: str
    format: str | None
    """The query's own ``FORMAT`` clause, if any: it overrides ``default_format``."""
    tokens: tuple[Token, ...] = ()


def check_statement(sql: str, denied: frozenset[str]) -> Statement:
    """Refuses what is not one read-only statement over the store; returns its kind and its
    ``FORMAT``."""
    toks = tokens(sql)
    if not toks:
        raise SqlError(Code.SYNTAX_ERROR, "Empty query")
    kind = _read_kind(toks[0])
    for index, tok in enumerate(toks):
        following = toks[index + 1] if index + 1 < len(toks) else None
        if tok.kind == "punct" and tok.text == ";" and following is not None:
            raise SqlError(Code.SYNTAX_ERROR, "Syntax error: Multi-statements are not allowed")
        if following is None or tok.kind not in ("word", "ident"):
            continue
        if following.text == "(" and following.kind == "punct" and tok.text.lower() in denied:
            raise SqlError(
                Code.ACCESS_DENIED,
                f"Function {tok.text}() reads outside the store: afr's SQL interface does not "
                "serve it",
            )
        if (
            tok.kind == "word"
            and tok.text.upper() == "INTO"
            and following.kind == "word"
            and following.text.upper() == "OUTFILE"
        ):
            raise SqlError(
                Code.READONLY, "INTO OUTFILE writes a file: afr's SQL interface is read-only"
            )
    return Statement(kind, _format_clause(toks), tuple(toks))


def refuse_writes(sql: str) -> None:
    """An early, cheap refusal of a write named by the query's first word, before its body
    (an INSERT's data) is read. It only ever refuses: ``check_statement`` still decides."""
    try:
        toks = tokens(sql)
    except SqlError:
        return
    if toks:
        _read_kind(toks[0])


def _read_kind(first: Token) -> str:
    kind = first.text.upper() if first.kind == "word" else first.text
    if kind not in READ_STATEMENTS and kind != "(":
        raise SqlError(
            Code.READONLY,
            f"Cannot execute {kind[:40]} queries: afr's SQL interface is read-only "
            "(it serves SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN)",
        )
    return kind


def _format_clause(toks: Sequence[Token]) -> str | None:
    """The statement's own ``FORMAT <name>``: outside parentheses, last but for a trailing
    ``SETTINGS`` clause (``FORMAT JSON SETTINGS readonly = 1`` is one too)."""
    depth, found = 0, None
    for index, tok in enumerate(toks):
        if tok.kind == "punct" and tok.text in "()":
            depth += 1 if tok.text == "(" else -1
            continue
        if depth or tok.kind != "word" or tok.text.upper() != "FORMAT":
            continue
        name = toks[index + 1] if index + 1 < len(toks) else None
        after = toks[index + 2] if index + 2 < len(toks) else None
        if (
            name is not None
            and name.kind in ("word", "ident")
            and (
                after is None
                or (after.kind == "punct" and after.text == ";")
                or (after.kind == "word" and after.text.upper() == "SETTINGS")
            )
        ):
            found = name.text
    return found
