"""The data afr's dashboards are tested against, made by the real pipeline: the seeded
failing refund run and its FAILURE_FIXED replay, two synthesized evals run in two sweeps
(one eval passes against the fixing model, one fails against the original behaviour), the
sweeps' summary runs; then every run delivered a second time over OTLP/HTTP (duplicate
deliveries, as retrying clients make them) and the source run once more under another
project (tenancy)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx
from agents import Model

import afr_exporter
from afr.incident import build_model, failing_script, fixed_script
from afr.scripted_model import ScriptedModelServer, ScriptedTurn
from replay_worker.evals.contract import EvalDocument
from replay_worker.evals.runner import EvalOutcome, run_eval
from replay_worker.evals.synthesis import synthesize
from replay_worker.sweeps import SweepSummary, emit_summary_run, sweep_trace_id
from tests.e2e.captured import capture_fixed_incident
from tests.integration.conftest import Running

SWEEP_MIXED = "sweep_dashboards_mixed"
SWEEP_GREEN = "sweep_dashboards_green"
OTHER_PROJECT = "elsewhere"


@dataclass
class Seeded:
    source_run_id: str
    replay_run_id: str
    passing: EvalDocument
    failing: EvalDocument
    eval_runs: dict[tuple[str, str], EvalOutcome] = field(default_factory=dict)
    """(sweep id, eval name) -> outcome."""
    sweep_runs: dict[str, str] = field(default_factory=dict)
    """sweep id -> its summary run id."""
    other_key: str = ""

    @property
    def run_ids(self) -> list[str]:
        return [
            self.source_run_id,
            self.replay_run_id,
            *(o.eval_run_id or "" for o in self.eval_runs.values()),
            *self.sweep_runs.values(),
        ]


def _run_eval(document: EvalDocument, script: list[ScriptedTurn], sweep_id: str) -> EvalOutcome:
    with ScriptedModelServer(script, per_conversation=True) as model:

        def model_for(name: str) -> Model:
            return build_model("responses", model.base_url)

        return asyncio.run(run_eval(document, model_for=model_for, sweep_id=sweep_id))


def _summary(sweep_id: str, outcomes: list[EvalOutcome]) -> SweepSummary:
    counts = {s: sum(o.status == s for o in outcomes) for s in ("passed", "failed")}
    return SweepSummary(
        sweep_id,
        "2026-12-01T03:00:00Z",
        "manual",
        sweep_trace_id(sweep_id).removeprefix("trace_"),
        passed=counts["passed"],
        failed=counts["failed"],
        results=[
            {"eval_id": o.eval_id, "name": o.name, "status": o.status, "eval_run_id": o.eval_run_id}
            for o in outcomes
        ],
    )


def redeliver(running: Running, run_id: str, key: str | None = None) -> None:
    """The run's spans sent again through the collector's OTLP/HTTP receiver."""
    body = running.api(f"/api/v1/runs/{run_id}/otlp").json()
    response = httpx.post(
        running.http_url + "/v1/traces", json=body, headers=running.headers(key), timeout=30
    )
    assert response.status_code == 200, response.text


def seed(running: Running) -> Seeded:
    store: Any = running.store.inner
    store.set_model_prices(running.settings.model_prices)  # as Collector does with its own store
    source, replayed = capture_fixed_incident(running)
    synthesized = synthesize(source, running.run(replayed.replay_run_id))
    passing, failing = (
        EvalDocument.create(
            name=f"{synthesized.name} ({label})",
            provenance=synthesized.provenance,
            fixture=synthesized.fixture,
            replay=synthesized.replay,
            assertions=list(synthesized.assertions),
        )
        for label in ("fixing model", "original behaviour")
    )
    seeded = Seeded(source["run"]["run_id"], replayed.replay_run_id, passing, failing)
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
    plan = {
        SWEEP_MIXED: [(passing, fixed_script()), (failing, failing_script())],
        SWEEP_GREEN: [(passing, fixed_script())],
    }
    for sweep_id, evals in plan.items():
        outcomes = [_run_eval(document, script, sweep_id) for document, script in evals]
        for outcome in outcomes:
            seeded.eval_runs[(sweep_id, outcome.name)] = outcome
        emit_summary_run(_summary(sweep_id, outcomes))
        seeded.sweep_runs[sweep_id] = sweep_trace_id(sweep_id).removeprefix("trace_")
    assert processor.force_flush(10)
    processor.shutdown(timeout=1)
    for run_id in seeded.run_ids:
        running.run(run_id)  # stored
    # Duplicates must stay duplicates in the table until the queries ran: no merges.
    for table in ("otel_traces", "runs", "otel_traces_trace_id_ts"):
        store.command(f"SYSTEM STOP MERGES {{db}}.{table}")
    for run_id in seeded.run_ids:
        redeliver(running, run_id)
    seeded.other_key = running.collector.keys.create(OTHER_PROJECT)
    redeliver(running, seeded.source_run_id, seeded.other_key)
    assert running.collector.flush()
    return seeded
