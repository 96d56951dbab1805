"""The collector under faults inside it (issue 12, "seen in the code"): every fault either
heals by itself with nothing acknowledged lost, or is reported on /healthz with its reason.

- a transient store error (too many parts) while the store still answers: the same batch is
  retried, nothing is dead-lettered (it used to be bisected and dead-lettered);
- the backlog after an outage goes in as capped inserts, never one insert of everything;
- the write-ahead log's file failing under it (a ValueError its `except OSError` missed):
  that export is refused retryably, the next one is stored;
- the log's thread dying: exports are refused at once instead of hanging, /healthz says why;
- the writer's loop meeting an unexpected error: it keeps going;
- an ingest worker process killed: the pool is replaced, ingest goes on.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from tests.integration.conftest import Running, start_collector
from tests.integration.test_collector_ingest import TRACE, _grpc_export, _request, _span
from tests.waiting import wait_until


def _send(running: Running, name: str, number: int) -> grpc.StatusCode:
    request = _request(_span(TRACE, number.to_bytes(8, "big"), name))
    code, _, _ = _grpc_export(running, request)
    return code


def _health(running: Running) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(running.http_url + "/healthz")
    body: dict[str, Any] = answer.json()
    return answer.status_code, body


def _names(running: Running) -> set[str]:
    return {span["name"] for span in running.run(TRACE.hex())["spans"]}


TOO_MANY_PARTS = (
    "Code: 252. DB::Exception: Too many parts (3001 with average size of 10.00 KiB) in "
    "table 'afr.otel_traces'. Merges are processing significantly slower than inserts. "
    "(TOO_MANY_PARTS) (version 26.9.2.1)"
)
MEMORY_LIMIT = (
    "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 3.50 GiB. "
    "(MEMORY_LIMIT_EXCEEDED) (version 26.9.2.1)"
)


@pytest.mark.parametrize("error", [TOO_MANY_PARTS, MEMORY_LIMIT], ids=["parts", "memory"])
def test_a_transient_store_error_retries_the_batch_and_dead_letters_nothing(
    running: Running, error: str
) -> None:
    running.store.transient = error
    for number in range(1, 4):
        assert _send(running, f"during {number}", number) == grpc.StatusCode.OK
    assert not running.collector.flush(), "nothing can be inserted while the store refuses"
    status, health = _health(running)
    assert status == 503
    assert health["problems"] == [f"store inserts failing (DatabaseError (code {error[6:9]}))"]
    running.store.transient = None
    assert running.collector.flush()
    assert _names(running) == {"during 1", "during 2", "during 3"}
    status, health = _health(running)
    assert (status, health["problems"], health["dead_lettered_rows"]) == (200, [], 0)
    assert not (running.settings.data_dir / "wal" / "dead-letter.jsonl").exists()


def test_the_backlog_after_an_outage_goes_in_capped_inserts(tmp_path: Path) -> None:
    thread, running = start_collector(tmp_path / "data", batch_max_rows=4)
    try:
        running.store.failing = True
        for number in range(1, 12):
            assert _send(running, f"queued {number}", number) == grpc.StatusCode.OK
        running.store.failing = False
        assert running.collector.flush()
        assert sum(running.store.insert_sizes) == 11
        assert max(running.store.insert_sizes) <= 4, running.store.insert_sizes
        assert len(_names(running)) == 11
        assert running.collector.wal.unreleased_bytes == 0, "every segment was released"
        assert not list((running.settings.data_dir / "wal").glob("segment-*.wal"))[1:]
    finally:
        thread.stop()


def test_the_log_file_failing_under_it_refuses_that_export_and_heals(running: Running) -> None:
    assert _send(running, "before", 1) == grpc.StatusCode.OK
    running.collector.wal._file.close()  # the next write raises ValueError, not OSError
    assert _send(running, "refused", 2) == grpc.StatusCode.UNAVAILABLE
    assert _send(running, "after", 3) == grpc.StatusCode.OK
    assert running.collector.flush()
    assert _names(running) == {"before", "after"}
    assert _health(running)[0] == 200


def test_a_dead_log_thread_refuses_at_once_and_says_why(running: Running) -> None:
    wal = running.collector.wal

    def die() -> bool:
        raise SystemExit  # anything at all, even a BaseException, that ends the thread

    wal._flush_once = die  # type: ignore[method-assign]
    # The thread is waiting inside the real _flush_once: it writes this one, then meets die.
    assert _send(running, "written", 1) == grpc.StatusCode.OK
    wal._thread.join(5)  # type: ignore[union-attr]
    assert not wal.alive
    assert _send(running, "refused", 2) == grpc.StatusCode.UNAVAILABLE
    status, health = _health(running)
    assert status == 503
    assert health["problems"] == ["write-ahead log thread stopped (SystemExit)"]
    assert running.collector.flush()
    assert _names(running) == {"written"}, "what was acknowledged is still stored"


def test_the_writer_loop_survives_an_unexpected_error(running: Running) -> None:
    writer = running.collector.writer
    real_insert = writer.insert_ready
    calls = {"n": 0}

    def flaky_insert() -> bool:
        if threading.current_thread().name == "afr-writer":
            calls["n"] += 1
            if calls["n"] == 1:
                raise KeyError("unexpected")
        return real_insert()

    writer.insert_ready = flaky_insert  # type: ignore[method-assign]
    assert _send(running, "later", 1) == grpc.StatusCode.OK
    # The loop meets the error, backs off, and inserts on its own: nothing here flushes
    # (Running.run would flush from this thread and could store it before the loop ran).

    def stored() -> httpx.Response | None:
        response = running.api(f"/api/v1/runs/{TRACE.hex()}")
        return response if response.status_code == 200 else None

    response = wait_until(
        stored,
        timeout_s=30,
        what="the run stored by the writer loop",
        interval_s=0.1,
    )
    assert {span["name"] for span in response.json()["spans"]} == {"later"}
    assert calls["n"] >= 2, "the loop itself inserted, after the error"
    assert writer.loop_errors == 1
    assert writer.alive


def test_a_killed_ingest_worker_is_replaced(tmp_path: Path) -> None:
    thread, running = start_collector(tmp_path / "data", ingest_workers=1)
    try:
        assert _send(running, "first", 1) == grpc.StatusCode.OK
        pool = running.collector.pipeline._pool
        assert pool is not None
        for process in list(pool._processes.values()):
            assert process.pid is not None
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
        # The request that meets the broken pool is refused retryably; then ingest goes on.
        outcomes = [_send(running, f"next {n}", n) for n in range(2, 5)]
        assert outcomes[0] in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK)
        assert outcomes[1:] == [grpc.StatusCode.OK, grpc.StatusCode.OK]
        assert running.collector.pipeline.stats.worker_restarts == 1
        assert {"first", "next 3", "next 4"} <= _names(running)
        status, health = _health(running)
        assert (status, health["pipeline"]["worker_restarts"]) == (200, 1)
    finally:
        thread.stop()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_memory_limiter_refuses_retryably_while_too_much_is_in_flight(
    tmp_path: Path, transport: str
) -> None:
    """One large request is held mid-processing; a second that would pass the in-flight
    bound is refused at once (UNAVAILABLE / 503 with a retry hint), counted, and goes
    through once the first is done."""
    from collector.processors.normalize import normalize
    from collector.server import CollectorThread
    from collector.settings import CollectorSettings

    entered, release = threading.Event(), threading.Event()

    def held(records: list[Any]) -> list[Any]:
        if any(record.span_name == "held" for record in records):
            entered.set()
            release.wait(30)
        return records

    settings = CollectorSettings(
        data_dir=tmp_path / "data",
        grpc_port=0,
        http_port=0,
        max_inflight_bytes=1024 * 1024,
        max_span_age_days=0,
        auth_enabled=False,
    )
    blob = "b" * (300 * 1024)  # over 256 KiB: processed off the event loop
    big = [
        _request(_span(TRACE, bytes([n]) * 8, name), big_attribute=blob)
        for n, name in ((1, "held"), (2, "second"))
    ]
    sizes = [len(r.SerializeToString()) for r in big]
    assert sizes[0] + sizes[1] > 0 and sizes[0] < 1024 * 1024
    thread = CollectorThread(settings, processors=[("held", held), ("normalize", normalize)])
    collector = thread.__enter__()
    try:

        def send(request: Any) -> Any:
            if transport == "grpc":
                with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
                    call = channel.unary_unary(
                        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                    )
                    try:
                        call(request.SerializeToString(), timeout=30)
                        return "OK", {}
                    except grpc.RpcError as error:
                        return error.code().name, dict(error.trailing_metadata() or ())
            answer = httpx.post(
                f"http://127.0.0.1:{collector.http_port}/v1/traces",
                content=request.SerializeToString(),
                headers={"content-type": "application/x-protobuf"},
                timeout=30,
            )
            return answer.status_code, dict(answer.headers)

        first: dict[str, Any] = {}
        sender = threading.Thread(target=lambda: first.update(result=send(big[0])))
        sender.start()
        assert entered.wait(30), "the first request is being processed"
        # Fill the bound: a third request of ~1 MiB would pass it with the first in flight.
        filler = _request(_span(TRACE, bytes([3]) * 8, "filler"), big_attribute="f" * (900 * 1024))
        code, headers = send(filler)
        if transport == "grpc":
            assert code == "UNAVAILABLE"
            assert "google.rpc.retryinfo-bin" in headers
        else:
            assert code == 503 and "retry-after" in headers
        assert collector.pipeline.stats.refused_busy == 1
        release.set()
        sender.join(30)
        assert first["result"][0] in ("OK", 200)
        # Retried, it goes through.
        assert send(filler)[0] in ("OK", 200)
        assert collector.flush()
        stored = {
            row[0]
            for row in collector.store.query(
                "SELECT SpanName FROM {db}.otel_traces FINAL WHERE TraceId = {t:String}",
                {"t": TRACE.hex()},
            )
        }
        assert stored == {"held", "filler"}
    finally:
        release.set()
        thread.stop()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_an_unexpected_error_is_logged_without_its_content(
    running: Running, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    content = "span content: card 4111 1111 1111 1111 in a message"

    async def explode(raw: bytes, as_json: bool, project_id: str, *, logs: bool = False) -> Any:
        raise RuntimeError(content)

    running.collector.pipeline.ingest_bytes = explode  # type: ignore[method-assign]
    request = _request(_span(TRACE, bytes([7]) * 8, "x"))
    if transport == "grpc":
        code, error, _ = _grpc_export(running, request)
        assert code == grpc.StatusCode.INTERNAL
        assert content not in error.details()
    else:
        answer = httpx.post(
            running.http_url + "/v1/traces",
            content=request.SerializeToString(),
            headers={**running.headers(), "content-type": "application/x-protobuf"},
        )
        assert answer.status_code == 500 and content not in answer.text
    logged = "\n".join(
        record.getMessage() + (str(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert "unexpected RuntimeError" in logged
    assert "4111" not in logged and "span content" not in logged


def _probe(running: Running, probe: str) -> tuple[int, list[str]]:
    answer = httpx.get(running.http_url + "/healthz", params={"probe": probe})
    return answer.status_code, answer.json().get("problems", [answer.json().get("error")])


def test_probes_keep_a_replica_live_and_ready_through_a_store_outage_until_its_log_fills(
    tmp_path: Path,
) -> None:
    """A ClickHouse outage is every replica's: restarting or unreadying them all for it would
    throw away the log that is there to ride it out. Ready ends only when the log is near its
    bound (exports are about to be refused); live only when a thread stopped."""
    thread, running = start_collector(tmp_path / "data", wal_max_bytes=1024 * 1024)
    try:
        running.store.failing = True
        blob = "z" * (30 * 1024)  # small steps: one lands between 90% and the bound
        assert _send(running, "first", 1) == grpc.StatusCode.OK
        assert not running.collector.flush(), "nothing can be inserted while the store fails"
        assert _health(running)[0] == 503, "the whole picture says the store is failing"
        assert _probe(running, "live") == (200, [])
        assert _probe(running, "ready") == (200, [])
        sent = 1
        while running.collector.wal.unreleased_bytes < 0.9 * 1024 * 1024:
            sent += 1
            request = _request(
                _span(TRACE, sent.to_bytes(8, "big"), f"s{sent}"), big_attribute=blob
            )
            held = running.collector.wal.unreleased_bytes
            assert _grpc_export(running, request)[0] == grpc.StatusCode.OK, held
        status, problems = _probe(running, "ready")
        assert status == 503 and "write-ahead log holds" in problems[0], problems
        assert _probe(running, "live") == (200, [])
        running.store.failing = False
        assert running.collector.flush()
        assert _probe(running, "ready") == (200, [])
        assert len(_names(running)) == sent, "everything the log held went in"
        assert _probe(running, "nonsense")[0] == 400
    finally:
        thread.stop()


def test_a_stopped_thread_fails_the_liveness_probe(running: Running) -> None:
    running.collector.pipeline.failure = "the ingest pool cannot start (a test says so)"
    try:
        status, problems = _probe(running, "live")
        assert (status, problems) == (503, ["the ingest pool cannot start (a test says so)"])
        assert _probe(running, "ready")[0] == 503
    finally:
        running.collector.pipeline.failure = ""
