"""What one hostile-sized request can cost the store: names and resources are bounded.

A 1 MiB resource attribute on 200 spans used to be stored whole on every span (~200 MB of
log and rows from a 1 MB request), and a 10 MiB span name was stored whole (3 MiB here: the same class, less CPU). Both transports
of the real collector, the real store.
"""

from __future__ import annotations

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.integration.conftest import Running

MiB = 1024 * 1024
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _request(trace: bytes, resource_value: str, span_name: str, spans: int) -> bytes:
    resource = resource_pb2.Resource(
        attributes=[
            common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="svc")),
            common_pb2.KeyValue(key="blob", value=common_pb2.AnyValue(string_value=resource_value)),
        ]
    )
    items = [
        trace_pb2.Span(
            trace_id=trace,
            span_id=(index + 1).to_bytes(8, "big"),
            name=span_name if index == 0 else f"span {index}",
            start_time_unix_nano=1_760_000_000_000_000_000 + index,
            end_time_unix_nano=1_760_000_000_000_000_000 + index + 1000,
        )
        for index in range(spans)
    ]
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=items)]
            )
        ]
    )
    serialized: bytes = request.SerializeToString()
    return serialized


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_huge_resource_value_and_span_name_are_stored_bounded(
    running: Running, transport: str
) -> None:
    trace = bytes.fromhex("ab" * 15 + ("01" if transport == "grpc" else "02"))
    body = _request(trace, "r" * MiB, "n" * (3 * MiB), 200)
    if transport == "http":
        response = httpx.post(
            f"{running.http_url}/v1/traces",
            content=body,
            headers={**running.headers(), "content-type": "application/x-protobuf"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
    else:
        with grpc.insecure_channel(
            running.grpc_endpoint.removeprefix("http://"),
            options=[("grpc.max_send_message_length", 64 * MiB)],
        ) as channel:
            export = channel.unary_unary(EXPORT)
            export(body, metadata=[("authorization", f"Bearer {running.key}")], timeout=60)
    run = running.run(trace.hex())
    spans = run["spans"]
    assert len(spans) == 200
    settings = running.settings
    for span in spans:
        assert len(span["resource_attributes"]["blob"].encode()) <= 4096
        assert '"afr.truncated": true' in span["resource_attributes"]["blob"]
        assert len(span["name"].encode()) <= 1024
        assert span["truncated"] is True
    rows = running.collector.store.query(
        "SELECT sum(length(ResourceAttributes['blob'])), max(length(SpanName)) "
        "FROM {db}.otel_traces WHERE TraceId = {t:String}",
        {"t": trace.hex()},
    )
    resource_bytes, longest_name = rows[0]
    assert resource_bytes <= 200 * 4096, "the resource is stored bounded on every row"
    assert longest_name <= 1024
    assert settings.max_request_bytes >= 4 * MiB
