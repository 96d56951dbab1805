"""The batch writer: moves durable batches from the write-ahead log into ClickHouse.

One daemon thread inserts whatever the log holds when ``batch_max_rows`` are ready or
``batch_interval_s`` has passed, whichever is first, so inserts are large and at most about
one per interval. A failed insert puts the batches back and retries with backoff; nothing
is released from the log until it is in the store.
"""

from __future__ import annotations

import logging
import threading
import time

from collector.store.client import SpanStore
from collector.store.wal import Batch, WriteAheadLog

__all__ = ["BatchWriter"]

logger = logging.getLogger("afr.collector.writer")

_MAX_BACKOFF_S = 5.0


class BatchWriter:
    def __init__(
        self, store: SpanStore, wal: WriteAheadLog, *, max_rows: int, interval_s: float
    ) -> None:
        self._store = store
        self._wal = wal
        self._max_rows = max_rows
        self._interval_s = interval_s
        self._insert_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="afr-writer", daemon=True)
        self.inserted_rows = 0
        self.failed_inserts = 0
        self.dead_lettered_rows = 0
        self.healthy = True
        self.last_error = ""

    def start(self) -> None:
        self._thread.start()

    def flush(self) -> bool:
        """Inserts everything durable now; True when nothing is left behind."""
        with self._insert_lock:
            batches, segments = self._wal.take()
            if not batches:
                return True
            return self._insert(batches, segments)

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
            ok = self.flush()
            backoff_s = 0.0 if ok else min(_MAX_BACKOFF_S, max(0.5, backoff_s * 2))

    def _insert(self, batches: list[Batch], segments: list[int]) -> bool:
        rows = sum(b.rows for b in batches)
        try:
            self._store.insert_rows(b"".join(b.payload for b in batches))
        except Exception as exc:
            self.failed_inserts += 1
            self.last_error = type(exc).__name__
            if not self._store_answers():
                self._wal.give_back(batches, segments)
                self.healthy = False
                logger.error(
                    "insert of %d spans failed (%s); store down, will retry", rows, self.last_error
                )
                return False
            # The store is up but refuses this data: find the rows it refuses, insert the rest.
            logger.error(
                "the store refused a batch of %d spans (%s); isolating bad rows",
                rows,
                self.last_error,
            )
            self._insert_isolating(b"".join(b.payload for b in batches))
        self._wal.release(batches, segments)
        self.inserted_rows += rows
        self.healthy = True
        self.last_error = ""
        return True

    def _store_answers(self) -> bool:
        try:
            self._store.query("SELECT 1")
        except Exception:
            return False
        return True

    def _insert_isolating(self, payload: bytes) -> None:
        """Bisects ``payload`` (one row per line) until every row is inserted or, alone,
        refused; refused rows go to the dead-letter file, never back into the log."""
        lines = payload.splitlines(keepends=True)
        pending = [lines]
        while pending:
            chunk = pending.pop()
            try:
                self._store.insert_rows(b"".join(chunk))
            except Exception:
                if len(chunk) == 1:
                    self._wal.dead_letter(chunk[0])
                    self.dead_lettered_rows += 1
                    self.inserted_rows -= 1
                    continue
                middle = len(chunk) // 2
                pending += [chunk[:middle], chunk[middle:]]
        if self.dead_lettered_rows:
            logger.error(
                "%d spans refused by the store are kept in the dead-letter file",
                self.dead_lettered_rows,
            )
