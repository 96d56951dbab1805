"""A failure cluster's status through the real pieces: the seeded failure captured by the
exporter into a real collector (``open``), replayed by the real engine to FAILURE_FIXED
(``fixed``), an eval synthesized from that replay and run by ``afr eval run`` against the
fixing model (``guarded``, last outcome ``passed``), then the same failure captured again
(``recurring``: the eval passes, yet production still fails the same way)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import gen_trace_id, set_trace_processors

import afr_exporter
from afr.cli import main
from afr.incident import build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from replay_worker.evals.contract import write_eval
from replay_worker.evals.synthesis import synthesize
from tests.e2e.captured import capture_fixed_incident
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow


def _cluster(running: Running, run_id: str) -> dict[str, Any]:
    """The cluster the run is a member of (default window: the last 7 days)."""
    running.collector.flush()
    (summary,) = running.store.query(
        "SELECT signature FROM {db}.run_summary WHERE project = 'shop' AND run_id = {id:String}",
        {"id": run_id},
    )
    answer = running.api(f"/api/v1/failures/{summary[0]}")
    assert answer.status_code == 200, answer.text
    cluster: dict[str, Any] = answer.json()["failure"]
    return cluster


def _capture_failure(running: Running) -> str:
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
    try:
        trace_id = gen_trace_id()
        with ScriptedModelServer(failing_script()) as model:
            asyncio.run(run_incident(build_model("responses", model.base_url), trace_id=trace_id))
        assert processor.force_flush(10)
    finally:
        set_trace_processors([])
        processor.shutdown(timeout=1)
    run_id = trace_id.removeprefix("trace_")
    running.run(run_id)
    return run_id


def test_open_fixed_guarded_then_recurring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    thread, running = start_collector(tmp_path / "data")
    try:
        first = _capture_failure(running)
        opened = _cluster(running, first)
        assert (opened["status"], opened["runs"], opened["fixed_by"]) == ("open", 1, None)

        source, replayed = capture_fixed_incident(running)
        source_id = source["run"]["run_id"]
        fixed = _cluster(running, source_id)
        assert fixed["signature"] == opened["signature"], "the same failure, the same cluster"
        assert (fixed["status"], fixed["runs"]) == ("fixed", 2)
        assert fixed["fixed_by"] == replayed.replay_run_id

        evals = tmp_path / "evals"
        write_eval(synthesize(source, running.run(replayed.replay_run_id)), evals)
        with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
            for name, value in {
                "MODEL_BASE_URL": model.base_url,
                "MODEL_API_KEY": "scripted",
                "DATA_DIR": str(tmp_path / "worker"),
                "COLLECTOR_OTLP_ENDPOINT": running.grpc_endpoint,
                "COLLECTOR_KEY": running.key,
            }.items():
                monkeypatch.setenv(f"AFR_WORKER_{name}", value)
            code = main(["eval", "run", str(evals)])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        guarded = _cluster(running, source_id)
        assert guarded["status"] == "guarded", guarded
        assert guarded["guard"]["last_outcome"] == "passed"
        assert guarded["guard"]["eval_runs"] == 1

        again = _capture_failure(running)
        recurring = _cluster(running, again)
        assert recurring["status"] == "recurring", recurring
        assert recurring["runs"] == 3 and recurring["runs_since_guard"] == 1
        assert recurring["sample_run_ids"][0] == again
        assert recurring["recurring_since_ns"] == guarded["guard"]["first_run_ns"]
        listed = running.api("/api/v1/failures").json()["failures"]
        assert listed[0]["signature"] == recurring["signature"]
    finally:
        thread.stop()
