"""Project-scoped readers on a ClickHouse server, by the engine's own access control.

``afr sql-users create --project P`` on a server store creates a ClickHouse user that reads
afr's tables and views through row policies ``ProjectId = 'P'``: a read-only user
(``readonly = 1``, no setting changes), its password stored by the server as a SHA-256 hash,
``SELECT`` granted on the store's tables and plain views only (never on the materialized
views, which read their target tables around the policies, nor on other databases), one
permissive row policy per table that holds a project's rows. Plain views are
``SQL SECURITY INVOKER`` (ClickHouse's default), so the policies apply inside them.

Relies on the server's defaults since 24.x (``access_control_improvements``):
``select_from_system_db_requires_grant`` (no other ``system`` table than the handful every
user may read: ``one``, ``databases``, ``tables``, ``columns`` ...) and
``users_without_row_policies_can_read_rows`` (the operator's admin user still reads every
row). ``deploy/compose`` sets both explicitly. On a cluster every statement runs ``ON
CLUSTER`` and the policies are made on the local tables and on the ``Distributed`` ones.

Pure: statements for the store's client to run (``collector.store.client.ClickHouseStore``).
"""

from __future__ import annotations

import re

from collector.store.cluster import LOCAL_SUFFIX, SHARDED_TABLES
from collector.store.schema import (
    LOGS_TABLE,
    MIGRATIONS_TABLE,
    MODEL_PRICES_TABLE,
    RUN_SUMMARY_VIEW,
    RUNS_TABLE,
    SPANS_TABLE,
    TRACE_ID_TS_TABLE,
    TRACES_VIEW,
    TRACES_VIEW_TRACE_ID_TS,
)

__all__ = ["PROJECT_TABLES", "READABLE", "drop_reader_statements", "reader_statements"]

PROJECT_TABLES = (SPANS_TABLE, TRACE_ID_TS_TABLE, RUNS_TABLE, LOGS_TABLE)
"""Tables that hold projects' rows: each gets the reader's row policy."""
READABLE = (
    *PROJECT_TABLES,
    RUN_SUMMARY_VIEW,
    TRACES_VIEW,
    TRACES_VIEW_TRACE_ID_TS,
    MODEL_PRICES_TABLE,
    MIGRATIONS_TABLE,
)
"""What a project reader may select: the tables above, the plain views over them, and the
project-free tables (prices per model, applied migrations)."""
SYSTEM_READABLE = ("numbers", "zeros", "functions", "table_functions", "data_type_families")
"""System tables granted beyond the ones every user reads: what query builders list."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_PROJECT = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def _ident(name: str) -> str:
    return f"`{name}`"


def _on(cluster: str | None) -> str:
    return f" ON CLUSTER {_ident(cluster)}" if cluster else ""


def _tables(table: str, cluster: str | None) -> list[str]:
    if cluster and table in SHARDED_TABLES:
        return [table + LOCAL_SUFFIX, table]
    return [table]


def _check(database: str, user: str, project: str | None = None) -> None:
    if not _NAME.match(user) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", database):
        raise ValueError("user and database names are letters, digits, '-' or '_'")
    if project is not None and not _PROJECT.match(project):
        raise ValueError("a project name is 1-128 ASCII letters, digits, '-' or '_'")


def _policy(user: str, table: str) -> str:
    return _ident(f"afr_project_{user}_{table}")


def reader_statements(
    database: str,
    user: str,
    password_sha256_hex: str,
    project: str,
    *,
    cluster: str | None = None,
) -> list[str]:
    """Creates (or re-keys) ``user`` as a reader of ``project``'s rows of ``database``."""
    _check(database, user, project)
    if not _HEX.match(password_sha256_hex):
        raise ValueError("the password's SHA-256 as 64 lowercase hex digits")
    on, who = _on(cluster), _ident(user)
    statements = [
        f"CREATE USER IF NOT EXISTS {who}{on} IDENTIFIED WITH sha256_hash BY "
        f"'{password_sha256_hex}' SETTINGS readonly = 1",
        f"ALTER USER {who}{on} IDENTIFIED WITH sha256_hash BY '{password_sha256_hex}' "
        "SETTINGS readonly = 1",
    ]
    for table in READABLE:
        for name in _tables(table, cluster):
            statements.append(f"GRANT{on} SELECT ON {database}.{_ident(name)} TO {who}")
    for table in SYSTEM_READABLE:
        statements.append(f"GRANT{on} SELECT ON system.{_ident(table)} TO {who}")
    for table in PROJECT_TABLES:
        for name in _tables(table, cluster):
            statements.append(
                f"CREATE ROW POLICY OR REPLACE {_policy(user, name)}{on} "
                f"ON {database}.{_ident(name)} FOR SELECT USING ProjectId = '{project}' "
                f"AS PERMISSIVE TO {who}"
            )
    return statements


def drop_reader_statements(database: str, user: str, *, cluster: str | None = None) -> list[str]:
    """Removes ``user`` and its row policies (a revoked credential)."""
    _check(database, user)
    on = _on(cluster)
    statements = [f"DROP USER IF EXISTS {_ident(user)}{on}"]
    for table in PROJECT_TABLES:
        for name in _tables(table, cluster):
            statements.append(
                f"DROP ROW POLICY IF EXISTS {_policy(user, name)} ON {database}.{_ident(name)}{on}"
            )
    return statements
