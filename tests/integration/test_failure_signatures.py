"""Failure signatures are a property of the failure, not of its delivery (ADR 34).

Each failure kind of the replay matrix (``tests/booking_agent.py``) is captured once for
real: the real ``Runner`` against the scripted model server, ``afr_exporter`` shipping it to a
real collector. Its OTLP export is the template of random runs: fresh trace and span ids,
the whole run moved in time, every run's spans shuffled together and split over random
export batches, 10 % of them delivered twice, all through the collector's OTLP/HTTP receiver
into chDB. Every run must get the signature its kind's capture got, and no two kinds share one.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.booking_agent import (
    FAILURE_KINDS,
    SourceKind,
)
from tests.integration.conftest import Running, capture_failures, start_collector

_SIGNATURES = """
SELECT run_id, signature, failure_cause, failure_path
FROM {db}.run_summary WHERE project = {project:String} AND run_id IN {ids:Array(String)}
"""
DAY_NS = 86_400 * 1_000_000_000
_RUN_NUMBERS = itertools.count(1)


class World:
    def __init__(self, running: Running) -> None:
        self.running = running
        self.templates: dict[SourceKind, dict[str, Any]] = {}
        self.signatures: dict[SourceKind, str] = {}

    def signatures_of(self, run_ids: list[str]) -> dict[str, tuple[str, str, list[str]]]:
        self.running.collector.flush()
        rows = self.running.store.query(_SIGNATURES, {"project": "shop", "ids": run_ids})
        return {row[0]: (row[1], row[2], list(row[3])) for row in rows}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    thread, running = start_collector(tmp_path_factory.mktemp("signatures") / "data")
    world = World(running)
    runs = capture_failures(running, FAILURE_KINDS)
    captured = {kind: run_id for kind, (run_id, _) in runs.items()}
    world.templates = {kind: template for kind, (_, template) in runs.items()}
    found = world.signatures_of(list(captured.values()))
    world.signatures = {kind: found[run_id][0] for kind, run_id in captured.items()}
    yield world
    thread.stop()


def _fresh_run(template: dict[str, Any], rng: random.Random) -> tuple[str, list[dict[str, Any]]]:
    """The template's spans under new ids, moved in time: (run id, [(resource, scope, span)])."""
    body = copy.deepcopy(template)
    # Unique across examples (hypothesis repeats seeds): a run id seen before would merge.
    trace_id = f"{next(_RUN_NUMBERS):08x}{rng.getrandbits(96):024x}"
    span_ids: dict[str, str] = {"": ""}
    shift_ns = rng.randrange(-30 * DAY_NS, 30 * DAY_NS)
    pieces = []
    for resource_spans in body["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                old_trace = span["traceId"]
                span["traceId"] = trace_id
                for key in ("spanId", "parentSpanId"):
                    span[key] = span_ids.setdefault(span[key], f"{rng.getrandbits(64):016x}")
                for key in ("startTimeUnixNano", "endTimeUnixNano"):
                    span[key] = str(int(span[key]) + shift_ns)
                for event in span.get("events", []):
                    event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift_ns)
                for attribute in span.get("attributes", []):
                    value = attribute["value"]
                    if "stringValue" in value:
                        value["stringValue"] = value["stringValue"].replace(old_trace, trace_id)
                piece = {"resource": resource_spans["resource"], "scope": scope_spans["scope"]}
                pieces.append({**piece, "span": span})
    return trace_id, pieces


def _body(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": piece["resource"],
                "scopeSpans": [{"scope": piece["scope"], "spans": [piece["span"]]}],
            }
            for piece in pieces
        ]
    }


def test_each_failure_kind_has_its_own_signature(world: World) -> None:
    assert all(world.signatures.values()), world.signatures
    assert len(set(world.signatures.values())) == len(FAILURE_KINDS), world.signatures


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(FAILURE_KINDS), min_size=1, max_size=10),
    seed=st.integers(min_value=0, max_value=2**32),
    batches=st.integers(min_value=1, max_value=6),
)
def test_same_cause_same_signature_whatever_ids_times_batching_and_duplicates(
    world: World, kinds: list[SourceKind], seed: int, batches: int
) -> None:
    rng = random.Random(seed)
    sent: dict[str, SourceKind] = {}
    pieces: list[dict[str, Any]] = []
    for kind in kinds:
        run_id, run_pieces = _fresh_run(world.templates[kind], rng)
        sent[run_id] = kind
        pieces += run_pieces
    pieces += [piece for piece in pieces if rng.random() < 0.1]  # delivered twice
    rng.shuffle(pieces)
    cuts = sorted(rng.sample(range(1, len(pieces)), min(batches - 1, len(pieces) - 1)))
    for start, end in zip([0, *cuts], [*cuts, len(pieces)], strict=True):
        answer = httpx.post(
            world.running.http_url + "/v1/traces",
            json=_body(pieces[start:end]),
            headers=world.running.headers(),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

    found = world.signatures_of(list(sent))
    assert {run_id: found[run_id][0] for run_id in sent} == {
        run_id: world.signatures[kind] for run_id, kind in sent.items()
    }, json.dumps({run_id: [sent[run_id], *found[run_id]] for run_id in sent}, indent=1)
