"""The one pipeline both receivers feed: decode -> processors -> write-ahead log -> ack.

A processor is a pure function over a batch of SpanRecords (normalize, redact, truncate).
The CPU-bound stage (decode, processors, row encoding) is ``process_request``: a pure
function of the request bytes. It runs inline, or — with ``AFR_INGEST_WORKERS`` > 0 — in a
pool of worker processes, so ingest is not bound to one core by the GIL. Only the encoded,
already-redacted rows come back to the collector process, which makes them durable in the
write-ahead log and answers. ``ingest`` returns once they are durable; the batch writer
moves them into ClickHouse in the background.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import fcntl
import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from collector.blocks import encode_block
from collector.decode import decode_json, decode_protobuf, to_records
from collector.errors import StoreUnavailable
from collector.logs import ProcessedLogs, process_logs_request
from collector.model import SpanRecord
from collector.store.wal import Batch, WriteAheadLog
from collector.wire import records_from_wire

__all__ = [
    "IngestResult",
    "Pipeline",
    "PipelineStats",
    "ProcessedRequest",
    "Processor",
    "process_request",
]

logger = logging.getLogger("afr.collector.pipeline")

Processor = Callable[[list[SpanRecord]], list[SpanRecord]]
ProcessorFactory = Callable[[], list[tuple[str, Processor]]]
_OFFLOAD_BYTES = 256 * 1024  # inline mode: requests this large are processed off the event loop


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    rejected: int
    error_message: str


@dataclass(frozen=True)
class ProcessedRequest:
    """What the CPU-bound stage hands back: encoded rows and counts, nothing else."""

    payload: bytes
    rows: int
    rejected: int
    error_message: str
    redactions: int
    failed_closed: int
    truncated_spans: int
    stage_ns: tuple[tuple[str, int], ...] = ()
    """Time each stage took on this request (decode, records, each processor, encode)."""
    models: tuple[str, ...] = ()
    """The models of the request's model calls (the store prices each one: ADR 39)."""


@dataclass
class PipelineStats:
    """Counted, never logged per item; served on /healthz."""

    requests: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    log_records_accepted: int = 0
    log_records_rejected: int = 0
    redactions: int = 0
    failed_closed: int = 0
    truncated_spans: int = 0
    worker_restarts: int = 0
    refused_busy: int = 0
    """Requests refused (retryably) because too many bytes were in flight."""
    stage_us_per_span: dict[str, float] = field(default_factory=dict)
    """Where a span's time goes, measured where the work runs (the ingest workers): µs per
    span of each stage since start, and ``wal`` (waiting until the log made it durable)."""
    _stage_ns: dict[str, int] = field(default_factory=dict, repr=False)
    _timed_spans: int = field(default=0, repr=False)

    def add_stages(self, stages: tuple[tuple[str, int], ...], spans: int) -> None:
        if not spans:
            return
        self._timed_spans += spans
        for name, ns in stages:
            total = self._stage_ns[name] = self._stage_ns.get(name, 0) + ns
            self.stage_us_per_span[name] = round(total / self._timed_spans / 1000, 2)

    def public(self) -> dict[str, Any]:
        """The figures /healthz serves."""
        return {
            name: value
            for name, value in dataclasses.asdict(self).items()
            if not name.startswith("_")
        }


def process_request(
    processors: list[tuple[str, Processor]],
    raw: bytes,
    as_json: bool,
    project_id: str,
    now_ns: int,
    window_ns: tuple[int, int] | None = None,
) -> ProcessedRequest:
    """Decode, run the processors, encode. Raises InvalidRequest on an undecodable body.
    ``window_ns`` (before, after now) bounds the spans' start times."""
    clock = time.perf_counter_ns
    began = clock()
    request = decode_json(raw) if as_json else decode_protobuf(raw)
    decoded_at = clock()
    window = (now_ns - window_ns[0], now_ns + window_ns[1]) if window_ns else None
    # Read from the bytes protobuf just took; through its objects what that reader leaves.
    decoded = None if as_json else records_from_wire(raw, project_id, now_ns, window)
    if decoded is None:
        decoded = to_records(request, project_id, now_ns, window)
    records = decoded.records
    stages = [("decode", decoded_at - began), ("records", clock() - decoded_at)]
    for name, processor in processors:
        started = clock()
        records = processor(records)
        stages.append((name, clock() - started))
    redactions = failed_closed = truncated = 0
    models: set[str] = set()
    for record in records:
        if record.span_type == "llm" and record.model:
            models.add(record.model)
        if record.redactions:
            redactions += len(record.redactions)
            failed_closed += sum(
                1 for entry in record.redactions if entry.endswith(":redaction_failed")
            )
        truncated += record.truncated
    started = clock()
    payload = encode_block(records) if records else b""
    stages.append(("encode", clock() - started))
    return ProcessedRequest(
        payload,
        len(records),
        decoded.rejected,
        decoded.error_message,
        redactions,
        failed_closed,
        truncated,
        tuple(stages),
        tuple(sorted(models)),
    )


# --- worker processes --------------------------------------------------------------------
_worker_processors: list[tuple[str, Processor]] = []


def _init_worker(factory: ProcessorFactory, parent: int) -> None:
    # A collector killed with SIGKILL cannot shut its pool down: each worker follows its
    # parent out (and the multiprocessing resource tracker, whose pipe they hold, with them).
    # ``parent`` comes from the collector itself: it may be gone before this runs.
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    global _worker_processors
    _worker_processors = factory()
    _quiet_collector()
    _keep_heap()
    _read_requests_whole()


# A request's work frees nearly everything it allocates by reference count; at CPython's
# default (a collection every 700 net allocations) a worker ran ~8 collections per request,
# 2.4-3.3 us per realistic span (~3% of its CPU), traversing its start-up heap (compiled
# rules, modules) each time they reached the oldest generation. The collector's own process
# has had the same treatment since inline ingest (``server.tune_gc_for_ingest``, 50k); a
# worker holds no receiver's buffers, and a smaller threshold bounds its cyclic garbage.
_GC_THRESHOLD = (10_000, 10, 10)


def _quiet_collector() -> None:
    """The worker's start-up heap moved out of the garbage collector's sight (it lives as
    long as the process) and collections made rare: what a request leaves behind is cyclic
    garbage seldom, and a collection still runs every ``_GC_THRESHOLD[0]`` net allocations."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLD)


# glibc's mallopt parameters, and what a worker sets them to. By default glibc gives the top
# of its heap back once more than twice the last large block freed lies unused there, and
# a request's work (~1.6 MB in, ~2 MB of rows out, the records between) frees that much at
# its end: every request faulted its memory in afresh, ~1.5 page faults and ~4 us of kernel
# time per span in each worker at saturation.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_KEPT_BYTES = 64 << 20  # unused heap kept at the top: a few requests' worth
_MMAP_BYTES = 32 << 20  # blocks from this size are mapped on their own (glibc's maximum)


def _keep_heap() -> bool:
    """The worker's heap kept for the next request instead of handed back and faulted in
    again; its peak is unchanged (what one request needs). False where the C library is
    not glibc."""
    try:
        # The C library the process already runs on (no ``find_library``: it runs
        # ``ldconfig`` in a subprocess, at every worker start).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Each on its own: the trim threshold is the one that keeps the heap, and a C library
    # that refuses the mapping threshold (a 32-bit glibc caps it at 16 MiB) may take it.
    results = [
        mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES),
        mallopt(_M_TRIM_THRESHOLD, _HEAP_KEPT_BYTES),
    ]
    return all(results)


# What a pipe between the collector and its workers holds: a request (~1.6 MB for an SDK
# batch of 512 spans) and its rows go through in a few writes, not 64 KiB at a time with a
# wake-up of the other side each time. In a loop of 1.6 MB requests and 2 MB results, the
# workers' CPU for that 7.7 -> 5.7 us per span. The kernel takes the pages as data comes.
_PIPE_BYTES = 1 << 20


def _widen_pipes(pool: ProcessPoolExecutor) -> None:
    """The pool's request and result pipes widened to ``_PIPE_BYTES`` where the system
    lets it (Linux ``F_SETPIPE_SZ``). The kernel grants the size whole or not at all: past
    ``/proc/sys/fs/pipe-max-size`` without ``CAP_SYS_RESOURCE``, or past the user's pipe
    pages (``pipe-user-pages-soft``), the pipes stay as they are (64 KiB), as they do on
    other systems or when the executor's queues are not where CPython keeps them."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if set_size is None:
        return
    for queue in (getattr(pool, "_call_queue", None), getattr(pool, "_result_queue", None)):
        writer: Any = getattr(queue, "_writer", None)
        try:
            fcntl.fcntl(writer.fileno(), set_size, _PIPE_BYTES)
        except (AttributeError, OSError, ValueError) as exc:
            logger.debug("the ingest workers' pipes stay as they are (%s)", type(exc).__name__)


class _Whole:
    """A message read whole into one buffer: what ``Connection._recv`` gives (an
    ``io.BytesIO``) as its readers use it (``getvalue``, ``getbuffer``; ``tell``, ``seek``
    and ``readinto`` for ``recv_bytes_into``)."""

    __slots__ = ("_data", "_position")

    def __init__(self, data: bytearray) -> None:
        self._data = data
        self._position = len(data)  # where a BytesIO written to is left: at its end

    def getvalue(self) -> bytes:
        return bytes(self._data)

    def getbuffer(self) -> memoryview:
        return memoryview(self._data)

    def tell(self) -> int:
        return self._position

    def seek(self, position: int) -> int:
        self._position = max(0, min(position, len(self._data)))
        return self._position

    def readinto(self, target: Any) -> int:
        with memoryview(target) as into:
            size = min(into.nbytes, len(self._data) - self._position)
            into.cast("B")[:size] = self._data[self._position : self._position + size]
        self._position += size
        return size


def _read_whole(handle: int, size: int) -> _Whole:
    """``size`` bytes of a message from the pipe ``handle``, read into one buffer; EOFError
    at the end of the pipe before the message, OSError inside it (as ``Connection._recv``)."""
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        read = os.readv(handle, [view[got:]])
        if read == 0:
            if got == 0:
                raise EOFError
            raise OSError("got end of file during message")
        got += read
    view.release()
    return _Whole(data)


def _read_results_whole(pool: ProcessPoolExecutor) -> None:
    """The pool's results read into one buffer each. multiprocessing reads a message with
    ``os.read`` calls of all that remains (each a fresh allocation of the whole size, cut
    to what came), copied into a growing ``BytesIO`` that pickle then copies from: a
    request's ~1.8 MB of rows cost the collector 1.9 ms of CPU to receive on a quiet
    machine and 3.7 with other work running (more, smaller reads), against 1.5-1.9 and 1.8
    read straight into one ``bytearray`` (``os.readv``; ADR 47). Where the result queue is
    not where CPython keeps it (another Python, another system) it is left as it is."""
    reader: Any = getattr(getattr(pool, "_result_queue", None), "_reader", None)
    try:
        handle = reader.fileno()
        if not callable(getattr(reader, "_recv", None)) or not hasattr(os, "readv"):
            return
    except (AttributeError, OSError, ValueError) as exc:
        logger.debug("the ingest workers' results are read as before (%s)", type(exc).__name__)
        return
    reader._recv = lambda size, *_: _read_whole(handle, size)


def _read_requests_whole() -> None:
    """In a worker: its requests read into one buffer each, as the collector reads their
    results (``_read_results_whole``): ~1.6 MB of request cost a worker 2.5-2.7 ms of CPU to
    receive the stock way, 1.5-1.7 this way. The connection a worker reads from is its
    pool's call queue, which the pool hands it already open: its class's reading is
    replaced, in the worker's process alone (no other connection is read there)."""
    connection: Any = multiprocessing.connection.Connection
    if not hasattr(os, "readv") or not callable(getattr(connection, "_recv", None)):
        return
    connection._recv = lambda self, size, *_: _read_whole(self._handle, size)


def _exit_with_parent(parent: int, interval_s: float = 0.5) -> None:
    while os.getppid() == parent:
        time.sleep(interval_s)
    os._exit(0)


def _work(
    raw: bytes, as_json: bool, project_id: str, now_ns: int, window_ns: tuple[int, int] | None
) -> ProcessedRequest:
    return process_request(_worker_processors, raw, as_json, project_id, now_ns, window_ns)


def _work_logs(
    raw: bytes, as_json: bool, project_id: str, now_ns: int, window_ns: tuple[int, int] | None
) -> ProcessedLogs:
    return process_logs_request(_worker_processors, raw, as_json, project_id, now_ns, window_ns)


def _ready() -> bool:
    return True


class Pipeline:
    def __init__(
        self,
        processors: list[tuple[str, Processor]],
        wal: WriteAheadLog,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
        workers: int = 0,
        processor_factory: ProcessorFactory | None = None,
        retry_after_s: float = 1.0,
        window_ns: tuple[int, int] | None = None,
        max_inflight_bytes: int | None = None,
        on_models: Callable[[tuple[str, ...]], None] | None = None,
    ) -> None:
        self._processors = processors
        self._on_models = on_models
        """Told the models of each request's model calls once they are durable; returns at
        once (collector/store/prices.py)."""
        self._wal = wal
        self._clock_ns = clock_ns
        self.stats = PipelineStats()
        self._pool: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._workers = workers
        self._retry_after_s = retry_after_s
        self._window_ns = window_ns
        self._max_inflight = max_inflight_bytes
        self._inflight = 0
        self.inflight_peak = 0
        """How far before and after now a span may start (None: the store's whole range)."""
        self.failure = ""
        """Why ingest cannot work (the worker pool cannot restart), else empty."""
        if workers > 0:
            if processor_factory is None:
                raise ValueError("worker processes need a processor factory to build their own")
            self._factory = processor_factory
            self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn, never fork: this process runs gRPC and ClickHouse threads.
        pool = ProcessPoolExecutor(
            max_workers=self._workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self._factory, os.getpid()),
        )
        _widen_pipes(pool)
        _read_results_whole(pool)
        return pool

    def _replace_pool(self, broken: ProcessPoolExecutor) -> None:
        """A worker process died (killed, out of memory, a crash in native code): the pool
        is broken for every later request, so a new one takes its place."""
        with self._pool_lock:
            if self._pool is not broken:
                return  # another request replaced it already
            self.stats.worker_restarts += 1
            logger.error(
                "an ingest worker process died; starting a new pool (%d restarts so far)",
                self.stats.worker_restarts,
            )
            broken.shutdown(wait=False, cancel_futures=True)
            try:
                self._pool = self._new_pool()
                self.failure = ""
            except Exception as exc:  # cannot even start processes: say so on /healthz
                self.failure = f"ingest worker pool cannot restart ({type(exc).__name__})"
                logger.error("%s", self.failure)

    def warm_up(self) -> None:
        """Starts the worker processes now rather than on the first request."""
        if self._pool is not None:
            futures = [self._pool.submit(_ready) for _ in range(self._workers)]
            for future in futures:
                future.result(timeout=120)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    async def ingest_bytes(
        self, raw: bytes, as_json: bool, project_id: str, *, logs: bool = False
    ) -> IngestResult:
        """Durable on return. Raises InvalidRequest, or StoreUnavailable when the data cannot
        be made durable. ``logs``: the body is an ExportLogsServiceRequest (its counts are
        of log records)."""
        self.stats.requests += 1
        # The memory limiter (as the OTel Collector's): bytes of requests being decoded and
        # processed are bounded; beyond, refuse at once with a retryable status rather than
        # queue and grow. One request is always admitted, so any request within
        # max_request_bytes can get through.
        size = len(raw)
        if (
            self._max_inflight is not None
            and self._inflight
            and (self._inflight + size > self._max_inflight)
        ):
            self.stats.refused_busy += 1
            raise StoreUnavailable(
                "collector is busy (too much data in flight); retry", self._retry_after_s
            )
        self._inflight += size
        self.inflight_peak = max(self.inflight_peak, self._inflight)
        try:
            if logs:
                return await self._ingest_logs(raw, as_json, project_id)
            return await self._ingest(raw, as_json, project_id)
        finally:
            self._inflight -= size

    async def _process(
        self, raw: bytes, as_json: bool, project_id: str, *, logs: bool
    ) -> ProcessedRequest | ProcessedLogs:
        now_ns = self._clock_ns()
        processed: ProcessedRequest | ProcessedLogs
        inline: Callable[..., ProcessedRequest | ProcessedLogs] = (
            process_logs_request if logs else process_request
        )
        if self._pool is not None:
            loop = asyncio.get_running_loop()
            pool = self._pool
            try:
                processed = await loop.run_in_executor(
                    pool,
                    _work_logs if logs else _work,
                    raw,
                    as_json,
                    project_id,
                    now_ns,
                    self._window_ns,
                )
            except BrokenProcessPool:
                await asyncio.to_thread(self._replace_pool, pool)
                raise StoreUnavailable(
                    "an ingest worker process died; retry", self._retry_after_s
                ) from None
        elif len(raw) >= _OFFLOAD_BYTES:
            processed = await asyncio.to_thread(
                inline,
                self._processors,
                raw,
                as_json,
                project_id,
                now_ns,
                self._window_ns,
            )
        else:
            processed = inline(self._processors, raw, as_json, project_id, now_ns, self._window_ns)
        return processed

    async def _ingest_logs(self, raw: bytes, as_json: bool, project_id: str) -> IngestResult:
        processed = await self._process(raw, as_json, project_id, logs=True)
        if processed.rows:
            await self._wal.append(Batch(processed.payload, processed.rows))
        self.stats.log_records_accepted += processed.rows
        self.stats.log_records_rejected += processed.rejected
        self.stats.redactions += processed.redactions
        self.stats.failed_closed += processed.failed_closed
        return IngestResult(processed.rows, processed.rejected, processed.error_message)

    async def _ingest(self, raw: bytes, as_json: bool, project_id: str) -> IngestResult:
        processed = await self._process(raw, as_json, project_id, logs=False)
        assert isinstance(processed, ProcessedRequest)
        if processed.rows:
            started = time.perf_counter_ns()
            await self._wal.append(Batch(processed.payload, processed.rows))
            waited = time.perf_counter_ns() - started
            self.stats.add_stages((*processed.stage_ns, ("wal", waited)), processed.rows)
            if processed.models and self._on_models is not None:
                self._on_models(processed.models)
        self.stats.spans_accepted += processed.rows
        self.stats.spans_rejected += processed.rejected
        self.stats.redactions += processed.redactions
        self.stats.failed_closed += processed.failed_closed
        self.stats.truncated_spans += processed.truncated_spans
        return IngestResult(processed.rows, processed.rejected, processed.error_message)
