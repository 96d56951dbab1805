"""The write-ahead log: what makes an acknowledgement mean "durable".

``append`` returns only after the batch's bytes are written and fsynced (group commit: one
fsync covers every batch that arrived meanwhile). In the same critical section the batch
joins the in-memory ``ready`` list, so a rotation (``take``) always hands the writer every
batch of every segment it closes. A segment file is deleted only after the writer has
inserted all of its rows (``release``); on a restart, surviving segments are read back and
inserted again (the ReplacingMergeTree makes a re-insert harmless).

Record format: ``<u32 length><u32 crc32><payload>``, the payload being the batch's rows
exactly as they will be inserted. A torn or corrupt tail (a
crash during a write that was therefore never acknowledged) ends the segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from collector.errors import PayloadTooLarge, StoreUnavailable

__all__ = ["Batch", "WriteAheadLog"]

logger = logging.getLogger("afr.collector.wal")

_HEADER = struct.Struct("<II")
_CLOSED: BinaryIO = io.BytesIO()  # placeholder until open()
_SEGMENT_GLOB = "segment-*.wal"


@dataclass
class Batch:
    """Encoded rows of some spans (``model.encode_rows``), and how many spans that is."""

    payload: bytes
    rows: int


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"segment-{number:012d}.wal"


def _read_segment(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        payload = data[start : start + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            logger.warning("write-ahead log %s: torn record at byte %d ignored", path.name, offset)
            return
        yield payload
        offset = start + length


class WriteAheadLog:
    def __init__(
        self, directory: Path, *, max_bytes: int, fsync: bool, retry_after_s: float
    ) -> None:
        self._dir = directory
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._retry_after_s = retry_after_s
        self._lock = threading.Condition()
        self._file_lock = threading.Lock()
        self._incoming: list[
            tuple[bytes, Batch, asyncio.Future[None], asyncio.AbstractEventLoop]
        ] = []
        self._ready: list[Batch] = []
        self._ready_rows = 0
        self._segments_in_ready: list[int] = []
        self._unreleased_bytes = 0
        self._segment_number = 0
        self._segment_dirty = False
        self._file: BinaryIO = _CLOSED
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- start-up ------------------------------------------------------------------------
    def open(self) -> int:
        """Reads back unreleased segments into ``ready``; returns how many rows they hold."""
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        numbers = sorted(int(p.stem.split("-")[1]) for p in self._dir.glob(_SEGMENT_GLOB))
        recovered = 0
        for number in numbers:
            path = _segment_path(self._dir, number)
            for payload in _read_segment(path):
                rows = payload.count(b"\n")
                self._ready.append(Batch(payload, rows))
                self._ready_rows += rows
                recovered += rows
            self._unreleased_bytes += path.stat().st_size
            self._segments_in_ready.append(number)
        self._segment_number = (numbers[-1] + 1) if numbers else 1
        self._file = _segment_path(self._dir, self._segment_number).open("ab")
        self._thread = threading.Thread(target=self._flush_loop, name="afr-wal", daemon=True)
        self._thread.start()
        return recovered

    # --- request path --------------------------------------------------------------------
    async def append(self, batch: Batch) -> None:
        """Makes ``batch`` durable; raises StoreUnavailable when the log is full or broken,
        PayloadTooLarge when the batch is larger than the whole log could ever hold."""
        payload = batch.payload
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreUnavailable("collector is shutting down", self._retry_after_s)
            if len(payload) + _HEADER.size > self._max_bytes:
                # Retrying could never help: no amount of draining makes room for it.
                raise PayloadTooLarge(
                    f"request needs {len(payload) + _HEADER.size} bytes of write-ahead log, "
                    f"more than the whole log holds ({self._max_bytes}): send smaller batches"
                )
            if self._unreleased_bytes + len(payload) > self._max_bytes:
                raise StoreUnavailable(
                    "store is behind: write-ahead log is full", self._retry_after_s
                )
            self._unreleased_bytes += len(payload) + _HEADER.size
            self._incoming.append((payload, batch, future, loop))
            self._lock.notify_all()
        await future

    # --- writer side ---------------------------------------------------------------------
    @property
    def ready_rows(self) -> int:
        return self._ready_rows

    @property
    def unreleased_bytes(self) -> int:
        return self._unreleased_bytes

    def wait_ready(self, rows: int, timeout_s: float) -> None:
        with self._lock:
            if self._ready_rows < rows:
                self._lock.wait(timeout_s)

    def take(self) -> tuple[list[Batch], list[int]]:
        """Everything durable so far, and the segments it lives in (closed by this call)."""
        with self._file_lock, self._lock:
            if not self._ready:
                return [], []
            self._rotate_locked()
            batches, segments = self._ready, self._segments_in_ready
            self._ready, self._segments_in_ready, self._ready_rows = [], [], 0
            return batches, segments

    def give_back(self, batches: list[Batch], segments: list[int]) -> None:
        """A failed insert: the batches go back to the front, their segments stay."""
        with self._lock:
            self._ready[:0] = batches
            self._ready_rows += sum(b.rows for b in batches)
            self._segments_in_ready[:0] = segments

    def release(self, batches: list[Batch], segments: list[int]) -> None:
        """The rows are in the store: their segments can go."""
        freed = 0
        for number in segments:
            path = _segment_path(self._dir, number)
            try:
                freed += path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
        with self._lock:
            self._unreleased_bytes = max(0, self._unreleased_bytes - freed)

    def _rotate_locked(self) -> None:
        if not self._segment_dirty:
            return  # nothing written since the last rotation: no empty segment files
        self._file.close()
        self._segments_in_ready.append(self._segment_number)
        self._segment_number += 1
        self._file = _segment_path(self._dir, self._segment_number).open("ab")
        self._segment_dirty = False

    def dead_letter(self, rows: bytes) -> Path:
        """Rows the store refuses for good (not a store outage): kept, fsynced, out of the
        way. They are already redacted; an operator can inspect and re-insert them."""
        path = self._dir / "dead-letter.jsonl"
        with path.open("ab") as handle:
            handle.write(rows if rows.endswith(b"\n") else rows + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        path.chmod(0o600)
        return path

    # --- group commit --------------------------------------------------------------------
    def _flush_loop(self) -> None:
        while True:
            with self._lock:
                while not self._incoming and not self._closed:
                    self._lock.wait()
                if not self._incoming and self._closed:
                    return
                pending, self._incoming = self._incoming, []
            error: OSError | None = None
            # The file lock is held until the batches are in ``ready``: a rotation (take)
            # can never close a segment whose batches the writer would not receive.
            with self._file_lock:
                try:
                    for payload, _, _, _ in pending:
                        self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload)))
                        self._file.write(payload)
                    self._file.flush()
                    if self._fsync:
                        os.fsync(self._file.fileno())
                    self._segment_dirty = True
                except OSError as exc:
                    error = exc
                    logger.error("write-ahead log write failed: %s", exc.strerror)
                with self._lock:
                    if error is not None:
                        self._recover_from_write_error()
                    if error is None:
                        for _, batch, _, _ in pending:
                            self._ready.append(batch)
                            self._ready_rows += batch.rows
                    else:
                        self._unreleased_bytes -= sum(len(p) + _HEADER.size for p, *_ in pending)
                    self._lock.notify_all()
            for _, _, future, loop in pending:
                failure = None
                if error is not None:
                    failure = StoreUnavailable("write-ahead log write failed", self._retry_after_s)
                loop.call_soon_threadsafe(_resolve, future, failure)

    def _recover_from_write_error(self) -> None:
        # A failed write may leave a torn record mid-segment, which would hide every later
        # record of that segment from recovery: continue in a fresh segment.
        with contextlib.suppress(OSError):
            self._file.close()
        self._segments_in_ready.append(self._segment_number)
        self._segment_number += 1
        try:
            self._file = _segment_path(self._dir, self._segment_number).open("ab")
        except OSError:
            logger.error("write-ahead log cannot open a new segment")
        self._segment_dirty = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(5)
        with self._file_lock:
            self._file.close()


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
