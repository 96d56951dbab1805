"""The Agents SDK ``TracingProcessor``: enqueue on the host thread, everything else behind it.

Threading contract (the SDK calls processors synchronously on the thread that ends a span,
usually the agent's event loop):

- ``on_span_end`` must not block or raise. It appends the span object to a bounded deque
  (an atomic operation under the GIL) and returns; when the deque is full the span is
  dropped and counted. No conversion, no locks, no I/O on the host thread.
- ``on_trace_start`` / ``on_trace_end`` enqueue a timestamped marker the same way.
- ``on_span_start`` does nothing except for model spans of the Chat Completions path,
  whose tool schemas are not on the span: it keeps a reference to the ``tools`` and
  ``handoffs`` arguments of the ``Model.get_response`` call that opened the span; and for
  the task span of a ``Runner.run``: a reference to the run's input, ``max_turns``, starting
  agent and run config (no span carries them; a replay needs them); and, in a trace whose
  metadata sets ``afr.deterministic_ids``, it numbers the span in start order (one dict
  look-up for every other span). ``on_span_end`` of such a span enqueues it with the numbers
  of itself and its parent, so a later run under the same trace id cannot mix them up.
- One daemon worker thread converts (``SpanConverter``) and exports batches through the
  OpenTelemetry OTLP exporter, which retries within its own timeout, honouring the
  server's RetryInfo / Retry-After hints. A batch that still fails is kept and tried again
  with exponential backoff (``retry_initial_s`` doubling to ``retry_max_s``) for as long
  as it takes: a collector down for minutes gets every span when it returns. Spans held
  meanwhile (the batch and the queue) stay within ``max_queue_spans``: beyond, new spans are
  dropped and counted. Nothing ever raises into the agent.
- ``force_flush`` and ``shutdown`` wait for the worker at most until their deadline. At the
  deadline, shutdown aborts the exporter's retries and counts what was left as dropped.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from agents.tracing import Span, Trace, TracingProcessor
from agents.tracing.span_data import GenerationSpanData, TaskSpanData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from afr_exporter.convert import RunStart, SpanConverter, tool_definitions
from afr_exporter.semconv import METADATA_DETERMINISTIC_IDS

__all__ = ["AfrTracingProcessor", "ExporterStats"]

logger = logging.getLogger("afr.exporter")

_TRACE_START = 0
_TRACE_END = 1
_DROP_LOG_INTERVAL_S = 30.0
_MAX_TOOL_REFS = 4_096
# Frames between on_span_start and the Model.get_response/stream_response that opened the
# span: provider.on_span_start <- SpanImpl.start <- SpanImpl.__enter__ <- the model method.
_MAX_FRAMES_TO_MODEL_CALL = 8


@dataclass(frozen=True, slots=True)
class _NumberedSpan:
    """A span of a trace with deterministic ids, with the start-order numbers of itself and
    its parent (SDK span id -> number)."""

    span: Span[Any]
    ordinals: dict[str, int]


@dataclass(frozen=True)
class ExporterStats:
    """What the bridge did with the spans it was given. ``dropped`` is the sum of losses."""

    enqueued: int
    exported: int
    dropped_queue_full: int
    dropped_export_failed: int
    dropped_conversion_failed: int
    dropped_at_shutdown: int
    queued: int
    """Spans held: in the queue, or in a batch waiting to be retried."""
    retries: int = 0
    """Retries of the batch now failing (0 when none is)."""

    @property
    def dropped(self) -> int:
        return (
            self.dropped_queue_full
            + self.dropped_export_failed
            + self.dropped_conversion_failed
            + self.dropped_at_shutdown
        )


class AfrTracingProcessor(TracingProcessor):
    """Ships every Agents SDK trace as OTLP spans without slowing the agent."""

    def __init__(
        self,
        span_exporter: SpanExporter,
        converter: SpanConverter,
        *,
        max_queue_spans: int,
        max_export_batch: int,
        schedule_delay_s: float,
        shutdown_timeout_s: float,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 30.0,
        retry_wait: Callable[[float], None] | None = None,
    ) -> None:
        self._exporter = span_exporter
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._stop_waiting = threading.Event()
        self._retry_wait = retry_wait or self._stop_waiting.wait
        """Waits between retries of a failed batch; returns early at shutdown. Injected by
        tests, which then never sleep."""
        self._pending: list[ReadableSpan] = []
        self._pending_lock = threading.Lock()
        self._retries = 0
        self._converter = converter
        self._max_queue = max_queue_spans
        self._max_batch = max_export_batch
        self._delay_s = schedule_delay_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._queue: deque[Any] = deque()
        self._tools_offered: dict[str, tuple[Any, Any]] = {}
        self._run_starts: dict[str, RunStart] = {}
        # SDK trace id -> {SDK span id: place in start order}, for open traces with
        # deterministic ids. Host thread only: spans are enqueued with their numbers.
        self._ordinals: dict[str, dict[str, int]] = {}
        self._dropped_queue_full = 0
        self._enqueue_attempts = 0
        self._exported = 0
        self._export_failed = 0
        self._conversion_failed = 0
        self._dropped_at_shutdown = 0
        self._logged_drops = 0
        self._last_drop_log = 0.0
        self._busy = False
        self._stopping = False
        self._abandoned = False
        self._is_shut_down = False
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._worker = threading.Thread(target=self._run, name="afr-exporter", daemon=True)
        self._worker.start()

    # --- host thread: must not block or raise --------------------------------------------
    def on_trace_start(self, trace: Trace) -> None:
        try:
            metadata = getattr(trace, "metadata", None)
            if isinstance(metadata, dict) and metadata.get(METADATA_DETERMINISTIC_IDS) is True:
                ordinals = self._ordinals
                while len(ordinals) >= _MAX_TOOL_REFS:  # traces that never ended
                    del ordinals[next(iter(ordinals))]
                ordinals[trace.trace_id] = {}
        except Exception:  # noqa: S110 - never raise into the agent; ids fall back to the SDK's
            pass
        self._enqueue((_TRACE_START, trace, time.time_ns()))

    def on_trace_end(self, trace: Trace) -> None:
        if self._ordinals:
            self._ordinals.pop(getattr(trace, "trace_id", None), None)  # type: ignore[arg-type]
        self._enqueue_attempts += 1  # the workflow root span this marker becomes
        self._enqueue((_TRACE_END, trace, time.time_ns()))

    def on_span_start(self, span: Span[Any]) -> None:
        if self._ordinals:  # only while a trace with deterministic ids is open
            try:
                ordinals = self._ordinals.get(span.trace_id)
                if ordinals is not None:
                    ordinals[span.span_id] = len(ordinals)
            except Exception:  # noqa: S110 - never raise into the agent
                pass
        data_type = type(span.span_data)
        if data_type is TaskSpanData:
            self._remember_run_start(span)
            return
        if data_type is not GenerationSpanData:
            return
        try:
            frame: FrameType | None = sys._getframe(1)
            for _ in range(_MAX_FRAMES_TO_MODEL_CALL):
                if frame is None:
                    return
                if "handoffs" in frame.f_code.co_varnames and "tools" in frame.f_code.co_varnames:
                    local = frame.f_locals
                    if len(self._tools_offered) >= _MAX_TOOL_REFS:
                        self._tools_offered.clear()
                    self._tools_offered[span.span_id] = (local.get("tools"), local.get("handoffs"))
                    return
                frame = frame.f_back
        except Exception:  # noqa: S110 - never raise into the agent; schemas are a bonus
            pass

    def _remember_run_start(self, span: Span[Any]) -> None:
        """References only (no copying, no conversion): the runner frame that opened the
        task span holds the run's input, max_turns, starting agent and run config."""
        try:
            frame: FrameType | None = sys._getframe(2)
            for _ in range(_MAX_FRAMES_TO_MODEL_CALL):
                if frame is None:
                    return
                names = frame.f_code.co_varnames
                if "starting_agent" in names and "max_turns" in names:
                    local = frame.f_locals
                    if len(self._run_starts) >= _MAX_TOOL_REFS:
                        self._run_starts.clear()
                    self._run_starts[span.span_id] = RunStart(
                        local.get("original_input", local.get("input")),
                        local.get("max_turns"),
                        local.get("starting_agent"),
                        local.get("run_config"),
                    )
                    return
                frame = frame.f_back
        except Exception:  # noqa: S110 - never raise into the agent; this is a bonus
            pass

    def on_span_end(self, span: Span[Any]) -> None:
        queue = self._queue
        self._enqueue_attempts += 1
        if len(queue) + len(self._pending) < self._max_queue:
            queue.append(self._numbered(span) if self._ordinals else span)
            if len(queue) == self._max_batch:
                self._wake.set()
        else:
            self._dropped_queue_full += 1

    def _numbered(self, span: Span[Any]) -> Any:
        try:
            ordinals = self._ordinals.get(span.trace_id)
            if ordinals is None:
                return span
            numbers = {k: ordinals[k] for k in (span.span_id, span.parent_id) if k in ordinals}
            return _NumberedSpan(span, numbers)
        except Exception:  # never raise into the agent: the span keeps the SDK's ids
            return span

    def _enqueue(self, item: Any) -> None:
        # Trace markers are few; they may exceed the bound slightly rather than lose a root.
        self._queue.append(item)

    # --- caller-facing, bounded waits ----------------------------------------------------
    @property
    def stats(self) -> ExporterStats:
        return ExporterStats(
            enqueued=self._enqueue_attempts - self._dropped_queue_full,
            exported=self._exported,
            dropped_queue_full=self._dropped_queue_full,
            dropped_export_failed=self._export_failed,
            dropped_conversion_failed=self._conversion_failed,
            dropped_at_shutdown=self._dropped_at_shutdown,
            queued=len(self._queue) + len(self._pending),
            retries=self._retries,
        )

    def force_flush(self, timeout_s: float | None = None) -> bool:  # type: ignore[override]
        """Waits until everything enqueued so far is exported or dropped; False on timeout."""
        budget = self._shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        with self._idle:
            while (self._queue or self._pending or self._busy) and self._worker.is_alive():
                self._wake.set()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.05))
        return not self._queue and not self._pending

    def shutdown(self, timeout: float | None = None) -> None:
        """Drains within ``timeout`` seconds (default ``shutdown_timeout_s``), then stops.

        Never raises and never waits past the deadline: spans still queued or being retried
        then are counted as dropped and reported once in the log.
        """
        if self._is_shut_down:
            return
        self._is_shut_down = True
        budget = self._shutdown_timeout_s if timeout is None else max(0.0, timeout)
        self._stopping = True
        self._wake.set()
        self._worker.join(budget)
        if self._worker.is_alive():
            self._abandoned = True
            self._stop_waiting.set()
            with self._pending_lock:
                self._dropped_at_shutdown += len(self._pending)
                self._pending = []
            # Popped one by one, so a span is counted exactly once whichever thread takes it;
            # a trace-end marker stands for the workflow root span, a trace-start for none.
            while True:
                try:
                    item = self._queue.popleft()
                except IndexError:
                    break
                if not (isinstance(item, tuple) and item[0] == _TRACE_START):
                    self._dropped_at_shutdown += 1
        try:
            self._exporter.shutdown()  # aborts a retry loop still sleeping in the worker
        except Exception:
            logger.exception("afr exporter: the OTLP exporter failed to shut down")
        stats = self.stats
        if stats.dropped:
            logger.warning(
                "afr exporter: %d spans dropped (queue full %d, export failed %d, "
                "conversion failed %d, unsent at shutdown %d)",
                stats.dropped,
                stats.dropped_queue_full,
                stats.dropped_export_failed,
                stats.dropped_conversion_failed,
                stats.dropped_at_shutdown,
            )

    # --- worker thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            while (self._queue or self._pending) and not self._abandoned:
                self._busy = True
                self._export_one_batch()
            self._busy = False
            with self._idle:
                self._idle.notify_all()
            self._log_new_drops()
            if (self._stopping and not self._queue and not self._pending) or self._abandoned:
                return

    def _export_one_batch(self) -> None:
        if self._pending:
            self._retry_pending()
            return
        queue = self._queue
        batch: list[ReadableSpan] = []
        while queue and len(batch) < self._max_batch and not self._abandoned:
            try:
                item = queue.popleft()
            except IndexError:  # emptied by shutdown meanwhile
                break
            try:
                converted = self._convert(item)
            except Exception:
                self._conversion_failed += 1
                logger.debug("afr exporter: could not convert a span", exc_info=True)
                continue
            if converted is not None:
                batch.append(converted)
        if not batch:
            return
        if self._send(batch):
            self._exported += len(batch)
            return
        with self._pending_lock:
            if self._abandoned:
                self._dropped_at_shutdown += len(batch)
            else:
                self._pending = batch  # kept: retried with backoff until it goes through

    def _send(self, batch: list[ReadableSpan]) -> bool:
        try:
            result = self._exporter.export(batch)
        except Exception:
            logger.debug("afr exporter: the OTLP exporter raised", exc_info=True)
            return False
        return result is SpanExportResult.SUCCESS

    def _retry_pending(self) -> None:
        self._retries += 1
        delay = min(self._retry_max_s, self._retry_initial_s * 2 ** min(self._retries - 1, 30))
        if not self._stopping:
            # At shutdown the deadline is what bounds the retries, not the backoff.
            self._retry_wait(delay)
        if self._abandoned:
            return
        with self._pending_lock:
            batch = self._pending
        ok = self._send(batch)
        with self._pending_lock:
            if self._pending is not batch:  # counted as dropped by shutdown meanwhile
                if ok:
                    self._dropped_at_shutdown -= len(batch)
                    self._exported += len(batch)
                return
            if ok:
                self._exported += len(batch)
                self._pending = []
                self._retries = 0

    def _convert(self, item: Any) -> ReadableSpan | None:
        if isinstance(item, tuple):
            marker, trace, stamp_ns = item
            if marker == _TRACE_START:
                self._converter.trace_started(trace, stamp_ns)
                return None
            return self._converter.trace_ended(trace, stamp_ns)
        ordinals: dict[str, int] | None = None
        if type(item) is _NumberedSpan:
            item, ordinals = item.span, item.ordinals
        offered = self._tools_offered.pop(item.span_id, None)
        definitions = None
        if offered is not None:
            tools, handoffs = offered
            definitions = tool_definitions(list(tools or ()), list(handoffs or ()))
        run_start = self._run_starts.pop(item.span_id, None)
        return self._converter.convert(item, definitions, run_start, ordinals)

    def _log_new_drops(self) -> None:
        dropped = self.stats.dropped
        now = time.monotonic()
        if dropped > self._logged_drops and now - self._last_drop_log >= _DROP_LOG_INTERVAL_S:
            logger.warning(
                "afr exporter: %d spans dropped so far (see afr_exporter.stats())", dropped
            )
            self._logged_drops = dropped
            self._last_drop_log = now
