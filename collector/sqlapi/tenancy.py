"""A project credential's queries see that project's rows only, whatever SQL they send.

On a ClickHouse server the engine does this with row policies on the users ``afr sql-users``
creates (``collector/store/access.py``). chDB has no users or row policies, so the SQL
interface enforces the same rule itself (ADR 27):

1. **Filters on every read, by the engine, first.** The request's handle carries the setting
   ``additional_table_filters``: ``ProjectId = '<project>'`` for every table of the store that
   has a ``ProjectId`` column (and for the materialized views that read them), ``0`` for
   every other table of the store and every ``system`` table outside ``SYSTEM_TABLES``. The
   engine applies a filter wherever the table is read: joins, subqueries, ``IN (SELECT ...)``,
   ``UNION``, views, CTEs, scalar subqueries. ``SCOPED_SETTINGS`` make it run before any
   expression of the client's (else a failing cast in a ``WHERE`` quotes another project's
   value). A client cannot lift either: the handle is ``readonly=1`` (no ``SETTINGS`` change
   in the query), and the settings are denied in the URL.
2. **What the statement may hold, before anything runs** (``check_scoped_tokens``, and the
   engine's function check with every table function but ``TABLE_FUNCTIONS`` denied by name):
   no ``merge()``, ``mergeTreeIndex()``, ``view()`` anywhere, no ``PREWHERE``, SHOW /
   DESCRIBE / EXISTS of names only.
3. **What the query reads, in the engine's own analysis** (``check_reads`` over ``EXPLAIN
   QUERY TREE``, scalar subqueries kept in it): every table a filtered table or view of the
   store, a project-free table (``GLOBAL_TABLES``) or an allowed ``system`` table; a node the
   analysis left unresolved, or a table line it cannot read, is refused: unknown means no.

An engine error sent to a project credential has its quoted values blanked
(``redact_values``). Pure functions over the catalog, tokens and the analysis' text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from collector.sqlapi.errors import Code, SqlError
from collector.sqlapi.lexer import Token

__all__ = [
    "GLOBAL_TABLES",
    "PROJECT_COLUMN",
    "SCOPED_SETTINGS",
    "SYSTEM_TABLES",
    "TABLE_FUNCTIONS",
    "ProjectScope",
    "StoreTable",
    "check_reads",
    "check_scoped_tokens",
    "redact_values",
    "strip_format",
]

PROJECT_COLUMN = "ProjectId"

GLOBAL_TABLES = frozenset({"model_prices", "schema_migrations"})
"""Tables of the store that hold no project's data: prices per model, applied migrations."""

SYSTEM_TABLES = frozenset(
    {
        # Constants and generators.
        "one",
        "numbers",
        "numbers_mt",
        "zeros",
        "zeros_mt",
        "primes",
        # What a query builder reads to list databases, tables and columns.
        "databases",
        "tables",
        "columns",
        "data_skipping_indices",
        "completions",
        # The engine's own vocabulary.
        "functions",
        "table_functions",
        "table_engines",
        "database_engines",
        "data_type_families",
        "aggregate_function_combinators",
        "formats",
        "keywords",
        "collations",
        "codecs",
        "time_zones",
        "build_options",
        "settings",
        "licenses",
        "contributors",
        "documentation",
    }
)
"""``system`` tables a project credential may read: metadata and constants, never another
query's text (``processes``, ``query_log``), the store's parts or caches."""

INFORMATION_SCHEMA = frozenset({"information_schema", "INFORMATION_SCHEMA"})
"""Views over ``system.tables``/``columns``: they read only allowed system tables."""

TABLE_FUNCTIONS = frozenset(
    {
        "numbers",
        "numbers_mt",
        "zeros",
        "zeros_mt",
        "values",
        "null",
        "generateSeries",
        "generate_series",
        "generateRandom",
        "primes",
    }
)
"""Table functions that only compute. ``merge()``, ``mergeTreeIndex()`` and kin read a
table's storage below the filters; ``view()`` hides its reads from the analysis."""

SCOPED_SETTINGS = (
    # The project's filter runs before any expression of the client's: without these the
    # engine merges it into one PREWHERE with the client's WHERE and reorders them, so a
    # failing cast in the client's WHERE quoted the other project's values (found by review).
    ("optimize_move_to_prewhere", "0"),
    ("allow_reorder_prewhere_conditions", "0"),
    ("query_plan_merge_filters", "0"),
    ("short_circuit_function_evaluation", "enable"),
    # Scalar subqueries stay in the analysed tree (else they run during the analysis and
    # leave a ``__getScalar`` behind): their reads are checked like the rest.
    ("enable_scalar_subquery_optimization", "0"),
)
"""A project credential's handle settings beside its filters; a client cannot send them."""

_DENIED_FUNCTION_PREFIXES = ("dictget", "dicthas", "dictisin", "joinget")
"""Scalar functions that read a dictionary or a Join table by name, not through a filter."""


@dataclass(frozen=True)
class StoreTable:
    database: str
    name: str
    engine: str
    has_project: bool

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def is_view(self) -> bool:
        return self.engine == "View"


@dataclass(frozen=True)
class ProjectScope:
    """What a project credential may read, from the engine's catalog read at start."""

    store_tables: tuple[StoreTable, ...]
    system_tables: frozenset[str]
    """Every table of the ``system`` database (the ones not allowed are filtered to nothing)."""

    def readable(self, qualified: str) -> bool:
        database, _, name = qualified.partition(".")
        if database == "system":
            return name in SYSTEM_TABLES
        if database in INFORMATION_SCHEMA:
            return True
        for table in self.store_tables:
            if table.qualified == qualified:
                return (
                    table.is_view
                    or (table.has_project and table.engine != "MaterializedView")
                    or (table.name in GLOBAL_TABLES)
                )
        return False

    def filters(self, project: str) -> str:
        """The ``additional_table_filters`` value for ``project``, as ClickHouse reads a
        map literal: ``{'db.table':'<condition>', ...}``."""
        if not _PROJECT.match(project):
            raise SqlError(Code.BAD_ARGUMENTS, "a project name is letters, digits, '-' or '_'")
        entries: list[tuple[str, str]] = []
        for table in self.store_tables:
            if table.is_view:
                continue  # its reads are filtered where they happen
            if table.has_project:
                entries.append((table.qualified, f"{PROJECT_COLUMN} = '{project}'"))
            elif table.name not in GLOBAL_TABLES:
                entries.append((table.qualified, "0"))
        entries.extend(
            (f"system.{name}", "0") for name in sorted(self.system_tables - SYSTEM_TABLES)
        )
        body = ",".join(f"{_quoted(name)}:{_quoted(condition)}" for name, condition in entries)
        return "{" + body + "}"

    def settings(self, project: str) -> list[tuple[str, str]]:
        """The handle's settings for ``project``: ``SCOPED_SETTINGS`` and the filters,
        percent-encoded for chDB's connection string (which it percent-decodes before
        splitting at ``&``: a project name holds no ``&``)."""
        return [
            *SCOPED_SETTINGS,
            ("additional_table_filters", quote(self.filters(project), safe="")),
        ]


_PROJECT = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_FORMAT_LINE = re.compile(r"^FORMAT \S+$", re.MULTILINE)


def strip_format(canonical: str) -> str:
    """The engine's canonical rendering without its ``FORMAT`` clause, which formatQuery
    prints on a line of its own (a string literal's newline is printed escaped)."""
    return _FORMAT_LINE.sub("", canonical)


_TABLE = re.compile(r"^\s*TABLE id: \d+, (?:alias: \S+, )?table_name: ([^\s,]+)(?:, .*)?$")
_TABLE_FUNCTION = re.compile(
    r"^\s*TABLE_FUNCTION id: \d+, (?:alias: \S+, )?table_function_name: (\w+)(?:, .*)?$"
)
_ANY_TABLE = re.compile(r"^\s*TABLE(?:_FUNCTION)? id: ")
_FUNCTION = re.compile(r"^\s*FUNCTION id: \d+, function_name: (\w+)")
_UNRESOLVED = re.compile(r"^\s*(?:IDENTIFIER|MATCHER) id: ")


def check_reads(tree: str, scope: ProjectScope) -> None:
    """Refuses a query whose analysis (``EXPLAIN QUERY TREE``) reads a table or calls a
    table function a project credential may not, or holds a node left unresolved."""
    lines = tree.splitlines()
    if not lines:
        raise SqlError(Code.ACCESS_DENIED, "the query could not be analysed: refused")
    for line in lines:
        if _ANY_TABLE.match(line) and not (_TABLE.match(line) or _TABLE_FUNCTION.match(line)):
            raise SqlError(
                Code.ACCESS_DENIED,
                "the query reads a table the check cannot name: refused for a project credential",
            )
        if (table := _TABLE.match(line)) is not None:
            name = table.group(1)
            if not scope.readable(name):
                raise SqlError(
                    Code.ACCESS_DENIED,
                    f"Table {name} is not readable with a project credential: it reads the "
                    "store's tables and views, and the system tables that hold no data",
                )
        elif (function := _TABLE_FUNCTION.match(line)) is not None:
            name = function.group(1)
            if name not in TABLE_FUNCTIONS:
                raise SqlError(
                    Code.ACCESS_DENIED,
                    f"Table function {name}() is not served to a project credential: it "
                    "reads storage below the project's filter, or hides what it reads",
                )
        elif (scalar := _FUNCTION.match(line)) is not None:
            if scalar.group(1).lower().startswith(_DENIED_FUNCTION_PREFIXES):
                raise SqlError(
                    Code.ACCESS_DENIED,
                    f"Function {scalar.group(1)}() reads a table by name: not served to a "
                    "project credential",
                )
        elif _UNRESOLVED.match(line) is not None:
            raise SqlError(
                Code.ACCESS_DENIED,
                "the query holds a part the engine's analysis left unresolved (a table "
                "function's subquery?): refused for a project credential",
            )


def check_scoped_tokens(kind: str, toks: Sequence[Token]) -> None:
    """What a project credential's statement may hold, checked on the canonical text before
    the engine analyses or runs anything: no ``PREWHERE`` (it would run before the filter);
    SHOW, DESCRIBE and EXISTS of names only (an expression there is never analysed)."""
    words = {t.text.upper() for t in toks if t.kind == "word"}
    if "PREWHERE" in words:
        raise SqlError(Code.ACCESS_DENIED, "PREWHERE is not served to a project credential")
    if kind not in ("SELECT", "WITH", "(") and (
        "SELECT" in words or any(t.kind == "punct" and t.text == "(" for t in toks)
    ):
        raise SqlError(
            Code.ACCESS_DENIED,
            f"{kind} with an expression or a subquery is not served to a project credential: "
            "name a table, or SELECT from system.tables / system.columns",
        )


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'")


def redact_values(message: str) -> str:
    """An engine error for a project credential, without the values it quotes (defence in
    depth: what the filters let through is the project's own, but an error is no channel)."""
    return _QUOTED.sub("'…'", message)


def store_tables(rows: Iterable[tuple[str, str, str, int]]) -> tuple[StoreTable, ...]:
    """(database, name, engine, has ProjectId) rows of the catalog query."""
    return tuple(StoreTable(d, n, e, bool(p)) for d, n, e, p in rows)
