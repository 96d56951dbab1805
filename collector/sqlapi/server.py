"""The SQL interface's HTTP server: ClickHouse's HTTP protocol, read-only, on its own port.

``POST /`` (or ``GET /?query=``) with the query in the body and/or the ``query`` parameter,
``param_<name>`` query parameters, settings as URL parameters, ``default_format`` or a
``FORMAT`` clause, optional gzip/deflate both ways: what clickhouse-connect and clickhouse-go
(Grafana's ClickHouse datasource over HTTP) send to a ClickHouse server. ``/ping`` and
``/replicas_status`` answer ``Ok.``.

Each query is admitted by ``admission`` (a slot, or a bounded wait in a fair queue; refused
only past the queue's bound or its wait) and runs on a worker thread of its own pool, so the
event loop that acknowledges OTLP exports never waits on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from email import policy as email_policy
from email.parser import BytesParser

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector.auth import SqlUserStore
from collector.settings import CollectorSettings
from collector.sqlapi.admission import (
    Admission,
    AdmissionLimits,
    memory_bytes,
    sized_concurrency,
)
from collector.sqlapi.credentials import Principal, SqlAuthenticator, ensure_sql_password
from collector.sqlapi.engine import Catalog, ReadOnlyEngine, engine_path
from collector.sqlapi.errors import Code, SqlError, http_status, render
from collector.sqlapi.formats import DEFAULT_FORMAT
from collector.sqlapi.native import transcode
from collector.sqlapi.options import Limits, RequestOptions, connection_settings, resolve_options
from collector.sqlapi.policy import refuse_writes

__all__ = ["SqlInterface", "SqlStats"]

logger = logging.getLogger("afr.collector.sql")

_OK = b"Ok.\n"
_TEXT = "text/plain; charset=UTF-8"


@dataclass
class SqlStats:
    served: int = 0
    refused: int = 0
    """Answered with a 4xx: bad SQL, refused statements or settings, bad credentials."""
    failed: int = 0
    """Answered with a 5xx: time or memory limit, busy, engine fault."""


@dataclass(frozen=True)
class _Plan:
    sql: str
    options: RequestOptions
    settings: list[tuple[str, str]]
    encoding: str | None
    principal: Principal


@dataclass(frozen=True)
class _Prepared:
    body: bytes
    headers: dict[str, str]


class SqlInterface:
    def __init__(self, settings: CollectorSettings) -> None:
        self._settings = settings
        self._engine = ReadOnlyEngine(engine_path(settings.store_dsn), settings.database)
        password = settings.sql_password or ensure_sql_password(settings.data_dir)
        self._auth = SqlAuthenticator(settings.sql_user, password, SqlUserStore(settings.keys_path))
        self._limits = Limits(
            max_execution_time_s=settings.sql_max_execution_time_s,
            max_memory_bytes=settings.sql_max_memory_bytes,
            max_result_bytes=settings.sql_max_result_bytes,
            max_result_rows=settings.sql_max_result_rows,
            max_query_bytes=settings.sql_max_query_bytes,
            thread_priority=settings.sql_thread_priority,
            max_threads=settings.sql_max_threads or max(1, (os.cpu_count() or 1) // 2),
        )
        slots = settings.sql_max_concurrency or sized_concurrency(
            os.cpu_count() or 1,
            settings.sql_memory_budget_bytes or memory_bytes() // 4,
            settings.sql_max_memory_bytes,
        )
        self._admission = Admission(
            AdmissionLimits.sized(
                slots,
                max_running_per_credential=settings.sql_max_concurrency_per_user,
                max_queued=settings.sql_max_queued,
                max_wait_s=settings.sql_queue_max_wait_ms / 1000,
            )
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._catalog: Catalog | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.stats = SqlStats()
        self.port = 0

    async def start(self) -> int:
        """Binds ``sql_host:sql_port`` (0: ephemeral), reads the engine's catalog, serves."""
        s = self._settings
        # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets whose proto says
        # TCP, and with it on, a response's body waits ~40 ms for the client's delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((s.sql_host, s.sql_port or 0))
            self._executor = ThreadPoolExecutor(
                max_workers=self._admission.limits.max_running,
                thread_name_prefix="afr-sql",
                initializer=_lower_priority,
                initargs=(s.sql_thread_priority,),
            )
            loop = self._loop = asyncio.get_running_loop()
            self._catalog = await loop.run_in_executor(self._executor, self._engine.catalog)
        except BaseException:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app(),
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=2,
            # A query may come whole in the URL (GET /?query=...).
            h11_max_incomplete_event_size=s.sql_max_query_bytes + 64 * 1024,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        return self.port

    def health(self) -> dict[str, object]:
        """The counts, and whether the server still serves (its task has not died)."""
        serving = self._task is not None and not self._task.done()
        admitted = self._admission.stats
        return {
            "serving": serving,
            **asdict(self.stats),
            # A client that left still counts as running until the engine is done.
            "running": admitted.running,
            "max_running": self._admission.limits.max_running,
            "queued": admitted.queued,
            "waited": admitted.waited,
            "refused_busy": admitted.refused_queue_full + admitted.refused_wait,
            "max_wait_s": round(admitted.max_wait_s, 3),
        }

    async def stop(self) -> None:
        """Stops accepting, then waits for running queries (bounded by the time cap): a handle
        left open would keep the engine alive after the store closes."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, True)

    def app(self) -> Starlette:
        async def ok(request: Request) -> Response:
            return Response(_OK, media_type=_TEXT)

        async def no_handler(request: Request) -> Response:
            text = f"There is no handle {request.url.path}\n\nUse / or /ping for health checks.\n"
            return Response(text, status_code=404, media_type=_TEXT)

        return Starlette(
            routes=[
                Route("/", self.handle, methods=["GET", "POST"]),
                Route("/ping", ok, methods=["GET"]),
                Route("/replicas_status", ok, methods=["GET"]),
                Route("/{path:path}", no_handler, methods=["GET", "POST"]),
            ]
        )

    async def handle(self, request: Request) -> Response:
        items = list(request.query_params.multi_items())
        url_params = dict(items)
        query_id = url_params.get("query_id") or str(uuid.uuid4())
        if request.method in ("GET", "HEAD") and "query" not in url_params:
            return Response(_OK, media_type=_TEXT)
        try:
            principal = self._auth.check(request.headers, url_params)
            plan = await self._plan(request, items, principal)
            prepared = await self._run(plan)
        except SqlError as error:
            return self._error(error, query_id)
        except Exception as exc:
            # The type only: a message or traceback could quote the query or span content.
            logger.error("unexpected %s in the SQL interface", type(exc).__name__)
            return self._error(SqlError(Code.UNKNOWN_EXCEPTION, "internal error"), query_id)
        self.stats.served += 1
        headers = {"X-ClickHouse-Query-Id": plan.options.query_id or query_id, **prepared.headers}
        return Response(prepared.body, headers=headers)

    async def _plan(
        self, request: Request, items: list[tuple[str, str]], principal: Principal
    ) -> _Plan:
        assert self._catalog is not None
        text = dict(items).get("query", "")
        refuse_writes(text)  # an INSERT's body is data (lz4 from clickhouse-connect): unread
        body = await self._read_body(request)
        header_items = [
            (name, request.headers[header])
            for name, header in (
                ("database", "x-clickhouse-database"),
                ("default_format", "x-clickhouse-format"),
            )
            if header in request.headers
        ]
        if _media_type(request) == "multipart/form-data":
            fields = _form_fields(request.headers.get("content-type", ""), body)
            text = fields.pop("query", text)
            items = items + list(fields.items())
        elif body:
            text = (
                f"{text}\n{body.decode('utf-8', 'replace')}"
                if text
                else body.decode("utf-8", "replace")
            )
        options = resolve_options(
            header_items + [(k, v) for k, v in items if k != "query"],
            known_settings=self._catalog.known_settings,
            limits=self._limits,
            scoped=principal.project is not None,
        )
        transport = dict(items)
        if transport.get("compress") == "1" or transport.get("decompress") == "1":
            raise SqlError(
                Code.NOT_IMPLEMENTED,
                "ClickHouse's native block compression (compress=1, decompress=1) is not served: "
                "use HTTP compression (Accept-Encoding: gzip)",
            )
        if len(text.encode()) > options.max_query_bytes:
            raise SqlError(
                Code.QUERY_IS_TOO_LARGE,
                f"Query is too large ({len(text.encode())} bytes); max_query_size is "
                f"{options.max_query_bytes}",
            )
        if not text.strip():
            raise SqlError(Code.SYNTAX_ERROR, "Empty query")
        settings = connection_settings(
            options,
            self._limits,
            database=self._settings.database,
            query_bytes=self._limits.max_query_bytes,
        )
        encoding = (
            _response_encoding(request.headers.get("accept-encoding", ""))
            if options.http_compression
            else None
        )
        return _Plan(text, options, settings, encoding, principal)

    async def _read_body(self, request: Request) -> bytes:
        limit = self._limits.max_query_bytes + 64 * 1024  # room for a form's framing
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise SqlError(Code.QUERY_IS_TOO_LARGE, f"Request body exceeds {limit} bytes")
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise SqlError(Code.QUERY_IS_TOO_LARGE, f"Request body exceeds {limit} bytes")
            chunks.append(chunk)
        return _inflate(b"".join(chunks), request.headers.get("content-encoding", ""), limit)

    async def _run(self, plan: _Plan) -> _Prepared:
        assert self._executor is not None
        assert self._loop is not None
        user = plan.principal.user
        await self._admission.acquire(user)
        try:
            future = self._loop.run_in_executor(self._executor, self._execute, plan)
        except BaseException:
            self._admission.release(user)
            raise
        return await future

    def _execute(self, plan: _Plan) -> _Prepared:
        """On a worker thread: the query, then the Native re-framing and the compression.
        The slot is given back when the engine is done, even if the client left."""
        assert self._catalog is not None
        try:
            options = plan.options
            result = self._engine.run(
                plan.sql,
                default_format=options.default_format or DEFAULT_FORMAT,
                params=options.params,
                settings=plan.settings,
                denied=(
                    self._catalog.denied_functions
                    if plan.principal.project is None
                    else self._catalog.scoped_denied_functions
                ),
                scope=(
                    None
                    if plan.principal.project is None
                    else (self._catalog.scope, plan.principal.project)
                ),
            )
            body, rows = result.body, None
            if result.format.name == "Native" and options.client_protocol_version > 0:
                transcoded = transcode(body, options.client_protocol_version)
                body, rows = transcoded.body, transcoded.rows
            summary = {
                "read_rows": str(result.rows_read),
                "read_bytes": str(result.bytes_read),
                "written_rows": "0",
                "written_bytes": "0",
                "total_rows_to_read": str(result.rows_read),
                "result_bytes": str(len(body)),
                "elapsed_ns": str(int(result.elapsed_s * 1e9)),
            }
            if rows is not None:
                summary["result_rows"] = str(rows)
            headers = {
                "Content-Type": result.format.content_type,
                "X-ClickHouse-Format": result.format.name,
                "X-ClickHouse-Timezone": options.settings.get("session_timezone", "UTC"),
                "X-ClickHouse-Server-Display-Name": self._catalog.display_name,
                "X-ClickHouse-Summary": json.dumps(summary, separators=(",", ":")),
            }
            if plan.encoding is not None and body:
                body = _deflate(body, plan.encoding, options.zlib_level)
                headers["Content-Encoding"] = plan.encoding
            return _Prepared(body, headers)
        finally:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._admission.release, plan.principal.user)

    def _error(self, error: SqlError, query_id: str) -> Response:
        status = http_status(error.code)
        if status >= 500:
            self.stats.failed += 1
        else:
            self.stats.refused += 1
        version = self._catalog.version if self._catalog is not None else "unknown"
        headers = {
            "X-ClickHouse-Exception-Code": str(error.code),
            "X-ClickHouse-Query-Id": query_id,
        }
        if self._catalog is not None:
            headers["X-ClickHouse-Server-Display-Name"] = self._catalog.display_name
        if status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="afr SQL interface", charset="UTF-8"'
        if status == 503:
            headers["Retry-After"] = "1"
        return Response(
            render(error, version), status_code=status, headers=headers, media_type=_TEXT
        )


def _lower_priority(nice: int) -> None:
    """A query thread's own Python work (re-framing, compression) runs at the engine threads'
    priority too: Linux schedules threads, so this thread alone is niced."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:  # not allowed here: the engine's threads are niced all the same
        logger.warning("cannot lower the SQL threads' priority to %d", nice)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """multipart/form-data as clickhouse-connect sends it for long parameters: the ``query``
    field and ``param_<name>`` fields. A file part is an external table: not served."""
    message = BytesParser(policy=email_policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise SqlError(Code.BAD_ARGUMENTS, "multipart/form-data body without parts")
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        if part.get_filename() is not None:
            raise SqlError(Code.NOT_IMPLEMENTED, "External tables are not served")
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload.decode("utf-8", "replace")
    return fields


def _inflate(raw: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise SqlError(
            Code.UNKNOWN_COMPRESSION_METHOD,
            f"Unknown Content-Encoding {encoding[:40]!r}: gzip and deflate are served (the "
            "interface is read-only: a compressed body can only hold a query, never data)",
        )
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise SqlError(Code.CANNOT_DECOMPRESS, f"Request body is not valid {encoding}") from None
    if len(body) > limit or inflater.unconsumed_tail:
        raise SqlError(Code.QUERY_IS_TOO_LARGE, f"Decompressed body exceeds {limit} bytes")
    if not inflater.eof:
        raise SqlError(Code.CANNOT_DECOMPRESS, f"Request body is truncated {encoding}")
    return body


def _response_encoding(accept: str) -> str | None:
    """gzip or deflate when the client accepts it (ClickHouse also knows br, zstd, lz4...:
    a client offering those too gets gzip, one offering only those gets plain bytes)."""
    accepted: dict[str, float] = {}
    for item in accept.split(","):
        name, _, params = item.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        accepted[name.strip().lower()] = quality
    for encoding in ("gzip", "deflate"):
        if accepted.get(encoding, 0.0) > 0:
            return encoding
    return None


def _deflate(body: bytes, encoding: str, level: int) -> bytes:
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    compressor = zlib.compressobj(level, zlib.DEFLATED, wbits)
    return compressor.compress(body) + compressor.flush()
