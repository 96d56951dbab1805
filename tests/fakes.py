"""First-class test doubles: real OTLP receivers on loopback that record what arrives.

``OtlpGrpcSink`` is a real grpcio server implementing ``TraceService/Export``;
``OtlpHttpSink`` a real HTTP server for ``POST /v1/traces`` (protobuf, gzip). Both record
every request with its headers so tests can assert on what an exporter really sent.
"""

from __future__ import annotations

import gzip
import threading
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.blocks import block_rows, is_native_payload
from tests.waiting import wait_until


def payload_rows(payload: bytes) -> int:
    """Rows in an insert body: Native blocks' rows, or one per line of JSON."""
    if is_native_payload(payload):
        return sum(len(rows) for _, rows in block_rows(payload))
    return payload.count(b"\n")


@dataclass(frozen=True)
class ReceivedSpan:
    span: trace_pb2.Span
    resource: dict[str, Any]
    scope_name: str

    @property
    def attributes(self) -> dict[str, Any]:
        return {kv.key: _any_value(kv.value) for kv in self.span.attributes}

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class _Recorder:
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self, request: trace_service_pb2.ExportTraceServiceRequest, headers: dict[str, str]
    ) -> None:
        with self.lock:
            self.requests.append(request)
            self.headers.append(headers)

    def spans(self) -> list[ReceivedSpan]:
        with self.lock:
            requests = list(self.requests)
        out = []
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = {
                    kv.key: _any_value(kv.value) for kv in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(ReceivedSpan(span, resource, scope_spans.scope.name))
        return out


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder

    def Export(self, request: Any, context: Any) -> Any:
        headers = {k: v for k, v in context.invocation_metadata()}
        self._recorder.record(request, headers)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpGrpcSink:
    """A real OTLP/gRPC receiver on 127.0.0.1; ``endpoint`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.recorder = _Recorder()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self.recorder), self._server
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> OtlpGrpcSink:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[ReceivedSpan]:
        return self.recorder.spans()


class _HttpHandler(BaseHTTPRequestHandler):
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(raw)
        self.server.recorder.record(request, {k.lower(): v for k, v in self.headers.items()})
        body = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__(("127.0.0.1", 0), _HttpHandler)
        self.recorder = recorder


class OtlpHttpSink:
    """A real OTLP/HTTP receiver; ``endpoint`` is the full ``.../v1/traces`` URL."""

    def __init__(self) -> None:
        self.recorder = _Recorder()
        self._server = _HttpServer(self.recorder)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpHttpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def spans(self) -> list[ReceivedSpan]:
        return self.recorder.spans()


class RecordingProcessor:
    """An Agents SDK processor that keeps every finished span: the ground truth a test
    compares the exported spans against."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.traces: list[Any] = []

    def on_trace_start(self, trace: Any) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Any) -> None:
        return

    def on_span_start(self, span: Any) -> None:
        return

    def on_span_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        return

    def force_flush(self) -> None:
        return


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class FlakyStore:
    """Wraps the real store; while ``failing`` is set every insert raises, as a ClickHouse
    that is down would. Reads pass through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failing = False
        self.failed_inserts = 0
        self.insert_sizes = []

    poison: bytes | None = None
    """Rows containing this are refused as bad data while the store stays up."""
    transient: str | None = None
    """While set, every insert fails with this ClickHouse error (the store still answers)."""
    insert_sizes: list[int]
    """Rows per successful insert, in order."""

    def insert_rows(self, payload: bytes) -> None:
        from clickhouse_connect.driver.exceptions import DatabaseError

        if self.failing:
            self.failed_inserts += 1
            raise ConnectionError("store is down (test)")
        if self.transient is not None:
            self.failed_inserts += 1
            raise DatabaseError(self.transient)
        if self.poison is not None and self.poison in payload:
            # What ClickHouse answers a row it cannot parse (clickhouse-connect's shape).
            raise DatabaseError(
                "Code: 27. DB::Exception: Cannot parse input: expected '\\t' before: "
                "'...': (at row 2). (CANNOT_PARSE_INPUT_ASSERTION_FAILED) (version 26.9.2.1)"
            )
        self.inner.insert_rows(payload)
        self.insert_sizes.append(payload_rows(payload))

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        if self.failing and sql == "SELECT 1":
            raise ConnectionError("store is down (test)")
        result: list[tuple[Any, ...]] = self.inner.query(sql, parameters)
        return result

    def set_model_prices(self, prices: Any) -> None:
        self.inner.set_model_prices(prices)

    def add_model_prices(self, prices: Any) -> None:
        self.inner.add_model_prices(prices)

    def stored_models(self, timeout_s: float = 30.0) -> list[str]:
        models: list[str] = self.inner.stored_models(timeout_s)
        return models

    def close(self) -> None:
        self.inner.close()


def afr_up(grpc_port: int, http_port: int, env: dict[str, str], *extra_args: str) -> Any:
    """`afr up` in its own process, as a user starts it; stdout is piped for its banner."""
    import subprocess
    import sys

    command = [
        sys.executable,
        "-m",
        "afr.cli",
        "up",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        *extra_args,
    ]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def wait_for_line(process: Any, prefix: str, timeout_s: float) -> None:
    """Reads the process's stdout until a line starts with ``prefix``."""
    assert process.stdout is not None

    def printed() -> bool:
        line: str = process.stdout.readline()
        if not line and process.poll() is not None:
            raise AssertionError(f"afr up exited with {process.returncode}")
        return line.startswith(prefix)

    # Each read blocks until a line comes: nothing to sleep between them.
    wait_until(printed, timeout_s=timeout_s, what=f"a line starting with {prefix!r}", interval_s=0)


def stop_process(process: Any, sig: int) -> None:
    process.send_signal(sig)
    process.wait(30)
    if process.stdout is not None:
        process.stdout.close()


class ManualClock:
    """A clock tests move by hand (epoch seconds, like ``time.time``). It pickles, so a
    worker's replay processes get a copy of it as it was when they started."""

    def __init__(self, now: float = 1_764_460_800.0) -> None:  # 2025-11-30T00:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
