"""The batch writer: moves durable batches from the write-ahead log into ClickHouse.

One daemon thread inserts what the log holds when ``batch_max_rows`` are ready or
``batch_interval_s`` has passed, whichever is first, so inserts are large and at most about
one per interval. Each insert is capped at ``batch_max_rows`` rows and ``batch_max_bytes``
bytes: after an outage the backlog (up to the log's 1 GiB) goes in as many bounded inserts,
never one. A failed insert puts the batches back and retries with backoff; nothing is
released from the log until it is in the store.

A failure is classified by its ClickHouse error code (``store/errors.py``): only malformed
data makes the writer split the batch and dead-letter the rows the store refuses alone;
anything else (too many parts, a memory or time limit, the network) retries the same
batch. The thread never dies of an unexpected error: it logs the error's type, reports
itself unhealthy on ``/healthz`` and retries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable

from collector.blocks import NATIVE_PREFIX, BlockError, is_native_payload, json_lines
from collector.log_model import LOGS_PREFIX, is_log_payload
from collector.store.client import SpanStore
from collector.store.errors import InsertFailure, classify_insert_error, clickhouse_code
from collector.store.wal import NATIVE_DEAD_LETTER, Batch, WriteAheadLog

__all__ = ["BatchWriter"]

logger = logging.getLogger("afr.collector.writer")

_MAX_BACKOFF_S = 5.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()
"""Called after each insert: the freed pages of glibc's heaps go back to the system. An
insert's body (up to ``batch_max_bytes``) and the rows it was joined from are freed in the
middle of heaps the receiver threads keep allocating in, where glibc does not return them
on its own. Through ``afr up`` at saturation (realistic OpenInference traces, five runs
each, in turn with the commit before): the collector's peak RSS 22-106 MiB lower, the same
throughput within the noise; a trim takes ~7 ms (at most ~15) of the writer's thread per
insert, about one a second, outside the GIL (ADR 46)."""


class BatchWriter:
    def __init__(
        self,
        store: SpanStore,
        wal: WriteAheadLog,
        *,
        max_rows: int,
        interval_s: float,
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self._store = store
        self._wal = wal
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._interval_s = interval_s
        self._insert_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="afr-writer", daemon=True)
        self.inserted_rows = 0
        self.insert_ns = 0
        """Time spent in inserts that went in (their rows are ``inserted_rows``)."""
        self.failed_inserts = 0
        self.dead_lettered_rows = 0
        self.healthy = True
        self.last_error = ""
        self.inserts = 0
        self.transient_failures = 0
        self.loop_errors = 0

    def start(self) -> None:
        self._thread.start()

    def flush(self) -> bool:
        """Inserts everything durable now, in capped inserts; True when nothing is left."""
        with self._insert_lock:
            while True:
                batches = self._wal.take(self._max_rows, self._max_bytes)
                if not batches:
                    return True
                if not self._insert_taken(batches):
                    return False

    def insert_ready(self) -> bool:
        """One capped insert of the oldest durable batches (none when the log is empty);
        False when it failed and the batches went back."""
        with self._insert_lock:
            batches = self._wal.take(self._max_rows, self._max_bytes)
            return self._insert_taken(batches) if batches else True

    def _insert_taken(self, batches: list[Batch]) -> bool:
        # Spans and log records go to their own tables, spans as Native blocks or (records
        # from before ADR 54) JSON rows: one insert of each kind.
        kinds: dict[int, list[Batch]] = {}
        for batch in batches:
            kinds.setdefault(_kind(batch.payload), []).append(batch)
        ok = True
        for kind in sorted(kinds):
            if ok:
                ok = self._insert(kinds[kind])
            else:
                self._wal.give_back(kinds[kind])
        return ok

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or self._stop.is_set()

    def stop(self, timeout_s: float = 10.0) -> bool:
        self._stop.set()
        self._thread.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.flush():
                return True
            time.sleep(0.2)
        return False

    def _run(self) -> None:
        backoff_s = 0.0
        while not self._stop.is_set():
            started = time.monotonic()
            deadline = started + max(self._interval_s, backoff_s)
            while not self._stop.is_set() and self._wal.ready_rows < self._max_rows:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wal.wait_ready(self._max_rows, min(remaining, 0.25))
            if self._stop.is_set():
                return
            try:
                # One insert per wake-up, never a drain: under load, what arrived during the
                # last insert waits for the interval (or for a full batch) instead of going
                # in at once as a small insert. Small inserts made small parts: four times
                # the parts, files and merges for the same rows (ADR 43).
                inserts = self.inserts
                ok = self.insert_ready()
                if _TRIM is not None and self.inserts != inserts:
                    _TRIM(0)
            except Exception as exc:  # never die: a dead writer fills the log, then refuses all
                ok = False
                self.loop_errors += 1
                self.healthy = False
                self.last_error = type(exc).__name__
                logger.error("writer loop error (%s); retrying", self.last_error)
            backoff_s = 0.0 if ok else min(_MAX_BACKOFF_S, max(0.5, backoff_s * 2))

    def _insert(self, batches: list[Batch]) -> bool:
        rows = sum(b.rows for b in batches)
        payload = _joined(batches)
        started = time.perf_counter_ns()
        try:
            self._store.insert_rows(payload)
        except Exception as exc:
            self.failed_inserts += 1
            code = clickhouse_code(exc)
            self.last_error = type(exc).__name__ + (f" (code {code})" if code else "")
            failure = classify_insert_error(exc)
            if failure is InsertFailure.TRANSIENT or not self._store_answers():
                self._wal.give_back(batches)
                self.healthy = False
                self.transient_failures += 1
                logger.error(
                    "insert of %d spans failed: %s; the same batch is retried",
                    rows,
                    self.last_error,
                )
                return False
            # The store is up and refuses this data: insert it in halves until the rows it
            # refuses are alone (malformed: dead-lettered) or the blocks are small enough.
            logger.error(
                "the store refused a batch of %d spans: %s; isolating what it refuses",
                rows,
                self.last_error,
            )
            if not self._insert_isolating(payload, rows):
                self._wal.give_back(batches)
                self.healthy = False
                return False
        self._wal.release(batches)
        self.inserts += 1
        self.inserted_rows += rows
        self.insert_ns += time.perf_counter_ns() - started
        self.healthy = True
        self.last_error = ""
        return True

    def _store_answers(self) -> bool:
        try:
            self._store.query("SELECT 1")
        except Exception:
            return False
        return True

    def _insert_isolating(self, payload: bytes, rows: int) -> bool:
        """Bisects ``payload`` (``rows`` rows: one per line, or Native blocks read back into
        such lines) until every row is inserted or, alone, refused as malformed; refused
        rows go to the dead-letter file, never back into the log. False when a transient failure interrupts it: the caller retries the whole
        batch later (rows inserted meanwhile are inserted again, harmlessly: the spans
        table replaces duplicates)."""
        prefix = LOGS_PREFIX if is_log_payload(payload) else b""
        if is_native_payload(payload):
            # Bisected as the JSON rows the blocks hold: a refused row is dead-lettered as a
            # line of JSON, as it always was.
            try:
                lines = json_lines(payload)
            except BlockError as exc:
                # Not what the workers write (the log's checksum held): kept whole, aside,
                # all of its rows.
                self._wal.dead_letter(payload, NATIVE_DEAD_LETTER)
                self.dead_lettered_rows += rows
                self.inserted_rows -= rows
                logger.error("a batch the store refused is not readable (%s); set aside", exc)
                return True
        else:
            lines = payload[len(prefix) :].splitlines(keepends=True)
        pending = [lines]
        dead = 0
        while pending:
            chunk = pending.pop()
            try:
                self._store.insert_rows(prefix + b"".join(chunk))
            except Exception as exc:
                failure = classify_insert_error(exc)
                if failure is InsertFailure.TRANSIENT:
                    return False
                if len(chunk) == 1:
                    if failure is InsertFailure.SPLIT:
                        return False  # one row cannot span partitions: not what it seemed
                    self._wal.dead_letter(chunk[0])
                    dead += 1
                    self.inserted_rows -= 1
                    continue
                middle = len(chunk) // 2
                pending += [chunk[:middle], chunk[middle:]]
        if dead:
            self.dead_lettered_rows += dead
            logger.error(
                "%d spans refused by the store as malformed are kept in the dead-letter file",
                dead,
            )
        return True


_NATIVE, _JSON, _LOGS = 0, 1, 2


def _kind(payload: bytes) -> int:
    if is_native_payload(payload):
        return _NATIVE
    return _LOGS if is_log_payload(payload) else _JSON


def _joined(batches: list[Batch]) -> bytes:
    """One insert body of batches of one kind: log rows keep one ``LOGS_PREFIX``, blocks one
    ``NATIVE_PREFIX`` (blocks concatenate). The records are copied once, into the body:
    each one's prefix is left out through a view, not a slice (a copy of each record, then
    of the joined body to put the prefix before it: ~35 MB three times over per insert)."""
    if len(batches) == 1:
        return batches[0].payload
    for prefix in (LOGS_PREFIX, NATIVE_PREFIX):
        if batches[0].payload.startswith(prefix):
            skip = len(prefix)
            return b"".join([prefix, *[memoryview(b.payload)[skip:] for b in batches]])
    return b"".join([b.payload for b in batches])
