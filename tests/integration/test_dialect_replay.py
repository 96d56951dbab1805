"""Runs captured by other instrumentations replay when the capture carries what a replay
needs — and then to the same verdict as afr's own capture; otherwise the worker says exactly
which pieces are missing (its 422)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from afr.incident import build_model, fixed_script
from afr.scripted_model import ScriptedModelServer
from replay_worker.replay.engine import run_replay
from replay_worker.replay.fixture import FixtureError, build_fixture
from tests.dialects import RECORDINGS, Recording, request_body
from tests.e2e.test_replay import STUB
from tests.integration.conftest import Running, start_collector
from tests.integration.test_dialect_runs import ingest

# What each capture lacks; None: it carries everything a replay needs. On Chat Completions
# no instrumentation records the tool schemas (they are not in the request the span sees).
LACKS: dict[tuple[str, str], tuple[str, ...] | None] = {
    ("openinference", "responses"): None,
    ("openllmetry", "responses"): None,
    ("logfire", "responses"): None,
    ("otel-contrib-v2", "responses"): (
        "the instructions of agent 'Triage Agent'",
        "the instructions of agent 'Refund Agent'",
        "the schema of tool 'refund_order'",
    ),
    ("openinference", "chat"): ("the schema of tool 'refund_order'",),
    ("openllmetry", "chat"): ("the schema of tool 'refund_order'",),
    ("logfire", "chat"): ("the schema of tool 'refund_order'",),
    ("otel-contrib-v2", "chat"): ("the schema of tool 'refund_order'",),
}


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    thread, running = start_collector(Path(tmp_path_factory.mktemp("dialect-replay")) / "data")
    yield running
    thread.stop()


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda r: f"{r.dialect}-{r.api}")
def test_a_third_party_run_replays_or_names_what_it_lacks(
    collector: Running, recording: Recording
) -> None:
    run_id = ingest(collector, request_body(recording), "whole trace, gRPC")
    lacks = LACKS[(recording.dialect, recording.api)]
    if lacks is not None:
        with pytest.raises(FixtureError) as refused:
            build_fixture(collector.run(run_id))
        assert all(piece in str(refused.value) for piece in lacks), str(refused.value)
        return
    fixture = build_fixture(collector.run(run_id))
    assert fixture.entry_agent == "Triage Agent"
    assert fixture.agents["Triage Agent"].handoffs == ["Refund Agent"]
    (call,) = fixture.tool_calls
    assert (call.tool, call.call_id, call.error) == (
        "refund_order",
        "call_refund_1",
        "Error running tool (non-fatal)",
    )
    with ScriptedModelServer(fixed_script()) as model:
        result = asyncio.run(
            run_replay(
                fixture,
                lambda name: build_model("responses", model.base_url),
                stub_outputs={"refund_order": STUB},
            )
        )
    assert result.verdict == "FAILURE_FIXED", result.reason
