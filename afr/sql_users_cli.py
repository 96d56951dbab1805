"""``afr sql-users``: SQL credentials bound to one project, for one team's Grafana.

``create --project P`` prints a user and a password once; only the password's SHA-256 is
kept (in the keys' SQLite file, like project API keys). Every query of that user sees P's
rows only: the collector's SQL interface enforces it on the embedded store
(collector/sqlapi/tenancy.py); on a ClickHouse server (``AFR_CLICKHOUSE_URL``) the command
also creates the server user with row policies (collector/store/access.py). ``list`` shows
users, projects and the password's last four characters; ``revoke`` ends a credential (within
5 s on the SQL interface; at once on a server, whose user is dropped).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_sql_users_parser", "create_sql_user", "run_command"]


def add_sql_users_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "sql-users", help="SQL credentials that read one project's rows only (for Grafana)"
    )
    sub = parser.add_subparsers(dest="sql_users_command", required=True)
    create = sub.add_parser("create", help="create a credential (its password printed once)")
    create.add_argument("--project", required=True)
    create.add_argument("--user", help="its name (default <project>_<8 hex digits>)")
    create.add_argument(
        "--replace", action="store_true", help="replace a credential of that name (re-key it)"
    )
    listing = sub.add_parser("list", help="list credentials (never their passwords)")
    revoke = sub.add_parser("revoke", help="revoke a credential by its user name")
    revoke.add_argument("user")
    for each in (create, listing, revoke):
        each.add_argument("--data-dir", type=Path, help="default ./.afr/data (AFR_DATA_DIR)")
    parser.set_defaults(func=run_command)
    return parser


def _settings(args: argparse.Namespace) -> Any:
    from collector.settings import CollectorSettings

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None) is not None:
        overrides["data_dir"] = args.data_dir
    return CollectorSettings(**overrides)


def _server_store(settings: Any) -> Any:
    """The ClickHouse server's client when the store is one (None on the embedded store,
    where the SQL interface enforces the scope and chDB may be held by ``afr up``)."""
    if not settings.store_dsn.startswith(("http://", "https://")):
        return None
    from collector.store.client import ClickHouseStore

    return ClickHouseStore(settings.store_dsn, settings.database)


def create_sql_user(settings: Any, project: str, user: str | None, *, replace: bool) -> Any:
    """The new credential (``CreatedSqlUser``), on the server too when the store is one."""
    from collector.auth import SqlUserStore
    from collector.store.access import reader_statements

    if user is not None and user == settings.sql_user:
        raise ValueError(f"{user!r} is the SQL interface's admin user: pick another name")
    created = SqlUserStore(settings.keys_path).create(project, user, replace=replace)
    store = _server_store(settings)
    if store is not None:
        try:
            for statement in reader_statements(
                settings.database,
                created.user,
                created.password_sha256,
                project,
                cluster=settings.clickhouse_cluster,
            ):
                store.command(statement)
        except Exception:
            SqlUserStore(settings.keys_path).revoke(created.user)
            raise
        finally:
            store.close()
    return created


def run_command(args: argparse.Namespace) -> int:
    from collector.auth import SqlUserStore
    from collector.store.access import drop_reader_statements

    settings = _settings(args)
    users = SqlUserStore(settings.keys_path)
    command = args.sql_users_command
    if command == "create":
        try:
            created = create_sql_user(settings, args.project, args.user, replace=args.replace)
        except ValueError as exc:
            print(f"afr sql-users: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # the server refused: its message, never the password
            print(
                f"afr sql-users: the ClickHouse server at {settings.store_location} refused: "
                f"{type(exc).__name__}: {str(exc)[:300]}",
                file=sys.stderr,
            )
            return 1
        print(f"user {created.user}")
        print(f"password {created.password}")
        print(
            f"(project {created.project!r}; the only time the password is shown: its queries "
            "see this project's rows only)",
            file=sys.stderr,
        )
        return 0
    if command == "list":
        print(f"{'user':30} {'project':20} {'last4':6} {'created':26} revoked")
        for info in users.list():
            print(
                f"{info.user:30} {info.project:20} {info.last4:6} {info.created_at:26} "
                f"{info.revoked_at or ''}"
            )
        return 0
    if not users.revoke(args.user):
        print(f"afr sql-users: no active credential {args.user!r}", file=sys.stderr)
        return 1
    store = _server_store(settings)
    if store is not None:
        try:
            for statement in drop_reader_statements(
                settings.database, args.user, cluster=settings.clickhouse_cluster
            ):
                store.command(statement)
        finally:
            store.close()
    print(f"revoked {args.user}")
    return 0
