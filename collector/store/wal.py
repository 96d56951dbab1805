"""The write-ahead log: what makes an acknowledgement mean "durable".

``append`` returns only after the batch's bytes are written and fsynced (group commit: one
fsync covers every batch that arrived meanwhile). In the same critical section the batch
joins the in-memory ``ready`` list, so a rotation (``take``) always hands the writer every
batch of every segment it closes. A segment file is deleted only after the writer has
inserted all of its rows (``release``); on a restart, surviving segments are read back and
inserted again (the ReplacingMergeTree makes a re-insert harmless). The writer takes at most
a capped number of rows and bytes at a time (``take``), so a segment may be inserted over
several inserts: each batch remembers its segment, and a closed segment goes when its last
batch is released.

Durability: a new segment's directory entry is fsynced before anything in it is
acknowledged (a file whose creation is not durable can vanish with its records after a
power loss, even if the records themselves were fsynced).

Format (ADR 28): a segment starts with the 8-byte header ``\\xffAFRWAL\\x02`` (format 2),
then records ``<4s marker><u32 length><u32 length ^ 0xffffffff><u32 crc32(payload)><payload>``
(little-endian), the payload being the batch's rows exactly as they will be inserted. The
marker ``\\xfeREC`` cannot occur in a payload (UTF-8 JSON never holds the byte 0xfe).

Recovery reads records in order. A bad record (marker, length check or CRC wrong) is
skipped by scanning forward to the next offset where marker, length check and CRC all hold,
so one damaged record costs only itself; the bytes and records skipped are counted and
logged per segment with their byte offsets (never their content), and their totals are on
``/healthz`` (``wal_corrupt_records_skipped``, ``wal_corrupt_bytes_skipped``). A torn tail
(a record cut short by the end of the file, or zeros to the end: a crash during a write
that was therefore never acknowledged) is ignored with a warning, as before. Segments of
format 1 (records ``<u32 length><u32 crc32><payload>`` from the first byte, no header) are
still read; in them a bad record ends the segment, as it always did.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from collector.blocks import payload_rows
from collector.errors import PayloadTooLarge, StoreUnavailable

__all__ = [
    "DEAD_LETTER",
    "NATIVE_DEAD_LETTER",
    "Batch",
    "SegmentRead",
    "WriteAheadLog",
    "read_segment",
]

logger = logging.getLogger("afr.collector.wal")

_SEGMENT_HEADER = b"\xffAFRWAL\x02"  # read as a format-1 length: 1.4 GB, never a record
_MARKER = b"\xfeREC"
_RECORD = struct.Struct("<4sIII")  # marker, length, length ^ _LENGTH_CHECK, crc32(payload)
_LENGTH_CHECK = 0xFFFFFFFF
_FORMAT_1 = struct.Struct("<II")  # length, crc32(payload): segments written before ADR 28
_CLOSED: BinaryIO = io.BytesIO()  # placeholder until open()
_SEGMENT_GLOB = "segment-*.wal"
DEAD_LETTER = "dead-letter.jsonl"
NATIVE_DEAD_LETTER = "dead-letter.native"


@dataclass
class Batch:
    """Encoded rows of some spans (``blocks.encode_block``; ``model.encode_rows`` in logs
    written before ADR 54; ``log_model.encode_log_rows``), and how many rows that is."""

    payload: bytes
    rows: int
    segment: int = 0
    """The log segment holding it (set when it is made durable)."""


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"segment-{number:012d}.wal"


@dataclass
class SegmentRead:
    """What recovery found in one segment file."""

    payloads: list[bytes]
    """The intact records, in order."""
    corrupt_bytes: int = 0
    """Bytes skipped between (or after) intact records because they do not check out."""
    corrupt_records: int = 0
    """Bad records among them: a lower bound, as a record whose header is destroyed (a
    zeroed page) cannot be told from its neighbour."""
    skipped: list[tuple[int, int]] = field(default_factory=list)
    """Where: each skipped stretch as (first byte, byte after it), in file order."""


_INTACT, _CUT_SHORT, _BAD = range(3)
_LOGGED_STRETCHES = 8
"""Stretches a warning names by offset; beyond them it says how many more."""


def _record_at(data: bytes, offset: int) -> tuple[int, int]:
    """Whether a record starts at ``offset`` (intact, cut short by the end, or bad), and
    where it ends if intact."""
    if len(data) - offset < _RECORD.size:
        return _CUT_SHORT, 0
    marker, length, check, crc = _RECORD.unpack_from(data, offset)
    if marker != _MARKER or length ^ check != _LENGTH_CHECK:
        return _BAD, 0
    end = offset + _RECORD.size + length
    if end > len(data):
        return _CUT_SHORT, 0
    if zlib.crc32(memoryview(data)[offset + _RECORD.size : end]) != crc:
        return _BAD, 0
    return _INTACT, end


def _resync(data: bytes, offset: int) -> tuple[int, int | None]:
    """From a bad record at ``offset``: the next intact record (or ``len(data)``), and the
    first record cut short by the end of the file on the way, if any."""
    status, _ = _record_at(data, offset)
    cut_short = offset if status == _CUT_SHORT else None
    candidate = data.find(_MARKER, offset + 1)
    while candidate != -1:
        status, _ = _record_at(data, candidate)
        if status == _INTACT:
            return candidate, None
        if status == _CUT_SHORT and cut_short is None:
            cut_short = candidate
        # Not past the candidate's claimed length: a false marker must not hide records.
        candidate = data.find(_MARKER, candidate + 1)
    return len(data), cut_short


def _read_records(name: str, data: bytes, offset: int) -> SegmentRead:
    read = SegmentRead([])
    while offset < len(data):
        status, end = _record_at(data, offset)
        if status == _INTACT:
            read.payloads.append(data[offset + _RECORD.size : end])
            offset = end
            continue
        resume, cut_short = _resync(data, offset)
        if resume == len(data) and cut_short is None and data.count(0, offset) == resume - offset:
            cut_short = offset  # zeros to the end: space allocated, never written
        bad_end = resume if cut_short is None else cut_short
        if bad_end > offset:
            read.skipped.append((offset, bad_end))
            read.corrupt_bytes += bad_end - offset
            # The bad record here, and every record header seen after it in the stretch.
            unmarked = data[offset : offset + len(_MARKER)] != _MARKER
            read.corrupt_records += int(unmarked) + data.count(_MARKER, offset, bad_end)
        if cut_short is not None:
            logger.warning("write-ahead log %s: torn record at byte %d ignored", name, cut_short)
        offset = resume
    if read.skipped:
        logger.warning(
            "write-ahead log %s: skipped %d corrupt bytes in %d places (at least %d records) "
            "at bytes %s; recovered the %d intact records around them",
            name,
            read.corrupt_bytes,
            len(read.skipped),
            read.corrupt_records,
            _stretches(read.skipped),
            len(read.payloads),
        )
    return read


def _stretches(skipped: list[tuple[int, int]]) -> str:
    """``4120-4388, 9000-9120`` (end exclusive), the first few and how many more."""
    named = ", ".join(f"{start}-{end}" for start, end in skipped[:_LOGGED_STRETCHES])
    more = len(skipped) - _LOGGED_STRETCHES
    return f"{named} and {more} more" if more > 0 else named


def _read_format_1(name: str, data: bytes) -> SegmentRead:
    read = SegmentRead([])
    offset = 0
    while offset + _FORMAT_1.size <= len(data):
        length, crc = _FORMAT_1.unpack_from(data, offset)
        start = offset + _FORMAT_1.size
        payload = data[start : start + length]
        if not length or len(payload) != length or zlib.crc32(payload) != crc:
            # No marker to resynchronize on: the rest of the segment is lost, as it was. (No
            # record was ever empty: zeros, which would pass the CRC, are not records.)
            logger.warning("write-ahead log %s: torn record at byte %d ignored", name, offset)
            break
        read.payloads.append(payload)
        offset = start + length
    return read


def read_segment(path: Path) -> SegmentRead:
    """The intact records of a segment file of either format, and what was skipped."""
    data = path.read_bytes()
    if data.startswith(_SEGMENT_HEADER):
        return _read_records(path.name, data, len(_SEGMENT_HEADER))
    start = len(_SEGMENT_HEADER)
    if len(data) > start and (
        _record_at(data, start)[0] == _INTACT or _resync(data, start)[0] < len(data)
    ):
        # A damaged header, not format 1: format-1 payloads never hold the marker.
        logger.warning("write-ahead log %s: damaged segment header ignored", path.name)
        read = _read_records(path.name, data, start)
        read.corrupt_bytes += start
        read.skipped.insert(0, (0, start))
        return read
    return _read_format_1(path.name, data)


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
        self._outstanding: dict[int, int] = {}  # segment -> its batches not yet released
        self._segment_bytes: dict[int, int] = {}
        self._unreleased_bytes = 0
        self.failure = ""
        """Why the log cannot take writes (its flush thread died), else empty."""
        self.corrupt_records_skipped = 0
        """Bad records ``open`` skipped (a lower bound, see ``SegmentRead``)."""
        self.corrupt_bytes_skipped = 0
        """Bytes ``open`` skipped because they did not check out (torn tails not counted)."""
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
            read = read_segment(path)
            self.corrupt_records_skipped += read.corrupt_records
            self.corrupt_bytes_skipped += read.corrupt_bytes
            count = len(read.payloads)
            for payload in read.payloads:
                rows = payload_rows(payload)
                self._ready.append(Batch(payload, rows, number))
                self._ready_rows += rows
                recovered += rows
            size = path.stat().st_size
            self._unreleased_bytes += size
            if count:
                self._outstanding[number] = count
                self._segment_bytes[number] = size
            else:
                path.unlink()  # nothing complete in it: never acknowledged
        self._segment_number = (numbers[-1] + 1) if numbers else 1
        self._unreleased_bytes = sum(self._segment_bytes.values())
        self._open_segment()
        self._thread = threading.Thread(target=self._flush_loop, name="afr-wal", daemon=True)
        self._thread.start()
        return recovered

    def _open_segment(self) -> None:
        self._file = _segment_path(self._dir, self._segment_number).open("ab")
        if self._file.tell() == 0:
            # Made durable by the fsync of the first record after it.
            self._file.write(_SEGMENT_HEADER)
        if self._fsync:
            _fsync_directory(self._dir)
        self._segment_dirty = False

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
            if self.failure:
                raise StoreUnavailable("write-ahead log unavailable", self._retry_after_s)
            if len(payload) + _RECORD.size > self._max_bytes:
                # Retrying could never help: no amount of draining makes room for it.
                raise PayloadTooLarge(
                    f"request needs {len(payload) + _RECORD.size} bytes of write-ahead log, "
                    f"more than the whole log holds ({self._max_bytes}): send smaller batches"
                )
            if self._unreleased_bytes + len(payload) > self._max_bytes:
                raise StoreUnavailable(
                    "store is behind: write-ahead log is full", self._retry_after_s
                )
            self._unreleased_bytes += len(payload) + _RECORD.size
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

    def take(self, max_rows: int | None = None, max_bytes: int | None = None) -> list[Batch]:
        """The oldest durable batches, up to ``max_rows`` rows and ``max_bytes`` bytes (at
        least one batch). Closes the current segment if it holds any of them, so that
        every segment a taken batch lives in can be released once inserted."""
        with self._file_lock, self._lock:
            if not self._ready:
                return []
            taken: list[Batch] = []
            rows = size = 0
            for batch in self._ready:
                if taken and (
                    (max_rows is not None and rows + batch.rows > max_rows)
                    or (max_bytes is not None and size + len(batch.payload) > max_bytes)
                ):
                    break
                taken.append(batch)
                rows += batch.rows
                size += len(batch.payload)
            del self._ready[: len(taken)]
            self._ready_rows -= rows
            if any(batch.segment == self._segment_number for batch in taken):
                self._rotate_locked()
            return taken

    def give_back(self, batches: list[Batch]) -> None:
        """A failed insert: the batches go back to the front, their segments stay."""
        with self._lock:
            self._ready[:0] = batches
            self._ready_rows += sum(b.rows for b in batches)

    def release(self, batches: list[Batch]) -> None:
        """The rows are in the store: a closed segment whose every batch is released goes."""
        done: list[int] = []
        with self._lock:
            for batch in batches:
                left = self._outstanding.get(batch.segment, 0) - 1
                self._outstanding[batch.segment] = left
                if left <= 0 and batch.segment != self._segment_number:
                    done.append(batch.segment)
            for number in done:
                self._outstanding.pop(number, None)
        freed = 0
        for number in sorted(set(done)):
            with contextlib.suppress(FileNotFoundError):
                _segment_path(self._dir, number).unlink()
            freed += self._segment_bytes.pop(number, 0)
        with self._lock:
            self._unreleased_bytes = max(0, self._unreleased_bytes - freed)

    def _rotate_locked(self) -> None:
        if not self._segment_dirty:
            return  # nothing written since the last rotation: no empty segment files
        self._file.close()
        closed = self._segment_number
        self._segment_number += 1
        self._open_segment()
        if self._outstanding.get(closed, 0) <= 0:
            # Every batch of it was released while it was still open.
            self._outstanding.pop(closed, None)
            with contextlib.suppress(FileNotFoundError):
                _segment_path(self._dir, closed).unlink()
            self._unreleased_bytes = max(
                0, self._unreleased_bytes - self._segment_bytes.pop(closed, 0)
            )

    def dead_letter(self, rows: bytes, name: str = DEAD_LETTER) -> Path:
        """Rows the store refuses for good (not a store outage): kept, fsynced, out of the
        way. They are already redacted; an operator can inspect and re-insert them. JSON
        rows, one per line, in ``DEAD_LETTER``; a batch of Native blocks that could not be
        read into rows, whole, in ``NATIVE_DEAD_LETTER``."""
        path = self._dir / name
        with path.open("ab") as handle:
            handle.write(rows if rows.endswith(b"\n") or name != DEAD_LETTER else rows + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        path.chmod(0o600)
        return path

    # --- group commit --------------------------------------------------------------------
    def _flush_loop(self) -> None:
        try:
            while self._flush_once():
                pass
        except BaseException as exc:  # the thread must not die silently: every export would hang
            # Logged by type (a traceback could quote a payload) and reported on /healthz.
            self._fail(f"write-ahead log thread stopped ({type(exc).__name__})")

    def _fail(self, reason: str) -> None:
        logger.error("%s; exports are refused until the collector restarts", reason)
        with self._lock:
            self.failure = reason
            pending, self._incoming = self._incoming, []
            self._lock.notify_all()
        for _, _, future, loop in pending:
            failure = StoreUnavailable("write-ahead log unavailable", self._retry_after_s)
            loop.call_soon_threadsafe(_resolve, future, failure)

    def _flush_once(self) -> bool:
        with self._lock:
            while not self._incoming and not self._closed:
                self._lock.wait()
            if not self._incoming and self._closed:
                return False
            pending, self._incoming = self._incoming, []
        error: str | None = None
        # The file lock is held until the batches are in ``ready``: a rotation (take) can
        # never close a segment whose batches the writer would not receive.
        with self._file_lock:
            try:
                written = 0
                for payload, _, _, _ in pending:
                    length = len(payload)
                    header = _RECORD.pack(
                        _MARKER, length, length ^ _LENGTH_CHECK, zlib.crc32(payload)
                    )
                    self._file.write(header)
                    self._file.write(payload)
                    written += _RECORD.size + length
                self._file.flush()
                if self._fsync:
                    os.fsync(self._file.fileno())
                self._segment_dirty = True
            except Exception as exc:  # OSError, or ValueError on a file closed under us
                error = getattr(exc, "strerror", None) or type(exc).__name__
                logger.error("write-ahead log write failed: %s", error)
            with self._lock:
                if error is not None:
                    self._recover_from_write_error()
                    self._unreleased_bytes -= sum(len(p) + _RECORD.size for p, *_ in pending)
                else:
                    number = self._segment_number
                    for _, batch, _, _ in pending:
                        batch.segment = number
                        self._ready.append(batch)
                        self._ready_rows += batch.rows
                    self._outstanding[number] = self._outstanding.get(number, 0) + len(pending)
                    self._segment_bytes[number] = self._segment_bytes.get(number, 0) + written
                self._lock.notify_all()
        for _, _, future, loop in pending:
            failure = None
            if error is not None:
                failure = StoreUnavailable("write-ahead log write failed", self._retry_after_s)
            loop.call_soon_threadsafe(_resolve, future, failure)
        return True

    def _recover_from_write_error(self) -> None:
        # A failed write may leave a torn record mid-segment, which would hide every later
        # record of that segment from recovery: continue in a fresh segment. The torn one
        # goes when its acknowledged batches are released (or now, if it has none).
        with contextlib.suppress(OSError, ValueError):
            self._file.close()
        torn = self._segment_number
        self._segment_number += 1
        try:
            self._open_segment()
        except OSError:
            logger.error("write-ahead log cannot open a new segment")
        if self._outstanding.get(torn, 0) <= 0:
            self._outstanding.pop(torn, None)
            with contextlib.suppress(OSError):
                _segment_path(self._dir, torn).unlink()
            self._segment_bytes.pop(torn, None)

    @property
    def alive(self) -> bool:
        return not self.failure and (self._thread is None or self._thread.is_alive())

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
