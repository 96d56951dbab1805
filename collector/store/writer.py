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
            self._wal.give_back(batches, segments)
            self.failed_inserts += 1
            self.healthy = False
            self.last_error = type(exc).__name__
            logger.error("insert of %d spans failed (%s); will retry", rows, type(exc).__name__)
            return False
        self._wal.release(batches, segments)
        self.inserted_rows += rows
        self.healthy = True
        self.last_error = ""
        return True
