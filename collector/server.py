"""Wires the collector: store, write-ahead log, writer, pipeline, receivers, read API.

``Collector`` runs inside an asyncio loop (``afr up``); ``CollectorThread`` runs one on a
background thread with its own loop, for the demo and the tests.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import socket
import threading
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector import native
from collector.api.failures import FailuresApi
from collector.api.openapi import OPENAPI
from collector.api.runs import RunsApi
from collector.auth import Authenticator, KeyStore
from collector.pipeline import Pipeline, Processor
from collector.privacy import default_processors
from collector.receiver.grpc import build_grpc_server
from collector.receiver.http import OtlpHttpHandler
from collector.settings import CollectorSettings
from collector.sqlapi import SqlInterface
from collector.store.client import ClickHouseStore, SpanStore
from collector.store.failures import FailureReader
from collector.store.prices import ModelPrices
from collector.store.reader import RunReader
from collector.store.wal import WriteAheadLog
from collector.store.writer import BatchWriter

__all__ = [
    "Collector",
    "CollectorThread",
    "build_store",
    "default_processors",
    "tune_gc_for_ingest",
]

logger = logging.getLogger("afr.collector")

READY_WAL_FRACTION = 0.9
"""``/healthz?probe=ready`` turns 503 when the log holds this much of ``wal_max_bytes``."""

_GC_GEN0_THRESHOLD = 50_000


def tune_gc_for_ingest() -> None:
    """For a process that runs a collector: ingest allocates many short-lived, acyclic
    objects per span, and the default gen-0 threshold (700) then runs the cyclic GC
    thousands of times a second (measured: +25% spans/s with this setting)."""
    gc.freeze()
    gc.set_threshold(_GC_GEN0_THRESHOLD, 20, 20)


def _price_store(store: SpanStore) -> Any:
    """``store`` when it keeps model prices (ClickHouse's, or a wrapper passing them on)."""
    wanted = ("set_model_prices", "add_model_prices", "stored_models")
    return store if all(callable(getattr(store, name, None)) for name in wanted) else None


def build_store(settings: CollectorSettings) -> ClickHouseStore:
    """The store the settings describe, migrated (or, on a cluster, checked): what a
    collector given no store uses, and what wrappers wrap. The collector sets its model
    prices (``ModelPrices``)."""
    store = ClickHouseStore(
        settings.store_dsn,
        settings.database,
        ttl_days=settings.ttl_days,
        max_partitions_per_insert=settings.max_partitions_per_insert,
        fsync_parts=settings.store_fsync,
        cluster=settings.clickhouse_cluster,
    )
    store.migrate()
    return store


class Collector:
    def __init__(
        self,
        settings: CollectorSettings,
        *,
        store: SpanStore | None = None,
        processors: list[tuple[str, Processor]] | None = None,
    ) -> None:
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if store is None:
            store = build_store(settings)
        self.store = store
        prices = settings.price_book()
        self.model_prices = ModelPrices(_price_store(store), prices)
        self.model_prices.load()
        self.keys = KeyStore(settings.keys_path)
        self.auth = Authenticator(self.keys if settings.auth_enabled else None)
        self.wal = WriteAheadLog(
            settings.wal_dir,
            max_bytes=settings.wal_max_bytes,
            fsync=settings.wal_fsync,
            retry_after_s=settings.retry_after_s,
        )
        self.writer = BatchWriter(
            store,
            self.wal,
            max_rows=settings.batch_max_rows,
            max_bytes=settings.batch_max_bytes,
            interval_s=settings.batch_interval_s,
        )
        # Built here even when worker processes do the work: a bad rules file stops start-up
        # now, and the redaction key exists before any worker reads it.
        self.pipeline = Pipeline(
            processors or default_processors(settings),
            self.wal,
            workers=settings.ingest_workers if processors is None else 0,
            processor_factory=functools.partial(default_processors, settings),
            retry_after_s=settings.retry_after_s,
            window_ns=settings.span_window_ns,
            max_inflight_bytes=settings.max_inflight_bytes,
            on_models=self.model_prices.saw,
        )
        self.reader = RunReader(
            store,
            query_timeout_s=settings.api_query_timeout_s,
            max_spans=settings.api_max_spans,
            prices=prices,
        )
        self.grpc_port = 0
        self.http_port = 0
        self.sql_port: int | None = None
        self._sql = SqlInterface(settings) if settings.sql_port is not None else None
        self._grpc_server: Any = None
        self._http_server: uvicorn.Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self.recovered_rows = 0

    def problems(self) -> list[str]:
        """What keeps the collector from doing its job now, for /healthz (and the log)."""
        found = []
        if not self.writer.healthy:
            found.append(f"store inserts failing ({self.writer.last_error or 'unknown'})")
        return found + self.broken()

    def broken(self) -> list[str]:
        """What only a restart mends: a thread of the collector that stopped. A store that
        fails is not that (the log holds what it acknowledges until the store is back)."""
        found = []
        if not self.writer.alive:
            found.append("the writer thread stopped")
        if not self.wal.alive:
            found.append(self.wal.failure or "the write-ahead log thread stopped")
        if self.pipeline.failure:
            found.append(self.pipeline.failure)
        return found

    def full(self) -> list[str]:
        """The log near its bound: new exports are about to be refused (RESOURCE_EXHAUSTED,
        503), so another replica should take them."""
        held, bound = self.wal.unreleased_bytes, self.settings.wal_max_bytes
        if held >= bound * READY_WAL_FRACTION:
            return [f"write-ahead log holds {held} of {bound} bytes: the store is not keeping up"]
        return []

    def http_app(self) -> Starlette:
        failure_reader = FailureReader(
            self.store, query_timeout_s=self.settings.api_query_timeout_s
        )
        runs = RunsApi(
            self.reader,
            self.auth,
            max_runs=self.settings.api_max_runs,
            default_lookback_s=self.settings.api_default_lookback_s,
            failures=failure_reader,
            failure_window_s=(self.settings.ttl_days or 30) * 86_400,
        )
        failures = FailuresApi(failure_reader, self.auth)
        otlp = OtlpHttpHandler(self.pipeline, self.auth, self.settings.max_request_bytes)

        async def openapi(request: Request) -> Response:
            return JSONResponse(OPENAPI)

        async def health(request: Request) -> Response:
            probe = request.query_params.get("probe")
            if probe in ("live", "ready"):
                # live: what a restart mends; ready: can this replica take exports now.
                problems = self.broken() + (self.full() if probe == "ready" else [])
                return JSONResponse(
                    {"status": "unhealthy" if problems else "ok", "problems": problems},
                    status_code=503 if problems else 200,
                )
            if probe is not None:
                return JSONResponse(
                    {"error": f"probe: {probe!r} is not 'live' or 'ready'"}, status_code=400
                )
            problems = self.problems()
            body: dict[str, Any] = {
                "status": "unhealthy" if problems else "ok",
                "problems": problems,
                "store": "ok" if self.writer.healthy else "failing",
                "inserts": self.writer.inserts,
                "failed_inserts": self.writer.failed_inserts,
                "wal_bytes": self.wal.unreleased_bytes,
                "wal_corrupt_records_skipped": self.wal.corrupt_records_skipped,
                "wal_corrupt_bytes_skipped": self.wal.corrupt_bytes_skipped,
                "pending_rows": self.wal.ready_rows,
                "inserted_rows": self.writer.inserted_rows,
                "insert_us_per_row": round(
                    self.writer.insert_ns / max(1, self.writer.inserted_rows) / 1000, 2
                ),
                "dead_lettered_rows": self.writer.dead_lettered_rows,
                "pipeline": self.pipeline.stats.public(),
            }
            if self._sql is not None:
                body["sql"] = self._sql.health()
            return JSONResponse(body, status_code=503 if problems else 200)

        return Starlette(
            routes=[
                Route("/v1/traces", otlp.handle, methods=["POST"]),
                Route("/v1/logs", otlp.handle_logs, methods=["POST"]),
                Route("/api/v1/runs", runs.list_runs, methods=["GET"]),
                # Before /{run_id}, which would take "diff" for a (malformed) run id.
                Route("/api/v1/runs/diff", runs.diff_runs, methods=["GET"]),
                Route("/api/v1/runs/{run_id}", runs.get_run, methods=["GET"]),
                Route("/api/v1/runs/{run_id}/otlp", runs.get_run_otlp, methods=["GET"]),
                Route("/api/v1/failures", failures.list_failures, methods=["GET"]),
                Route("/api/v1/failures/{signature}", failures.get_failure, methods=["GET"]),
                Route("/api/v1/openapi.json", openapi, methods=["GET"]),
                Route("/healthz", health, methods=["GET"]),
            ]
        )

    async def start(self) -> None:
        await asyncio.to_thread(self.pipeline.warm_up)
        logger.info("ingest modules: %s", native.status())  # compiled, or why not (ADR 52)
        self.recovered_rows = self.wal.open()
        if self.recovered_rows:
            logger.info(
                "recovering %d acknowledged spans from the write-ahead log", self.recovered_rows
            )
        self.writer.start()
        s = self.settings
        self._grpc_server, self.grpc_port = build_grpc_server(
            self.pipeline,
            self.auth,
            host=s.grpc_host,
            port=s.grpc_port,
            max_request_bytes=s.max_request_bytes,
        )
        await self._grpc_server.start()
        # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets whose proto says
        # TCP, and a small response otherwise waits ~40 ms for the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((s.http_host, s.http_port))
        self.http_port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.http_app(), log_level="warning", lifespan="off", access_log=False
        )
        self._http_server = uvicorn.Server(config)
        self._http_task = asyncio.create_task(self._http_server.serve(sockets=[sock]))
        while not self._http_server.started:
            if self._http_task.done():
                self._http_task.result()
            await asyncio.sleep(0.01)
        if self._sql is not None:
            self.sql_port = await self._sql.start()

    async def stop(self) -> None:
        if self._sql is not None:
            await self._sql.stop()
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=2)
        if self._http_server is not None and self._http_task is not None:
            self._http_server.should_exit = True
            await self._http_task
        await asyncio.to_thread(self.writer.stop)
        await asyncio.to_thread(self.pipeline.close)
        await asyncio.to_thread(self.model_prices.flush)
        self.wal.close()
        self.store.close()

    def flush(self) -> bool:
        """Inserts everything acknowledged so far (tests, demo, shutdown)."""
        return self.writer.flush()


class CollectorThread:
    """A collector on a background thread with its own event loop."""

    def __init__(self, settings: CollectorSettings, **kwargs: Any) -> None:
        self._settings = settings
        self._kwargs = kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="afr-collector", daemon=True
        )
        self.collector: Collector | None = None

    def __enter__(self) -> Collector:
        self._thread.start()
        self.collector = Collector(self._settings, **self._kwargs)
        asyncio.run_coroutine_threadsafe(self.collector.start(), self._loop).result(30)
        return self.collector

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.collector is not None:
            asyncio.run_coroutine_threadsafe(self.collector.stop(), self._loop).result(60)
            self.collector = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
