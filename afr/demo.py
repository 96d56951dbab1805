"""``afr demo``: walks the sacred path as far as it is built, and says what happened.

Built so far: the seeded failing run (real ``Runner``, scripted model) -> the bridge ->
OTLP/gRPC -> a receiver on loopback. The demo prints the run as a span tree with the red
tool span marked, which is what the Grafana timeline will show once the collector and the
dashboards land.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent import futures
from typing import Any

import grpc
from agents import gen_trace_id
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

import exporter
from afr.incident import RefundDesk, build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer

__all__ = ["run_demo"]


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[trace_pb2.Span] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _attrs(span: trace_pb2.Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind) if kind else None
    return out


def _print_tree(spans: list[trace_pb2.Span]) -> trace_pb2.Span | None:
    children: dict[bytes, list[trace_pb2.Span]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    failing: trace_pb2.Span | None = None

    def walk(parent: bytes, depth: int) -> None:
        nonlocal failing
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time_unix_nano):
            ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
            red = span.status.code == trace_pb2.Status.STATUS_CODE_ERROR
            if red and failing is None:
                failing = span
            mark = "  <-- ERROR " + span.status.message if red else ""
            print(f"    {'  ' * depth}{span.name} [{ms:.1f} ms]{mark}")
            walk(span.span_id, depth + 1)

    walk(b"", 0)
    return failing


def run_demo() -> int:
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        processor = exporter.install(endpoint=f"http://127.0.0.1:{port}", protocol="grpc")
        desk = RefundDesk()
        trace_id = gen_trace_id()
        print("1. seeded failing run: triage -> refund agent -> refund_order(amount='12.OO')")
        with ScriptedModelServer(failing_script()) as model:
            result = asyncio.run(
                run_incident(build_model("responses", model.base_url), desk, trace_id=trace_id)
            )
        print(f"   final answer: {result.final_output}")
        print(f"   refunds actually made: {len(desk.refunds)}")
        processor.force_flush(15)
        processor.shutdown(timeout=2)
        stats = processor.stats
        print(f"2. exported over OTLP/gRPC: {stats.exported} spans, dropped {stats.dropped}")
        print(f"   run id {trace_id.removeprefix('trace_')}:")
        failing = _print_tree(receiver.spans)
        if failing is None:
            print("   no failing span found: the seeded run did not fail as expected")
            return 1
        attrs = _attrs(failing)
        print("3. the red span:")
        print(f"   tool {attrs.get('gen_ai.tool.name')} call {attrs.get('gen_ai.tool.call.id')}")
        print(f"   arguments {json.loads(attrs.get('gen_ai.tool.call.arguments') or 'null')}")
        print(f"   error.type {attrs.get('error.type')!r}")
        print(
            "not built yet: collector -> ClickHouse, Grafana, replay, verdict, evals, sweep "
            "(see the open issues)"
        )
        return 0
    finally:
        server.stop(grace=None)
