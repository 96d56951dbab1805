"""``afr up`` (the collector, with the replay worker beside it) and ``afr worker`` (the worker
alone)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from afr.commands.common import add_data_dir_flag, collector_settings, worker_data_dir

__all__ = ["add_up_parser", "add_worker_parser"]


def add_up_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr up``."""
    up = commands.add_parser("up", help="run the collector on the embedded store")
    add_data_dir_flag(up)
    up.add_argument("--grpc-port", type=int)
    up.add_argument("--http-port", type=int)
    up.add_argument("--grpc-host")
    up.add_argument("--http-host")
    up.add_argument("--no-auth", action="store_true", help="store everything as project 'default'")
    up.add_argument("--no-worker", action="store_true", help="do not start the replay worker")
    up.add_argument(
        "--grafana-url", help="print the link to the newest failing run's timeline in this Grafana"
    )
    up.add_argument(
        "--sql",
        action="store_true",
        help="serve the store read-only over ClickHouse's HTTP protocol, for Grafana "
        "(port 8123 or AFR_SQL_PORT)",
    )
    up.add_argument("--sql-port", type=int, help="port of the SQL interface (implies --sql)")
    up.set_defaults(func=_up)


def add_worker_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``afr worker``."""
    worker = commands.add_parser(
        "worker", help="run the replay worker alone (AFR_WORKER_* settings)"
    )
    worker.set_defaults(func=_worker)


def _resident_mib() -> int:
    """This process's resident memory (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    except (OSError, ValueError, IndexError):
        return 0


def _up(args: argparse.Namespace) -> int:
    import logging
    import signal

    from afr.local import LOCAL_KEY_FILE, WEBHOOK_SECRET_FILE, ensure_local_key
    from collector.server import Collector, tune_gc_for_ingest

    tune_gc_for_ingest()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = collector_settings(args)

    async def serve() -> None:
        collector = Collector(settings)
        await collector.start()
        created = ensure_local_key(collector.keys, settings.data_dir)
        worker_server = None
        if not args.no_worker:
            worker, worker_server, worker_task, worker_port = await _start_worker(
                settings, collector
            )
        print(f"afr collector up (store {settings.store_location})")
        print(f"  OTLP/gRPC  http://{settings.grpc_host}:{collector.grpc_port}")
        print(f"  OTLP/HTTP  http://{settings.http_host}:{collector.http_port}/v1/traces")
        print(f"  read API   http://{settings.http_host}:{collector.http_port}/api/v1/runs")
        if collector.sql_port is not None:
            from collector.sqlapi import SQL_PASSWORD_FILE

            secret = settings.data_dir / SQL_PASSWORD_FILE
            where = "AFR_SQL_PASSWORD" if settings.sql_password else f"{secret} (mode 0600)"
            print(
                f"  SQL (ClickHouse HTTP) http://{settings.sql_host}:{collector.sql_port}  "
                f"user {settings.sql_user}, password in {where}"
            )
        if args.grafana_url:
            print(f"  {_grafana_line(args.grafana_url, collector)}")
        if created is not None:
            print(
                f"  created project 'local'; its key (...{created[-4:]}) is in "
                f"{settings.data_dir / LOCAL_KEY_FILE} (mode 0600)"
            )
        if worker_server is not None:
            print(f"  replay hook http://{worker.settings.host}:{worker_port}/hooks/replay")
            print(
                f"    ({worker.settings.concurrency} replay processes; jobs and spend in "
                f"{worker.settings.state_location})"
            )
            print(
                f"    (signing secret in {settings.data_dir / WEBHOOK_SECRET_FILE}; try: afr replay <run id>)"
            )
            print(f"  {_sweep_line(worker)}")
        if collector.recovered_rows:
            print(
                f"  recovered {collector.recovered_rows} acknowledged spans from the write-ahead log"
            )
        sys.stdout.flush()
        # Started: what only chDB's start-up read of its library goes back (ADR 55).
        from collector.store.client import release_start_up_pages

        before = _resident_mib()
        if release_start_up_pages():
            logging.getLogger("afr.up").info(
                "gave back the embedded store's start-up pages: resident %d -> %d MiB",
                before,
                _resident_mib(),
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        if worker_server is not None:
            worker_server.should_exit = True
            await worker_task
        await collector.stop()

    asyncio.run(serve())
    return 0


def _grafana_line(grafana_url: str, collector: Any) -> str:
    """Where to look in Grafana: the newest failing run's timeline, else the run list."""
    from urllib.parse import urlencode

    base = grafana_url.rstrip("/")
    newest = collector.reader.newest_failing_run()
    if newest is None:
        return f"Grafana    {base}/d/afr-runs (no failing run stored yet)"
    project, run_id = newest
    query = urlencode({"var-project": project, "var-run_id": run_id})
    return f"Grafana    newest failing run: {base}/d/afr-run?{query}"


async def _start_worker(settings: Any, collector: Any) -> tuple[Any, Any, Any, int]:
    """The replay worker next to the collector, wired to it over loopback."""
    from afr.local import ensure_webhook_secret, read_local_key
    from replay_worker.app import ReplayWorker
    from replay_worker.settings import WorkerSettings

    overrides: dict[str, Any] = {
        "collector_url": f"http://127.0.0.1:{collector.http_port}",
        "collector_otlp_endpoint": f"http://127.0.0.1:{collector.grpc_port}",
    }
    if "AFR_WORKER_COLLECTOR_KEY" not in os.environ:
        overrides["collector_key"] = read_local_key(settings.data_dir)
    if "AFR_WORKER_WEBHOOK_SECRET" not in os.environ:
        overrides["webhook_secret"] = ensure_webhook_secret(settings.data_dir)
    worker_dir = worker_data_dir(settings.data_dir)
    if worker_dir is not None:
        overrides["data_dir"] = worker_dir
    worker = ReplayWorker(WorkerSettings(**overrides))
    server, task, port = await worker.serve()
    return worker, server, task, port


def _sweep_line(worker: Any) -> str:
    settings, schedule = worker.settings, worker.sweeps.schedule
    if not settings.sweep_enabled:
        return "sweeps: not scheduled (AFR_SWEEP_ENABLED=false); POST /hooks/sweeps still runs one"
    return f"sweeps: '{schedule.cron}' ({schedule.zone.key}) over {settings.evals_dir}" + (
        "" if settings.evals_dir.is_dir() else " (no such directory yet: nothing to sweep)"
    )


def _worker(args: argparse.Namespace) -> int:
    import logging
    import signal

    from replay_worker.app import ReplayWorker
    from replay_worker.settings import WorkerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def serve() -> None:
        worker = ReplayWorker(WorkerSettings())
        server, task, port = await worker.serve()
        print(f"afr replay worker up: POST http://{worker.settings.host}:{port}/hooks/replay")
        print(
            f"  {worker.settings.concurrency} replay processes; jobs and spend in "
            f"{worker.settings.state_location}"
        )
        print(f"  {_sweep_line(worker)}")
        sys.stdout.flush()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        await task

    asyncio.run(serve())
    return 0
