"""The bridge's cost to the host agent, and its background conversion cost.

- host: per-span time of ``on_span_end`` over a 10,000-span burst of real SDK spans (taken
  from seeded runs on both model APIs), with the worker thread live, next to a no-op
  processor measured the same way in the same run, and next to converting inline.
- background: per-span time of ``SpanConverter.convert`` and of OTLP protobuf encoding.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.tracing import set_trace_processors
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import afr_exporter
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from afr_exporter.convert import SpanConverter

BURST = 10_000
ROUNDS = 7
RESULTS = Path(__file__).parent / "results"


class _Recorder:
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...
    def on_span_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


class _NoopProcessor(_Recorder):
    def on_span_end(self, span: Any) -> None:
        return


class _NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def real_spans() -> list[Any]:
    """SDK spans of the seeded incident on both model APIs (24 spans of every type)."""
    recorder = _Recorder()
    set_trace_processors([recorder])  # type: ignore[list-item]
    for api in ("responses", "chat"):
        with ScriptedModelServer(failing_script()) as model:
            asyncio.run(run_incident(build_model(api, model.base_url)))
    set_trace_processors([])
    return recorder.spans


def _per_call_ns(on_span_end: Any, spans: list[Any], rounds: int = ROUNDS) -> list[float]:
    """Mean ns per call over each round of a BURST-span burst."""
    burst = [spans[i % len(spans)] for i in range(BURST)]
    means = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter_ns()
        for span in burst:
            on_span_end(span)
        means.append((time.perf_counter_ns() - start) / BURST)
    return means


def main() -> None:
    spans = real_spans()
    resource = Resource.create({"service.name": "bench"})

    noop = _NoopProcessor()
    noop_ns = _per_call_ns(noop.on_span_end, spans)

    processor = afr_exporter.build_processor(
        afr_exporter.ExporterSettings(), span_exporter=_NullExporter()
    )
    host_ns = []
    dropped = 0
    for _ in range(ROUNDS):
        host_ns.extend(_per_call_ns(processor.on_span_end, spans, rounds=1))
        processor.force_flush(60)
        dropped = max(dropped, processor.stats.dropped)
    processor.shutdown()

    converter = SpanConverter(resource)
    inline_ns = _per_call_ns(converter.convert, spans)

    converted = [converter.convert(s) for s in spans]
    batch = [converted[i % len(converted)] for i in range(512)]
    encode_ns = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        encode_spans(batch).SerializeToString()
        encode_ns.append((time.perf_counter_ns() - start) / len(batch))

    figures = {
        "burst_spans": BURST,
        "noop_on_span_end_us": statistics.median(noop_ns) / 1000,
        "afr_on_span_end_us": statistics.median(host_ns) / 1000,
        "afr_on_span_end_max_round_us": max(host_ns) / 1000,
        "inline_convert_us": statistics.median(inline_ns) / 1000,
        "background_encode_us": statistics.median(encode_ns) / 1000,
        "dropped_in_10k_burst": dropped,
    }
    figures["afr_vs_noop_ratio"] = figures["afr_on_span_end_us"] / figures["noop_on_span_end_us"]
    figures["inline_vs_afr_ratio"] = figures["inline_convert_us"] / figures["afr_on_span_end_us"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "exporter.json").write_text(json.dumps(figures, indent=2))
    print("exporter bench (median of rounds; one 10,000-span burst per round)")
    noop_us = figures["noop_on_span_end_us"]
    print(f"  no-op processor on_span_end     {noop_us:8.3f} us/span (baseline)")
    print(
        f"  afr on_span_end (host thread)   {figures['afr_on_span_end_us']:8.3f} us/span "
        f"= {figures['afr_vs_noop_ratio']:.1f}x baseline, worst round "
        f"{figures['afr_on_span_end_max_round_us']:.3f} us; target <= 2 us"
    )
    print(
        f"  convert (background; if inline) {figures['inline_convert_us']:8.3f} us/span "
        f"= {figures['inline_vs_afr_ratio']:.0f}x afr's host cost"
    )
    print(f"  background OTLP encode          {figures['background_encode_us']:8.3f} us/span")
    print(f"  spans dropped in a 10k burst    {dropped:8d}")
