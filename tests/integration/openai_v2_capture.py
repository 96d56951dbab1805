"""``python -m tests.integration.openai_v2_capture MODE ENDPOINT KEY``: the incident on Chat
Completions through the real Runner and the scripted model server, instrumented by the OTel
contrib OpenAI instrumentation (``opentelemetry-instrumentation-openai-v2``), its spans and
its content log records exported by the OTel SDK's OTLP/gRPC exporters to ENDPOINT.

MODE ``legacy``: content as one log event per message (``gen_ai.user.message``,
``gen_ai.choice``, ...); ``latest``: ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
with content as ``gen_ai.client.inference.operation.details`` events only. A process per
mode: the instrumentation reads the opt-in once per process. Prints the trace ids."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys


def main(mode: str, endpoint: str, key: str) -> None:
    if mode == "latest":
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "EVENT_ONLY"
    else:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from afr.incident import build_model, failing_script, run_incident
    from afr.scripted_model import ScriptedModelServer

    headers = {"authorization": f"Bearer {key}"}
    resource = Resource.create({"service.name": f"openai-v2-{mode}"})
    spans = TracerProvider(resource=resource)
    spans.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, headers=headers, insecure=True))
    )
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, headers=headers, insecure=True))
    )
    instrumentor = OpenAIInstrumentor()  # type: ignore[no-untyped-call]
    instrumentor.instrument(tracer_provider=spans, logger_provider=logs)
    with ScriptedModelServer(failing_script()) as model, contextlib.suppress(Exception):
        asyncio.run(run_incident(build_model("chat", model.base_url)))
    instrumentor.uninstrument()
    spans.shutdown()
    logs.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
