"""A read-only, ClickHouse-compatible HTTP interface over the embedded store (``afr up --sql``).

Grafana's ClickHouse datasource and ClickHouse clients query the chDB store as if it were a
server. Pipeline, in file names: ``credentials`` (who may ask) -> ``options`` (the request's
settings and limits), ``formats`` (what it may be answered in), ``policy`` over ``lexer``
(which statements may be asked) -> ``engine`` (a read-only chDB handle per request) ->
``native`` (protocol-versioned Native) -> ``server`` (HTTP, errors in ClickHouse's shape via
``errors``). See ADR 17.
"""

from collector.sqlapi.credentials import SQL_PASSWORD_FILE, ensure_sql_password
from collector.sqlapi.server import SqlInterface, SqlStats

__all__ = ["SQL_PASSWORD_FILE", "SqlInterface", "SqlStats", "ensure_sql_password"]
