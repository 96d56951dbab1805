"""afr's OpenAI Agents SDK bridge: every run, as OTLP spans, without slowing the agent.

One line in the agent process::

    import afr_exporter
    afr_exporter.install()          # OTEL_EXPORTER_OTLP_* say where and how

``install`` registers an :class:`AfrTracingProcessor` with the SDK and, unless told to keep
it, removes the SDK's default processor that uploads traces to OpenAI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used: `afr_exporter.semconv` stays light
    from opentelemetry.sdk.trace.export import SpanExporter

    from afr_exporter.processor import AfrTracingProcessor, ExporterStats
    from afr_exporter.settings import ExporterSettings

__version__ = "0.1.0"
__all__ = [
    "AfrTracingProcessor",
    "ExporterSettings",
    "ExporterStats",
    "build_processor",
    "install",
    "installed",
    "stats",
]

_installed: AfrTracingProcessor | None = None
_LAZY = {
    "AfrTracingProcessor": "afr_exporter.processor",
    "ExporterStats": "afr_exporter.processor",
    "ExporterSettings": "afr_exporter.settings",
}


def __getattr__(name: str) -> Any:
    """The package's classes, imported on first use: the collector and the worker import
    ``afr_exporter.semconv`` without loading the Agents SDK."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def _otlp_exporter(settings: ExporterSettings) -> SpanExporter:
    headers = settings.headers
    compression: Any = None
    if settings.protocol == "grpc":
        from grpc import Compression as GrpcCompression
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        if settings.compression is not None:
            compression = (
                GrpcCompression.Gzip
                if settings.compression == "gzip"
                else GrpcCompression.NoCompression
            )
        return GrpcSpanExporter(
            endpoint=settings.endpoint,
            headers=headers,
            timeout=settings.timeout_s,
            compression=compression,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    if settings.compression is not None:
        compression = (
            HttpCompression.Gzip
            if settings.compression == "gzip"
            else HttpCompression.NoCompression
        )
    return HttpSpanExporter(
        endpoint=settings.endpoint,
        headers=headers,
        timeout=settings.timeout_s,
        compression=compression,
    )


def build_processor(
    settings: ExporterSettings | None = None,
    *,
    span_exporter: SpanExporter | None = None,
    resource_attributes: dict[str, str] | None = None,
    retry_wait: Callable[[float], None] | None = None,
) -> AfrTracingProcessor:
    """A processor that is not registered anywhere: for callers that manage the SDK's
    processor list themselves (and for tests, which may inject ``retry_wait``: how the
    worker waits between retries of a failed batch)."""
    from opentelemetry.sdk.resources import Resource

    from afr_exporter.convert import SpanConverter
    from afr_exporter.processor import AfrTracingProcessor
    from afr_exporter.semconv import AFR_EXPORTER_VERSION
    from afr_exporter.settings import ExporterSettings

    settings = settings or ExporterSettings()
    attributes: dict[str, Any] = {
        AFR_EXPORTER_VERSION: __version__,
        **(resource_attributes or {}),
    }
    if settings.service_name:
        attributes["service.name"] = settings.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "afr-agent"}))
    return AfrTracingProcessor(
        span_exporter or _otlp_exporter(settings),
        SpanConverter(
            resource,
            capture_content=settings.capture_content,
            latest_conventions=settings.latest_genai_conventions,
        ),
        max_queue_spans=settings.max_queue_spans,
        max_export_batch=settings.max_export_batch,
        schedule_delay_s=settings.schedule_delay_s,
        shutdown_timeout_s=settings.shutdown_timeout_s,
        retry_initial_s=settings.retry_initial_s,
        retry_max_s=settings.retry_max_s,
        retry_wait=retry_wait,
    )


def install(
    *,
    span_exporter: SpanExporter | None = None,
    resource_attributes: dict[str, str] | None = None,
    retry_wait: Callable[[float], None] | None = None,
    **settings: Any,
) -> AfrTracingProcessor:
    """Registers the afr bridge with the Agents SDK and returns its processor.

    Keyword arguments are :class:`ExporterSettings` fields (``endpoint``, ``protocol``,
    ``headers``, ``capture_content``, ``keep_openai_uploader``, ...); what is not given comes
    from the environment. Calling it again replaces the previous bridge.
    """
    global _installed
    from agents.tracing import add_trace_processor, set_trace_processors

    from afr_exporter.settings import ExporterSettings

    resolved = ExporterSettings(**settings)
    processor = build_processor(
        resolved,
        span_exporter=span_exporter,
        resource_attributes=resource_attributes,
        retry_wait=retry_wait,
    )
    previous = _installed
    if resolved.keep_openai_uploader:
        add_trace_processor(processor)
    else:
        set_trace_processors([processor])
    _installed = processor
    if previous is not None:
        previous.shutdown()
    return processor


def installed() -> AfrTracingProcessor | None:
    return _installed


def stats() -> ExporterStats | None:
    """Counts of the installed bridge: enqueued, exported, and every kind of drop."""
    return _installed.stats if _installed is not None else None
