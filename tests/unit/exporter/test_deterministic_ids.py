"""Deterministic span ids: the same scripted run executed twice under the same trace id, in
a trace whose metadata sets ``afr.deterministic_ids``, exports the same span ids and the same
parentage, so the store (keyed by trace id and span id) holds it once."""

from __future__ import annotations

import asyncio
from collections import Counter

from agents import gen_trace_id
from agents.tracing import set_trace_processors
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import afr_exporter
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from afr_exporter import semconv as sc

Shape = set[tuple[str, int, int | None]]


def _run_twice(trace_ids: tuple[str, str], metadata: dict[str, object]) -> tuple[Shape, Shape]:
    sink = InMemorySpanExporter()
    processor = afr_exporter.build_processor(span_exporter=sink)
    set_trace_processors([processor])
    shapes: list[Shape] = []
    try:
        for trace_id in trace_ids:
            with ScriptedModelServer(failing_script()) as model:
                asyncio.run(
                    run_incident(
                        build_model("responses", model.base_url),
                        trace_id=trace_id,
                        trace_metadata=metadata,
                    )
                )
            assert processor.force_flush(10)
            spans = sink.get_finished_spans()
            sink.clear()
            shapes.append(
                {(s.name, s.context.span_id, s.parent.span_id if s.parent else None) for s in spans}
            )
    finally:
        processor.shutdown(timeout=5)
    return shapes[0], shapes[1]


def test_the_same_run_under_the_same_trace_id_exports_the_same_span_ids() -> None:
    trace_id = gen_trace_id()
    first, second = _run_twice((trace_id, trace_id), {sc.METADATA_DETERMINISTIC_IDS: True})
    assert len(first) >= 8, "agents, guardrail, model calls, handoff, tool and the root"
    assert first == second, "same names, same span ids, same parents"
    assert len({span_id for _, span_id, _ in first}) == len(first), "no id used twice"


def test_without_the_flag_span_ids_are_the_sdks_and_differ_between_runs() -> None:
    trace_id = gen_trace_id()
    first, second = _run_twice((trace_id, trace_id), {})
    shared = {span_id for _, span_id, _ in first} & {span_id for _, span_id, _ in second}
    assert len(shared) == 1, "only the workflow root's id (derived from the trace id) recurs"


def test_another_trace_id_gives_other_span_ids() -> None:
    first, second = _run_twice(
        (gen_trace_id(), gen_trace_id()), {sc.METADATA_DETERMINISTIC_IDS: True}
    )
    assert not {span_id for _, span_id, _ in first} & {span_id for _, span_id, _ in second}


def test_a_rerun_started_before_the_first_run_was_exported_gets_the_same_ids() -> None:
    """The numbers travel with each span: a second run under the same trace id, started
    while the first one's spans still wait in the queue, cannot renumber them."""
    sink = InMemorySpanExporter()
    processor = afr_exporter.build_processor(
        afr_exporter.ExporterSettings(schedule_delay_s=60, max_export_batch=10_000),
        span_exporter=sink,
    )
    set_trace_processors([processor])
    trace_id = gen_trace_id()
    try:
        for _ in range(2):
            with ScriptedModelServer(failing_script()) as model:
                asyncio.run(
                    run_incident(
                        build_model("responses", model.base_url),
                        trace_id=trace_id,
                        trace_metadata={sc.METADATA_DETERMINISTIC_IDS: True},
                    )
                )
        assert processor.stats.exported == 0, "nothing exported between the two runs"
        assert processor.force_flush(10)
    finally:
        processor.shutdown(timeout=5)
    ids = Counter(
        (s.name, s.context.span_id, s.parent.span_id if s.parent else None)
        for s in sink.get_finished_spans()
    )
    assert ids and set(ids.values()) == {2}, "each span twice, with the same id and parent"
