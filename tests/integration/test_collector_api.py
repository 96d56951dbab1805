"""The read API over real stored runs: filters, paging, OTLP export, bad parameters."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import gen_trace_id

import afr_exporter
from afr.incident import build_model, failing_script, run_incident
from afr.scripted_model import ScriptedModelServer
from collector.auth import KeyStore
from collector.decode import decode_json, to_records
from collector.server import CollectorThread
from collector.settings import CollectorSettings
from tests.fakes import afr_up, free_port, stop_process, wait_for_line
from tests.integration.conftest import Running
from tests.waiting import wait_until

BASE_NS = 1_764_000_000_000_000_000


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _run_json(
    trace_id: str, *, start_s: int, workflow: str, agent: str, failed: bool, kind: str = "capture"
) -> dict[str, Any]:
    start = BASE_NS + start_s * 1_000_000_000
    root = {
        "traceId": trace_id,
        "spanId": trace_id[:15] + "1",
        "name": f"invoke_workflow {workflow}",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 3_000_000_000),
        "attributes": [
            _attr("afr.span.type", "workflow"),
            _attr("gen_ai.workflow.name", workflow),
            _attr("afr.run.kind", kind),
        ],
    }
    agent_span = {
        "traceId": trace_id,
        "spanId": trace_id[:15] + "2",
        "parentSpanId": trace_id[:15] + "1",
        "name": f"invoke_agent {agent}",
        "startTimeUnixNano": str(start + 1),
        "endTimeUnixNano": str(start + 2_000_000_000),
        "attributes": [
            _attr("afr.span.type", "agent"),
            _attr("gen_ai.agent.name", agent),
            _attr("note", 'Grüße aus Köln 😀 "quoted" \\ back\nslash'),
        ],
        "status": {"code": 2, "message": "boom"} if failed else {},
    }
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "api-test")]},
                "scopeSpans": [{"scope": {"name": "afr.exporter"}, "spans": [root, agent_span]}],
            }
        ]
    }


@pytest.fixture
def three_runs(running: Running) -> list[str]:
    runs = [
        ("a" * 32, 10, "refund-desk", "Triage Agent", True, "capture"),
        ("b" * 32, 20, "refund-desk", "Refund Agent", False, "capture"),
        ("c" * 32, 30, "billing", "Billing Agent", False, "replay"),
    ]
    for trace_id, start_s, workflow, agent, failed, kind in runs:
        body = _run_json(
            trace_id, start_s=start_s, workflow=workflow, agent=agent, failed=failed, kind=kind
        )
        answer = httpx.post(running.http_url + "/v1/traces", json=body, headers=running.headers())
        assert answer.status_code == 200
    running.collector.flush()
    return [r[0] for r in runs]


def _list(running: Running, **params: Any) -> httpx.Response:
    return running.api("/api/v1/runs", **{"since": 1_700_000_000, **params})


def test_filters(running: Running, three_runs: list[str]) -> None:
    a, b, c = three_runs
    assert [r["run_id"] for r in _list(running).json()["runs"]] == [c, b, a]
    assert [r["run_id"] for r in _list(running, status="error").json()["runs"]] == [a]
    assert [r["run_id"] for r in _list(running, status="ok").json()["runs"]] == [c, b]
    assert [r["run_id"] for r in _list(running, workflow="refund-desk").json()["runs"]] == [b, a]
    assert [r["run_id"] for r in _list(running, agent="Billing Agent").json()["runs"]] == [c]
    assert [r["run_id"] for r in _list(running, kind="replay").json()["runs"]] == [c]
    window = running.api(
        "/api/v1/runs", since=(BASE_NS // 10**9) + 15, until=(BASE_NS // 10**9) + 25
    )
    assert [r["run_id"] for r in window.json()["runs"]] == [b]
    first = _list(running).json()["runs"][2]
    assert first["workflow"] == "refund-desk"
    assert first["root_agent"] == "Triage Agent"
    assert first["duration_ns"] == 3_000_000_000


def test_cursor_paging_visits_every_run_once(running: Running, three_runs: list[str]) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 1}
        if cursor:
            params["cursor"] = cursor
        page = _list(running, **params).json()
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(three_runs))


def test_bad_parameters_are_400(running: Running, three_runs: list[str]) -> None:
    for params in (
        {"limit": 0},
        {"limit": 100_000},
        {"status": "weird"},
        {"kind": "x"},
        {"cursor": "%%%"},
        {"since": "yesterday"},
    ):
        answer = _list(running, **params)
        assert answer.status_code == 400, params
        assert answer.json()["error"]
    assert running.api("/api/v1/runs/not-a-run").status_code == 400
    assert running.api("/api/v1/runs/" + "d" * 32).status_code == 404


def test_run_detail_round_trips_text_and_otlp(running: Running, three_runs: list[str]) -> None:
    a = three_runs[0]
    detail = running.run(a)
    agent = next(s for s in detail["spans"] if s["span_type"] == "agent")
    assert agent["attributes"]["note"] == 'Grüße aus Köln 😀 "quoted" \\ back\nslash'
    otlp = running.api(f"/api/v1/runs/{a}/otlp").json()
    decoded = to_records(decode_json(json.dumps(otlp).encode()), "p", 1)
    assert decoded.rejected == 0
    assert {r.span_id for r in decoded.records} == {s["span_id"] for s in detail["spans"]}
    by_id = {r.span_id: r for r in decoded.records}
    assert by_id[agent["span_id"]].status_code == "Error"
    assert by_id[agent["span_id"]].span_attributes["note"] == agent["attributes"]["note"]


def test_openapi_is_served(running: Running) -> None:
    spec = httpx.get(running.http_url + "/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert set(spec["paths"]) == {
        "/api/v1/runs",
        "/api/v1/runs/diff",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/otlp",
        "/api/v1/failures",
        "/api/v1/failures/{signature}",
    }


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_restart_between_acknowledgement_and_insert_loses_nothing(tmp_path: Path) -> None:
    """A collector killed (SIGKILL) after acknowledging spans it had not inserted yet comes
    back with every one of them."""
    data_dir = tmp_path / "data"
    key = KeyStore(data_dir / "keys.sqlite").create("shop")
    grpc_port, http_port = free_port(), free_port()
    env = {
        **os.environ,
        "AFR_DATA_DIR": str(data_dir),
        "AFR_BATCH_INTERVAL_S": "3600",  # the writer would wait an hour before inserting
        "AFR_BATCH_MAX_ROWS": "1000000",
    }
    process = afr_up(grpc_port, http_port, env, "--no-worker")
    try:
        wait_for_line(process, "  read API", 60)
        trace_id = gen_trace_id()
        with ScriptedModelServer(failing_script()) as model:
            processor = afr_exporter.install(
                endpoint=f"http://127.0.0.1:{grpc_port}", headers={"authorization": f"Bearer {key}"}
            )
            import asyncio

            asyncio.run(run_incident(build_model("responses", model.base_url), trace_id=trace_id))
            assert processor.force_flush(10)
        assert processor.stats.exported == 13, "all 13 spans acknowledged"
        workers = _children(process.pid)
        assert workers, "afr up runs its ingest worker processes"
    finally:
        stop_process(process, signal.SIGKILL)
    # Nothing of the killed collector lives on: its ingest workers follow it out.
    wait_until(
        lambda: not [pid for pid in workers if Path(f"/proc/{pid}").exists()],
        timeout_s=10,
        what="the killed collector's ingest workers to exit (orphaned workers)",
        interval_s=0.1,
    )

    settings = CollectorSettings(data_dir=data_dir, grpc_port=0, http_port=0)
    with CollectorThread(settings) as collector:
        assert collector.recovered_rows == 13
        collector.flush()
        running = Running(collector, key, settings, store=None)  # type: ignore[arg-type]
        body = running.run(trace_id.removeprefix("trace_"))
    assert body["run"]["span_count"] == 13
    assert body["run"]["failing_span_name"] == "execute_tool refund_order"
