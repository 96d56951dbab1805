"""The ingest workers' results are read by the collector into one buffer each
(``pipeline._read_results_whole``), not through multiprocessing's ``BytesIO`` of chunks,
and the workers read their requests so (``_read_requests_whole``): whatever their size,
they come back byte for byte; a pipe that ends before or inside a
message fails as multiprocessing's own reader fails; every way of reading a message from
the reader still works; and a pool whose queues are not where CPython keeps them is left
as it is."""

from __future__ import annotations

import multiprocessing
import os
import threading
import types
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from collector.pipeline import _PIPE_BYTES, _read_results_whole, _read_whole, _widen_pipes

SIZES = [0, 1, 4_096, 70_000, _PIPE_BYTES + 12_345, 3_000_000]


def _payload(size: int) -> bytes:
    return bytes(range(251)) * (size // 251) + bytes(size % 251)


def _result(size: int) -> dict[str, Any]:
    """What a worker sends back: rows as bytes, beside other fields."""
    return {"rows": _payload(size), "size": size, "stages": [("redact", 1.5)]}


def _patched(reader: Any) -> bool:
    return "_recv" in vars(reader)


def test_results_of_every_size_come_back_whole_through_the_pool() -> None:
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        _widen_pipes(pool)
        _read_results_whole(pool)
        assert _patched(pool._result_queue._reader)  # type: ignore[attr-defined]
        # Twice each, in one stream of results: one message's end is the next one's start.
        results = list(pool.map(_result, SIZES + SIZES, timeout=120))
    finally:
        pool.shutdown(wait=True)
    assert [r["size"] for r in results] == SIZES + SIZES
    for result in results:
        assert result["rows"] == _payload(result["size"])
        assert result["stages"] == [("redact", 1.5)]


def _reading_code(connection: Any) -> tuple[str, ...]:
    """The names a connection class's way of reading a message calls."""
    return tuple(connection._recv.__code__.co_names)


def _echo(payload: bytes) -> tuple[int, bytes, bool]:
    """In a worker: the request it was given, and whether it reads requests whole."""
    from multiprocessing.connection import Connection

    return len(payload), payload, "_read_whole" in _reading_code(Connection)


def test_requests_of_every_size_reach_the_workers_whole() -> None:
    """The worker's side, as ``_init_worker`` sets it up (its own process only)."""
    from collector.pipeline import _read_requests_whole

    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_read_requests_whole,
    )
    try:
        _widen_pipes(pool)
        payloads = [_payload(size) for size in SIZES + SIZES]
        echoed = list(pool.map(_echo, payloads, timeout=120))
    finally:
        pool.shutdown(wait=True)
    assert [(size, data) for size, data, _ in echoed] == [(len(p), p) for p in payloads]
    assert all(whole for _, _, whole in echoed)
    # This process (the collector's) keeps multiprocessing's own reading for its other
    # connections: only its pools' result readers read whole.
    from multiprocessing.connection import Connection

    assert "_read_whole" not in _reading_code(Connection)


def test_the_collectors_pools_read_their_results_whole(tmp_path: Any) -> None:
    """The pool built at start and one built to replace a broken pool alike."""
    import functools

    from collector.pipeline import Pipeline
    from collector.server import default_processors
    from collector.settings import CollectorSettings
    from collector.store.wal import WriteAheadLog

    wal = WriteAheadLog(tmp_path / "wal", max_bytes=1 << 20, fsync=False, retry_after_s=1.0)
    factory = functools.partial(default_processors, CollectorSettings(data_dir=tmp_path))
    pipeline = Pipeline([], wal, workers=1, processor_factory=factory)
    replacement = pipeline._new_pool()
    try:
        for pool in (pipeline._pool, replacement):
            assert _patched(pool._result_queue._reader)  # type: ignore[union-attr]
    finally:
        replacement.shutdown(wait=True)
        pipeline.close()


def _pipe(data: bytes) -> int:
    """A pipe holding ``data``, its writing end closed; its reading end."""
    reader, writer = os.pipe()
    os.write(writer, data)
    os.close(writer)
    return reader


def test_a_pipe_that_ends_before_or_inside_a_message_fails_as_multiprocessing_does() -> None:
    reader = _pipe(b"")
    try:
        with pytest.raises(EOFError):
            _read_whole(reader, 10)
    finally:
        os.close(reader)
    reader = _pipe(b"abc")
    try:
        with pytest.raises(OSError, match="end of file during message"):
            _read_whole(reader, 10)
    finally:
        os.close(reader)
    reader = _pipe(b"abcdef")
    try:
        whole = _read_whole(reader, 6)
    finally:
        os.close(reader)
    assert whole.getvalue() == b"abcdef" and bytes(whole.getbuffer()) == b"abcdef"


@pytest.mark.parametrize("size", [0, 5, 200_000])
def test_every_way_of_reading_a_message_works_on_the_reader(size: int) -> None:
    reader, writer = multiprocessing.Pipe(duplex=False)
    pool: Any = types.SimpleNamespace(_result_queue=types.SimpleNamespace(_reader=reader))
    _read_results_whole(pool)
    assert _patched(reader)
    data = _payload(size)
    obj = {"rows": data}

    def send() -> None:  # (the pipe holds less than a message: written as it is read)
        writer.send_bytes(data)
        writer.send_bytes(data)
        writer.send(obj)
        writer.send_bytes(b"xy" + data)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        assert reader.recv_bytes() == data
        into = bytearray(size + 8)
        assert reader.recv_bytes_into(into, 8) == size
        assert bytes(into[8:]) == data
        assert reader.recv() == obj
        assert reader.recv_bytes() == b"xy" + data
    finally:
        sender.join()
        reader.close()
        writer.close()


def test_a_pool_without_the_queues_cpython_keeps_is_left_as_it_is() -> None:
    for pool in (
        types.SimpleNamespace(),
        types.SimpleNamespace(_result_queue=types.SimpleNamespace()),
        types.SimpleNamespace(_result_queue=types.SimpleNamespace(_reader=object())),
    ):
        _read_results_whole(pool)  # type: ignore[arg-type]
        reader = getattr(getattr(pool, "_result_queue", None), "_reader", None)
        assert reader is None or not hasattr(reader, "_recv")
