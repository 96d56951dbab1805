"""Span records built directly, for tests and benchmarks of the stages after decoding
(normalization, redaction, truncation): every field has a plain default, a test names only
what it is about."""

from __future__ import annotations

from typing import Any

from collector.model import SpanRecord

__all__ = ["BASE_NS", "span_record"]

BASE_NS = 1_764_000_000_000_000_000
"""2025-11-24T16:00:00Z, in nanoseconds."""


def span_record(**fields: Any) -> SpanRecord:
    """A one-span record with ``fields`` set and the rest empty."""
    defaults: dict[str, Any] = dict(
        project_id="p",
        timestamp_ns=BASE_NS,
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_span_id="",
        trace_state="",
        span_name="step",
        span_kind="Internal",
        service_name="svc",
        resource_attributes={"service.name": "svc"},
        scope_name="",
        scope_version="",
        span_attributes={},
        duration_ns=1,
        status_code="Unset",
        status_message="",
        event_timestamps=[],
        event_names=[],
        event_attributes=[],
        link_trace_ids=[],
        link_span_ids=[],
        link_trace_states=[],
        link_attributes=[],
        ingested_ns=BASE_NS,
    )
    defaults.update(fields)
    return SpanRecord(**defaults)
