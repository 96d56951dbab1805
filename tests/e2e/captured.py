"""The seeded failing run and its FAILURE_FIXED replay, captured into a real collector: the
start of every eval and sweep test."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Model, gen_trace_id

import afr_exporter
from afr.incident import build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from replay_worker.replay.engine import ReplayResult, run_replay
from replay_worker.replay.fixture import build_fixture
from tests.e2e.test_replay import STUB
from tests.integration.conftest import Running


def capture_fixed_incident(running: Running) -> tuple[dict[str, Any], ReplayResult]:
    """(the stored failing run, its replay against the fixing model with the labelled stub)."""
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
    source_trace = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        asyncio.run(run_incident(build_model("responses", model.base_url), trace_id=source_trace))
    assert processor.force_flush(10)
    source = running.run(source_trace.removeprefix("trace_"))
    with ScriptedModelServer(fixed_script()) as model:

        def model_for(name: str) -> Model:
            return build_model("responses", model.base_url)

        replayed = asyncio.run(
            run_replay(build_fixture(source), model_for, stub_outputs={"refund_order": STUB})
        )
    assert replayed.verdict == "FAILURE_FIXED"
    assert processor.force_flush(10)
    processor.shutdown(timeout=1)
    return source, replayed
