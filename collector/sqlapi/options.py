"""A request's URL parameters sorted into settings, query parameters and transport options,
each checked (denied settings, safe values, caps a client may lower but never raise), and
the engine handle's settings built from them with ours last, so that ours win."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from collector.sqlapi.errors import Code, SqlError

__all__ = [
    "DENIED_SETTINGS",
    "PROJECT_DENIED_SETTINGS",
    "TRANSPORT_PARAMS",
    "Limits",
    "RequestOptions",
    "connection_settings",
    "resolve_options",
]

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
