"""The data afr's dashboards are tested against, made by the real pipeline: the seeded
failing refund run and its FAILURE_FIXED replay, two synthesized evals run in two sweeps
(one eval passes against the fixing model, one fails against the original behaviour), the
sweeps' summary runs; then every run delivered a second time over OTLP/HTTP (duplicate
deliveries, as retrying clients make them) and the source run once more under another
project (tenancy).

Weeks before them (``FailureWorld``), failure clusters in each status: the source run resent
under new ids and times with its second agent renamed (another agent path, so another
signature), with replays and eval runs linked to them as the worker marks its own -- an
open, a fixed, a guarded and a recurring cluster -- each delivered twice too."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from agents import Model

import afr_exporter
from afr.incident import build_model, failing_script, fixed_script
from afr.scripted_model import ScriptedModelServer, ScriptedTurn
from afr_exporter import semconv as sc
from replay_worker.evals.contract import EvalDocument
from replay_worker.evals.runner import EvalOutcome, run_eval
from replay_worker.evals.synthesis import synthesize
from replay_worker.sweeps import SweepSummary, emit_summary_run, sweep_trace_id
from tests.e2e.captured import capture_fixed_incident
from tests.integration.conftest import Running

SWEEP_MIXED = "sweep_dashboards_mixed"
SECOND_AGENT = "Refund Agent"
"""The agent of the seeded run's failure: renamed, it makes another failure signature."""
SWEEP_GREEN = "sweep_dashboards_green"
OTHER_PROJECT = "elsewhere"


_NS = 1_000_000_000
_DAY = timedelta(days=1)
_IDS = itertools.count(1)


@dataclass
class FailureWorld:
    """Four clusters over two weeks, weeks before the rest of the seeded data."""

    since: datetime
    until: datetime
    agents: dict[str, str]
    """status the cluster is built to have -> the agent its runs fail in."""
    runs: dict[str, list[str]] = field(default_factory=dict)
    """status -> its production runs, oldest first."""
    starts: dict[str, datetime] = field(default_factory=dict)
    """run id -> when it started."""
    fixes: dict[str, str] = field(default_factory=dict)
    """status -> the replay that reached FAILURE_FIXED."""
    evals: dict[str, str] = field(default_factory=dict)
    """status -> the name of the eval that guards it."""
    signatures: dict[str, str] = field(default_factory=dict)
    """status -> the signature of its runs, as the store computed it."""
    other_workflow: str = "refund-desk-eu"
    """The workflow of the open cluster's second run (the others: the seeded one's)."""

    def at(self, days: float) -> datetime:
        return self.since + days * _DAY


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
    failures: FailureWorld | None = None
    source_logs: int = 0
    """Log records sent for the source run (each twice, and once to the other project)."""

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
    for table in ("otel_traces", "runs", "otel_traces_trace_id_ts", "otel_logs"):
        store.command(f"SYSTEM STOP MERGES {{db}}.{table}")
    for run_id in seeded.run_ids:
        redeliver(running, run_id)
    seeded.other_key = running.collector.keys.create(OTHER_PROJECT)
    redeliver(running, seeded.source_run_id, seeded.other_key)
    # The source run's log records, delivered twice, and once to the other project.
    logs = run_logs(running.run(seeded.source_run_id))
    for key in (None, None, seeded.other_key):
        answer = httpx.post(
            running.http_url + "/v1/logs", json=logs, headers=running.headers(key), timeout=30
        )
        assert answer.status_code == 200, answer.text
        assert running.collector.flush()  # one insert each: the copies stay two rows
    seeded.source_logs = len(logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"])
    source_otlp = running.api(f"/api/v1/runs/{seeded.source_run_id}/otlp").json()
    assert running.collector.flush()
    seeded.failures = seed_failures(running, source_otlp, datetime.now(UTC))
    return seeded


def run_logs(run: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON log records of a run, as an instrumentation that logs GenAI events sends
    them: one per model call (its span's id) and one with no span."""
    records: list[dict[str, Any]] = []
    for span in run["spans"]:
        if span["span_type"] != "llm":
            continue
        records.append(
            {
                "timeUnixNano": str(span["end_time_unix_nano"]),
                "traceId": span["trace_id"],
                "spanId": span["span_id"],
                "severityText": "INFO",
                "severityNumber": 9,
                "eventName": "gen_ai.client.inference.operation.details",
                "body": {"stringValue": f"model call of {span['agent_name'] or 'an agent'}"},
                "attributes": [
                    {"key": "gen_ai.request.model", "value": {"stringValue": span["model"]}}
                ],
            }
        )
    start = run["run"]["start_ns"]
    records.append(
        {
            "timeUnixNano": str(start + 1),
            "traceId": run["run"]["run_id"],
            "severityText": "WARN",
            "severityNumber": 13,
            "body": {"stringValue": "refund requested for order A-1001"},
        }
    )
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "refund-desk"}}]}
    return {
        "resourceLogs": [
            {"resource": resource, "scopeLogs": [{"scope": {"name": "app"}, "logRecords": records}]}
        ]
    }


def _send(running: Running, body: dict[str, Any]) -> None:
    response = httpx.post(
        running.http_url + "/v1/traces", json=body, headers=running.headers(), timeout=30
    )
    assert response.status_code == 200, response.text


def _ns(when: datetime) -> int:
    return int(when.timestamp()) * _NS


def _resent(
    template: dict[str, Any], start: datetime, agent: str, workflow: str | None
) -> tuple[str, dict[str, Any]]:
    """The run again under a new trace id and span ids, moved to ``start``, its second agent
    named ``agent`` (and its workflow ``workflow``): its id and its OTLP/JSON."""
    body = copy.deepcopy(template)
    trace_id = f"{next(_IDS):08x}{random.getrandbits(96):024x}"
    spans = [s for rs in body["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    shift = _ns(start) - min(int(s["startTimeUnixNano"]) for s in spans)
    span_ids: dict[str, str] = {"": ""}
    for span in spans:
        old = span["traceId"]
        span["traceId"] = trace_id
        for key in ("spanId", "parentSpanId"):
            span[key] = span_ids.setdefault(span[key], f"{random.getrandbits(64):016x}")
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            span[key] = str(int(span[key]) + shift)
        for event in span.get("events", []):
            event["timeUnixNano"] = str(int(event["timeUnixNano"]) + shift)
        span["name"] = span["name"].replace(SECOND_AGENT, agent)
        for attribute in span.get("attributes", []):
            value = attribute["value"]
            if "stringValue" in value:
                text = value["stringValue"].replace(old, trace_id).replace(SECOND_AGENT, agent)
                if workflow and attribute["key"] == "gen_ai.workflow.name":
                    text = workflow
                value["stringValue"] = text
    return trace_id, body


def _linked(kind: str, source: str, start: datetime, metadata: dict[str, str]) -> tuple[str, Any]:
    """A replay or eval run of ``source`` as the worker marks one: its kind and source on the
    root, its verdict (or its eval's name and status) in the root's trace metadata."""
    trace_id = f"{next(_IDS):08x}{random.getrandbits(96):024x}"
    attributes = {
        sc.AFR_SPAN_TYPE: "workflow",
        sc.AFR_RUN_KIND: kind,
        sc.AFR_SOURCE_RUN_ID: source,
        sc.AFR_TRACE_METADATA: json.dumps(metadata),
    }
    span = {
        "traceId": trace_id,
        "spanId": f"{random.getrandbits(64):016x}",
        "parentSpanId": "",
        "name": f"{kind} of {source}",
        "kind": 1,
        "startTimeUnixNano": str(_ns(start)),
        "endTimeUnixNano": str(_ns(start) + _NS),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        "status": {"code": 1},
    }
    scope = {"scope": {"name": "afr"}, "spans": [span]}
    return trace_id, {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [scope]}]}


def seed_failures(running: Running, template: dict[str, Any], now: datetime) -> FailureWorld:
    """The four clusters, from the seeded failing run's OTLP/JSON (days from ``since``):

    - open: runs on days 1 and 2 (the second in another workflow); a replay STILL_FAILING;
    - fixed: runs on days 2 and 3; a replay of the first reaches FAILURE_FIXED;
    - guarded: runs on days 9 (new in the last week) and 11, fixed; its eval passed, then
      failed on day 10.5: the run after it is caught, not recurring;
    - recurring: a run on day 1, fixed, its eval passed on day 2; runs again on days 10
      and 12.
    """
    since = (now - timedelta(days=60)).replace(hour=0, minute=0, second=0, microsecond=0)
    world = FailureWorld(
        since,
        since + timedelta(days=14),
        {status: f"{SECOND_AGENT} {region}" for status, region in FAILURE_REGIONS.items()},
    )
    sent: list[dict[str, Any]] = []
    plan: dict[str, list[float]] = {
        "open": [1, 2],
        "fixed": [2, 3],
        "guarded": [9, 11],
        "recurring": [1, 10, 12],
    }
    for status, days in plan.items():
        for n, day in enumerate(days):
            start = world.at(day + 0.25)
            workflow = world.other_workflow if (status, n) == ("open", 1) else None
            run_id, body = _resent(template, start, world.agents[status], workflow)
            sent.append(body)
            world.runs.setdefault(status, []).append(run_id)
            world.starts[run_id] = start

    def linked(kind: str, status: str, day: float, metadata: dict[str, str]) -> str:
        run_id, body = _linked(kind, world.runs[status][0], world.at(day), metadata)
        sent.append(body)
        return run_id

    linked("replay", "open", 2.5, {sc.METADATA_VERDICT: "STILL_FAILING"})
    fixed = {sc.METADATA_VERDICT: "FAILURE_FIXED"}
    world.fixes = {
        "fixed": linked("replay", "fixed", 3.5, fixed),
        "guarded": linked("replay", "guarded", 9.5, fixed),
        "recurring": linked("replay", "recurring", 1.5, fixed),
    }
    world.evals = {"guarded": "guards-uk", "recurring": "guards-jp"}
    for status, day, outcome in (
        ("guarded", 9.6, "passed"),
        ("guarded", 10.5, "failed"),
        ("recurring", 2.0, "passed"),
    ):
        name = world.evals[status]
        linked("eval", status, day, {sc.METADATA_EVAL_NAME: name, sc.METADATA_EVAL_STATUS: outcome})
    for _ in range(2):  # each delivered twice, in batches of its own
        for body in sent:
            _send(running, body)
        assert running.collector.flush()
    firsts = {runs[0]: status for status, runs in world.runs.items()}
    rows = running.store.query(
        "SELECT run_id, signature FROM {db}.run_summary WHERE project = 'shop' "
        "AND run_id IN {ids:Array(String)}",
        {"ids": list(firsts)},
    )
    world.signatures = {firsts[run_id]: signature for run_id, signature in rows}
    assert len(set(world.signatures.values())) == 4, world.signatures
    return world


FAILURE_REGIONS = {"open": "EU", "fixed": "US", "guarded": "UK", "recurring": "JP"}
