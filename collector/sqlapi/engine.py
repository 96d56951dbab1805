"""Runs one client query on the embedded engine, read-only, on a handle of its own.

chDB hosts one engine per process and lets any number of connection handles share it. Each
request opens a handle whose connection string carries ``readonly=1``, the caps and the
client's accepted settings (~0.5 ms), so settings never leak between requests and the engine
itself refuses writes, DDL, ``SET`` and the outside-reading table functions. The collector's
own handle (the writer's) is untouched: a query here never waits on it, nor it on a query.

A project credential's handle also carries its project's filters, and its query is analysed
before it runs (``tenancy``).

Blocking: call from a worker thread, never from the event loop.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collector.sqlapi.errors import Code, SqlError, from_engine
from collector.sqlapi.formats import OutputFormat, output_format
from collector.sqlapi.policy import check_statement, denied_functions
from collector.sqlapi.tenancy import (
    PROJECT_COLUMN,
    TABLE_FUNCTIONS,
    ProjectScope,
    check_reads,
    check_scoped_tokens,
    redact_values,
    store_tables,
    strip_format,
)

__all__ = ["Catalog", "EngineResult", "ReadOnlyEngine", "engine_path"]


def engine_path(store_dsn: str) -> str:
    """The embedded store's directory, spelled as the collector's store spells it (chDB
    compares engine paths literally)."""
    if not store_dsn.startswith("chdb:///"):
        raise SqlError(
            Code.BAD_ARGUMENTS,
            "the SQL interface serves the embedded store only (a chdb:/// path); with "
            "AFR_CLICKHOUSE_URL pointing at a ClickHouse server, point Grafana at that server",
        )
    path = os.path.realpath(store_dsn.removeprefix("chdb://"))
    if "?" in path:
        raise SqlError(Code.BAD_ARGUMENTS, f"the store path {path!r} cannot hold a '?'")
    return path


@dataclass(frozen=True)
class Catalog:
    """What the engine knows, read once at start: settings are validated against it."""

    known_settings: frozenset[str]
    denied_functions: frozenset[str]
    version: str
    display_name: str
    scope: ProjectScope
    """What a project credential may read, and the filters that keep it to its project."""
    scoped_denied_functions: frozenset[str]
    """Refused in call position for a project credential, anywhere in the query: every table
    function of the catalog but the ones that only compute (``merge()`` in a scalar subquery
    would otherwise run during the analysis)."""


_ANALYSED = frozenset({"SELECT", "WITH", "("})
"""Statements a project credential's query is analysed as before it runs. SHOW, DESCRIBE
and EXISTS read the catalog only (system tables: filtered like the rest); EXPLAIN is the
admin's."""


@dataclass(frozen=True)
class EngineResult:
    body: bytes
    format: OutputFormat
    rows_read: int
    bytes_read: int
    elapsed_s: float


class ReadOnlyEngine:
    def __init__(self, path: str, database: str = "afr") -> None:
        self._path = path
        self._database = database

    def catalog(self) -> Catalog:
        conn = self._connect([("readonly", "1")])
        try:
            settings = _lines(conn, "SELECT name FROM system.settings")
            table_functions = _lines(conn, "SELECT name FROM system.table_functions")
            version, display_name = _lines(conn, "SELECT version(), displayName()")[0].split("\t")
            system_tables = _lines(conn, "SELECT name FROM system.tables WHERE database = 'system'")
            store = _literal(self._database)
            tables = [
                line.split("\t")
                for line in _lines(
                    conn,
                    "SELECT database, name, engine, name IN (SELECT table FROM system.columns "  # noqa: S608 - literals quoted by _literal
                    f"WHERE database = {store} AND name = {_literal(PROJECT_COLUMN)}) "
                    f"FROM system.tables WHERE database = {store}",
                )
            ]
        finally:
            conn.close()
        computing = {name.lower() for name in TABLE_FUNCTIONS}
        denied = denied_functions(table_functions)
        return Catalog(
            known_settings=frozenset(settings),
            denied_functions=denied,
            scoped_denied_functions=denied
            | ({name.lower() for name in table_functions} - computing),
            version=version,
            display_name=display_name,
            scope=ProjectScope(
                store_tables(
                    (database, name, engine, int(has_project))
                    for database, name, engine, has_project in tables
                ),
                frozenset(system_tables),
            ),
        )

    def run(
        self,
        sql: str,
        *,
        default_format: str,
        params: Mapping[str, str],
        settings: Sequence[tuple[str, str]],
        denied: frozenset[str],
        scope: tuple[ProjectScope, str] | None = None,
    ) -> EngineResult:
        """Checks the statement in the engine's canonical rendering, then runs it. With
        ``scope`` (a project credential's: the catalog's scope and the project), the handle
        carries the project's filters and the query's reads are checked first."""
        if scope is not None:
            settings = [*settings, *scope[0].settings(scope[1])]
        try:
            conn = self._connect(settings)
        except RuntimeError as error:  # a setting value the engine cannot parse
            raise from_engine(str(error)) from None
        try:
            canonical = _canonical(conn, sql)
            statement = check_statement(canonical, denied)
            if scope is not None:
                check_scoped_tokens(statement.kind, statement.tokens)
                _check_scoped(conn, statement.kind, canonical, scope[0], params)
            fmt = output_format(statement.format or default_format)
            result = conn.query(sql, fmt.name, params=dict(params))
            return EngineResult(
                body=result.bytes(),
                format=fmt,
                rows_read=int(result.rows_read()),
                bytes_read=int(result.bytes_read()),
                elapsed_s=float(result.elapsed()),
            )
        except RuntimeError as error:
            refused = from_engine(str(error))
            if scope is not None:
                refused = SqlError(refused.code, redact_values(refused.message), refused.name)
            raise refused from None
        finally:
            conn.close()

    def _connect(self, settings: Sequence[tuple[str, str]]) -> Any:
        import chdb

        # Names and values were validated (options.resolve_options): none holds '&', '=', '%'.
        query = "&".join(f"{name}={value}" for name, value in settings)
        connect: Any = chdb.connect  # untyped in chdb
        return connect(f"{self._path}?{query}")


def _check_scoped(
    conn: Any, kind: str, canonical: str, scope: ProjectScope, params: Mapping[str, str]
) -> None:
    if kind == "EXPLAIN":
        raise SqlError(
            Code.ACCESS_DENIED, "EXPLAIN is not served to a project credential (the admin's)"
        )
    if kind in _ANALYSED:
        explained = conn.query(
            f"EXPLAIN QUERY TREE {strip_format(canonical)}", "TSVRaw", params=dict(params)
        )
        check_reads(explained.bytes().decode(), scope)


def _canonical(conn: Any, sql: str) -> str:
    """The engine's own rendering of the query: parsed by ClickHouse's parser, printed back
    without comments or heredocs, one statement (it refuses multi-statements)."""
    try:
        text: str = conn.query(f"SELECT formatQuery({_literal(sql)})", "TSVRaw").bytes().decode()
    except RuntimeError as error:
        refused = from_engine(str(error))
        # The error names our wrapper ("In scope SELECT formatQuery('...')"): not the client's.
        message = _WRAPPER_SCOPE.sub("", refused.message)
        raise SqlError(refused.code, message, refused.name) from None
    return text


_WRAPPER_SCOPE = re.compile(r"[\s.:]*In scope SELECT formatQuery\(.*$", re.DOTALL)


def _lines(conn: Any, sql: str) -> list[str]:
    text: str = conn.query(sql, "TSVRaw").bytes().decode()
    return text.splitlines()


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
