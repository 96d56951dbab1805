"""A collector that is down, late, hanging or slow never breaks or stalls the agent."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import afr_exporter
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from tests.fakes import OtlpGrpcSink, _Recorder, _Servicer, free_port
from tests.waiting import wait_until

SPANS_IN_INCIDENT = 12 + 1  # 12 SDK spans and the workflow root


def _run_incident_with(
    processor_kwargs: dict[str, Any],
) -> tuple[afr_exporter.AfrTracingProcessor, float]:
    with ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(**processor_kwargs)
        started = time.monotonic()
        result = asyncio.run(run_incident(build_model("responses", model.base_url)))
        elapsed = time.monotonic() - started
    assert "could not process the refund" in str(result.final_output)
    return processor, elapsed


def test_collector_down_run_completes_spans_held_then_counted_dropped_at_exit() -> None:
    port = free_port()  # nothing listens here
    waits: list[float] = []
    processor, run_s = _run_incident_with(
        {
            "endpoint": f"http://127.0.0.1:{port}",
            "timeout_s": 0.3,
            "schedule_delay_s": 0.05,
            "retry_wait": waits.append,  # retries at once, recording the backoff asked for
        }
    )
    assert run_s < 5, "the agent is not held up by a dead collector"
    assert not processor.force_flush(1), "nothing can be delivered"
    stats = processor.stats
    assert stats.queued == SPANS_IN_INCIDENT and stats.retries >= 1 and stats.dropped == 0
    started = time.monotonic()
    processor.shutdown(timeout=1)
    # 1 s deadline; the margin is for a loaded machine (unbounded, it would wait for ever)
    assert time.monotonic() - started < 3.0, "exit waits no longer than the deadline"
    stats = processor.stats
    assert stats.exported == 0
    assert stats.dropped_at_shutdown == SPANS_IN_INCIDENT
    assert afr_exporter.stats() == stats


def _grpc_sink(port: int, recorder: _Recorder) -> grpc.Server:
    from concurrent.futures import ThreadPoolExecutor

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(recorder), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def test_a_collector_down_for_minutes_gets_every_span_when_it_returns() -> None:
    """Down for six backoff rounds (0.5 + 1 + 2 + 4 + 8 + 16 s: over half a minute had the
    waits been real), then up: every span arrives, nothing is dropped, and the waits grew
    exponentially to the cap. The waits are injected: no test time is spent sleeping."""
    port = free_port()
    recorder = _Recorder()
    servers: list[grpc.Server] = []
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 6:
            servers.append(_grpc_sink(port, recorder))  # the collector is back

    processor, run_s = _run_incident_with(
        {
            "endpoint": f"http://127.0.0.1:{port}",
            "timeout_s": 0.3,
            "schedule_delay_s": 0.05,
            "retry_max_s": 10,
            "retry_wait": wait,
        }
    )
    try:
        assert run_s < 5
        assert processor.force_flush(30)
    finally:
        for server in servers:
            server.stop(grace=None)
    assert waits[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert len(recorder.spans()) == SPANS_IN_INCIDENT
    assert processor.stats.exported == SPANS_IN_INCIDENT and processor.stats.dropped == 0
    processor.shutdown(timeout=1)


def test_while_the_collector_is_down_spans_beyond_the_bound_are_counted_dropped() -> None:
    port = free_port()
    recorder = _Recorder()
    servers: list[grpc.Server] = []
    ran = threading.Event()

    def wait(seconds: float) -> None:
        if ran.is_set() and not servers:
            servers.append(_grpc_sink(port, recorder))

    processor, _ = _run_incident_with(
        {
            "endpoint": f"http://127.0.0.1:{port}",
            "timeout_s": 0.3,
            "schedule_delay_s": 0.05,
            "max_queue_spans": 5,
            "max_export_batch": 5,
            "retry_wait": wait,
        }
    )
    ran.set()
    try:
        assert processor.force_flush(30)
    finally:
        for server in servers:
            server.stop(grace=None)
    stats = processor.stats
    assert stats.exported + stats.dropped_queue_full == SPANS_IN_INCIDENT
    assert stats.dropped_queue_full > 0 and stats.exported >= 5
    assert len(recorder.spans()) == stats.exported
    processor.shutdown(timeout=1)


class _UnavailableThenOk(_Servicer):
    """Answers UNAVAILABLE with a RetryInfo of 0.4 s twice, then takes the batch."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__(recorder)
        self.attempts: list[float] = []

    def Export(self, request: Any, context: Any) -> Any:
        from google.protobuf.duration_pb2 import Duration
        from google.rpc import error_details_pb2

        self.attempts.append(time.monotonic())
        if len(self.attempts) <= 2:
            info = error_details_pb2.RetryInfo(retry_delay=Duration(nanos=400_000_000))
            context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "busy (test)")
        return super().Export(request, context)


def test_unavailable_with_retry_info_is_retried_after_the_hint() -> None:
    from concurrent.futures import ThreadPoolExecutor

    recorder = _Recorder()
    servicer = _UnavailableThenOk(recorder)
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        processor, run_s = _run_incident_with(
            {"endpoint": f"http://127.0.0.1:{port}", "timeout_s": 10, "schedule_delay_s": 0.05}
        )
        assert run_s < 5
        assert processor.force_flush(10)
    finally:
        server.stop(grace=None)
    assert len(recorder.spans()) == SPANS_IN_INCIDENT
    gaps = [b - a for a, b in zip(servicer.attempts, servicer.attempts[1:], strict=False)]
    # Two refusals, each followed by a wait of the hint (later attempts: later batches).
    assert len(gaps) >= 2 and all(gap >= 0.39 for gap in gaps[:2]), gaps
    processor.shutdown(timeout=1)


def test_collector_that_comes_up_late_receives_every_span_through_retries() -> None:
    port = free_port()
    backing_off = threading.Event()

    def wait(seconds: float) -> None:
        backing_off.set()
        time.sleep(seconds)  # the backoff itself, real: the collector comes up during it

    processor, _ = _run_incident_with(
        {
            "endpoint": f"http://127.0.0.1:{port}",
            "timeout_s": 8,
            "schedule_delay_s": 0.05,
            "retry_wait": wait,
        }
    )
    assert backing_off.wait(10), "the first attempt failed and the exporter backs off"
    recorder = _Recorder()
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(recorder), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        assert processor.force_flush(10)
    finally:
        server.stop(grace=None)
    assert len(recorder.spans()) == SPANS_IN_INCIDENT
    assert processor.stats.exported == SPANS_IN_INCIDENT
    assert processor.stats.dropped == 0


@dataclass(frozen=True)
class HangingCollector:
    port: int
    connected: threading.Event  # set once an exporter's connection is accepted


@pytest.fixture
def hanging_collector() -> Iterator[HangingCollector]:
    """Accepts TCP connections and never answers: the worst kind of slow collector."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()
    connected = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn)
                connected.set()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield HangingCollector(listener.getsockname()[1], connected)
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_hanging_collector_exit_is_bounded_by_the_shutdown_deadline(
    hanging_collector: HangingCollector,
) -> None:
    processor, run_s = _run_incident_with(
        {
            "endpoint": f"http://127.0.0.1:{hanging_collector.port}",
            "timeout_s": 30,
            "schedule_delay_s": 0.05,
        }
    )
    assert run_s < 5
    # Connected and never answered: the exporter's worker is stuck inside an export call.
    assert hanging_collector.connected.wait(10), "the exporter connected"
    started = time.monotonic()
    processor.shutdown(timeout=1.0)
    assert time.monotonic() - started < 3.0, "not the 30 s export timeout"
    stats = processor.stats
    assert stats.exported == 0
    assert stats.queued == 0
    # The batch that was in flight is counted once the aborted export returns: every span
    # ends up accounted for as dropped, none silently.
    wait_until(
        lambda: processor.stats.dropped >= SPANS_IN_INCIDENT,
        timeout_s=5,
        what="the aborted batch counted dropped",
    )
    assert processor.stats.dropped == SPANS_IN_INCIDENT


class _BlockingExporter(SpanExporter):
    """Blocks every export until released: a stalled network, without the network."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_full_queue_drops_are_counted_and_the_run_is_unaffected() -> None:
    blocking = _BlockingExporter()
    processor, _ = _run_incident_with(
        {
            "span_exporter": blocking,
            "max_queue_spans": 4,
            "max_export_batch": 1,
            "schedule_delay_s": 0.01,
        }
    )
    dropped = processor.stats.dropped_queue_full
    assert dropped > 0
    blocking.release.set()
    assert processor.force_flush(5)
    stats = processor.stats
    assert stats.exported + stats.dropped_queue_full == SPANS_IN_INCIDENT
    assert len(blocking.spans) == stats.exported


def test_on_span_end_never_raises_even_for_garbage() -> None:
    with OtlpGrpcSink() as sink:
        processor = afr_exporter.install(endpoint=sink.endpoint, schedule_delay_s=0.01)
        processor.on_span_end(object())  # type: ignore[arg-type]
        processor.on_span_end(None)  # type: ignore[arg-type]
        assert processor.force_flush(5)
    assert processor.stats.dropped_conversion_failed == 2
    assert sink.spans() == []
