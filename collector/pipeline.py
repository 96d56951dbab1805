"""The one pipeline both receivers feed: decode -> processors -> write-ahead log -> ack.

A processor is a pure function over a batch of SpanRecords (normalize, then redact and
truncate). ``ingest`` returns once the accepted spans are durable; the batch writer moves
them into ClickHouse in the background.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.decode import to_records
from collector.model import SpanRecord, encode_rows
from collector.store.wal import Batch, WriteAheadLog

__all__ = ["IngestResult", "Pipeline", "PipelineStats", "Processor"]

logger = logging.getLogger("afr.collector.pipeline")

Processor = Callable[[list[SpanRecord]], list[SpanRecord]]
_OFFLOAD_SPANS = 2_000  # batches this large are processed off the event loop


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    rejected: int
    error_message: str


@dataclass
class PipelineStats:
    requests: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    per_processor: dict[str, int] = field(default_factory=dict)


class Pipeline:
    def __init__(
        self,
        processors: list[tuple[str, Processor]],
        wal: WriteAheadLog,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._processors = processors
        self._wal = wal
        self._clock_ns = clock_ns
        self.stats = PipelineStats()

    def _process(
        self, request: ExportTraceServiceRequest, project_id: str
    ) -> tuple[Batch | None, int, str]:
        decoded = to_records(request, project_id, self._clock_ns())
        records = decoded.records
        for name, processor in self._processors:
            records = processor(records)
            self.stats.per_processor[name] = self.stats.per_processor.get(name, 0) + len(records)
        if not records:
            return None, decoded.rejected, decoded.error_message
        return Batch(encode_rows(records), len(records)), decoded.rejected, decoded.error_message

    async def ingest(self, request: ExportTraceServiceRequest, project_id: str) -> IngestResult:
        """Durable on return. Raises StoreUnavailable when the data cannot be made durable."""
        self.stats.requests += 1
        span_count = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        if span_count >= _OFFLOAD_SPANS:
            batch, rejected, message = await asyncio.to_thread(self._process, request, project_id)
        else:
            batch, rejected, message = self._process(request, project_id)
        accepted = 0
        if batch is not None:
            await self._wal.append(batch)
            accepted = batch.rows
        self.stats.spans_accepted += accepted
        self.stats.spans_rejected += rejected
        return IngestResult(accepted, rejected, message)
