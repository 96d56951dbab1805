"""OTLP/gRPC sinks that do the least a Python collector must: the ingest benchmark's floors.

``python -m bench.ingest_sinks {parse,walk} PORT`` serves TraceService/Export on loopback
until killed, answering each export once it has

- ``parse``: decoded the request and counted its spans;
- ``walk``: decoded it and touched every span field and attribute value in Python (nested
  values, events and links too) — what any Python collector pays before doing anything.

Both take the same requests from the same load generator as ``afr up`` in the same run, so
the collector's figure reads as a fraction of each floor.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

__all__ = ["serve"]

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_EMPTY: bytes = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()


def _touch(value: common_pb2.AnyValue) -> int:
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return sum(len(kv.key) + _touch(kv.value) for kv in value.kvlist_value.values)
    if kind == "array_value":
        return sum(_touch(item) for item in value.array_value.values)
    if kind == "string_value":
        return len(value.string_value)
    if kind == "bytes_value":
        return len(value.bytes_value)
    return 1


def walk(request: trace_service_pb2.ExportTraceServiceRequest) -> tuple[int, int]:
    """(spans, characters seen) of every span, attribute, event and link."""
    spans = seen = 0
    for resource_spans in request.resource_spans:
        for kv in resource_spans.resource.attributes:
            seen += len(kv.key) + _touch(kv.value)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans += 1
                seen += len(span.trace_id) + len(span.span_id) + len(span.parent_span_id)
                seen += len(span.name) + len(span.status.message) + span.kind
                seen += span.start_time_unix_nano > span.end_time_unix_nano
                for kv in span.attributes:
                    seen += len(kv.key) + _touch(kv.value)
                for event in span.events:
                    seen += len(event.name)
                    for kv in event.attributes:
                        seen += len(kv.key) + _touch(kv.value)
                for link in span.links:
                    for kv in link.attributes:
                        seen += len(kv.key) + _touch(kv.value)
    return spans, seen


def count(request: trace_service_pb2.ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


async def serve(mode: str, port: int) -> None:
    totals = {"spans": 0}

    async def export(raw: bytes, context: Any) -> bytes:
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(raw)
        totals["spans"] += walk(request)[0] if mode == "walk" else count(request)
        return bytes(_EMPTY)

    handler = grpc.method_handlers_generic_handler(
        _SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(export)}
    )
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2])))
