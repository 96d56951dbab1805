"""``afr grafana push``: the argument parser (stdlib only: built for every ``afr`` command)
and the command, which wires settings, files and the HTTP client to ``push``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["TOKEN_ENV", "URL_ENV", "add_grafana_parser", "run_command"]

URL_ENV = "AFR_GRAFANA_URL"
TOKEN_ENV = "AFR_GRAFANA_TOKEN"  # noqa: S105 - the variable's name, not a token
DEFAULT_URL = "http://127.0.0.1:3000"


def add_grafana_parser(commands: Any) -> argparse.ArgumentParser:
    grafana: argparse.ArgumentParser = commands.add_parser(
        "grafana", help="Grafana dashboards for afr's store"
    )
    sub = grafana.add_subparsers(dest="grafana_command", required=True)
    push = sub.add_parser(
        "push",
        help="create or update the ClickHouse datasource and afr's dashboards in a Grafana",
        description="Creates or updates, through Grafana's HTTP API, the ClickHouse "
        "datasource (uid afr-clickhouse, OTel trace mode on afr's spans table) and the five "
        "dashboards in the folder 'afr'; running it again changes nothing. By default the "
        "datasource points at the collector's SQL interface (afr up --sql) on "
        "127.0.0.1:8123, user afr, password from <data dir>/sql.password; --clickhouse-url "
        "points it at a ClickHouse server instead. Host and port are as Grafana sees them.",
    )
    push.add_argument("--url", help=f"Grafana's URL (default ${URL_ENV} or {DEFAULT_URL})")
    push.add_argument(
        "--token",
        help=f"a service account token with the Admin role (default ${TOKEN_ENV}; prefer the "
        "variable: a command line is visible to other users)",
    )
    push.add_argument("--sql-host", default="127.0.0.1", help="the SQL interface's host")
    push.add_argument("--sql-port", type=int, default=8123, help="the SQL interface's port")
    push.add_argument("--sql-user", default="afr")
    push.add_argument(
        "--sql-password", help="default: AFR_SQL_PASSWORD, else <data dir>/sql.password"
    )
    push.add_argument(
        "--clickhouse-url",
        help="a ClickHouse server instead: http(s)://user:password@host:8123 (use a read-only "
        "user)",
    )
    push.add_argument(
        "--project",
        help="bind the datasource to this project: a SQL credential of its own (user "
        "grafana_<project>, re-keyed on every push) whose queries see only this project's "
        "rows, so one Grafana organization per team works (push with that org's token)",
    )
    push.add_argument("--database", default="afr", help="afr's database (AFR_DATABASE)")
    push.add_argument("--folder", default="afr", help="the dashboards' folder uid and title")
    push.add_argument(
        "--data-dir", type=Path, help="default ./.afr/data (AFR_DATA_DIR): sql.password"
    )
    push.add_argument("--timeout-s", type=float, default=15.0)
    return grafana


def _sql_password(args: argparse.Namespace) -> str:
    if args.sql_password:
        return str(args.sql_password)
    if os.environ.get("AFR_SQL_PASSWORD"):
        return os.environ["AFR_SQL_PASSWORD"]
    from collector.sqlapi.credentials import SQL_PASSWORD_FILE

    data_dir = args.data_dir or Path(os.environ.get("AFR_DATA_DIR", ".afr/data"))
    path = data_dir / SQL_PASSWORD_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"no {path}: start the SQL interface once (afr up --sql) or pass --sql-password"
        )
    return path.read_text().strip()


def _project_target(args: argparse.Namespace, target: Any) -> Any:
    """``target`` with a fresh credential of ``args.project`` (on the ClickHouse server too,
    when afr's store is one): the datasource then reads that project's rows only."""
    import dataclasses

    from afr.sql_users_cli import create_sql_user
    from collector.settings import CollectorSettings

    overrides: dict[str, Any] = {"database": args.database}
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    settings = CollectorSettings(**overrides)
    if args.clickhouse_url and not settings.store_dsn.startswith(("http://", "https://")):
        raise ValueError(
            "--project with --clickhouse-url creates the project's user on that server: set "
            "AFR_CLICKHOUSE_URL to it (an admin's URL, as afr reaches it)"
        )
    user = f"grafana_{args.project}"
    created = create_sql_user(settings, args.project, user, replace=True)
    return dataclasses.replace(target, username=created.user, password=created.password)


def run_command(args: argparse.Namespace) -> int:
    from afr.grafana.dashboards import build_all
    from afr.grafana.push import (
        ClickHouseTarget,
        GrafanaError,
        client_for,
        datasource_model,
        push,
        target_from_url,
        with_database,
    )

    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        print(f"afr grafana push: no token: pass --token or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        if args.clickhouse_url:
            target = target_from_url(args.clickhouse_url, args.database)
        else:
            target = ClickHouseTarget(
                host=args.sql_host,
                port=args.sql_port,
                username=args.sql_user,
                # A project's datasource gets a credential of its own: no admin password.
                password="" if args.project else _sql_password(args),
                database=args.database,
            )
    except (GrafanaError, OSError) as exc:
        print(f"afr grafana push: {exc}", file=sys.stderr)
        return 2
    if args.project:
        try:
            target = _project_target(args, target)
        except ValueError as exc:
            print(f"afr grafana push: {exc}", file=sys.stderr)
            return 2
    dashboards = {uid: with_database(d, args.database) for uid, d in build_all().items()}
    try:
        with client_for(url, token, timeout_s=args.timeout_s) as client:
            report = push(client, datasource_model(target), dashboards, folder=args.folder)
    except GrafanaError as exc:
        print(f"afr grafana push: {exc}", file=sys.stderr)
        return 1
    for line in report.lines:
        print(line)
    print(f"open {url.rstrip('/')}/d/afr-runs", file=sys.stderr)
    return 0 if report.healthy else 1
