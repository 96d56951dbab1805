"""``afr demo``: walks the sacred path as far as it is built, and says what happened.

Built so far: the seeded failing run (real ``Runner``, scripted model) -> the bridge ->
OTLP/gRPC -> the collector (auth, redact, normalize, write-ahead log) -> embedded
ClickHouse -> the read API -> a signed replay hook -> the replay worker (tools stubbed,
cost bounded) -> verdict -> the replay run, linked to its source, back in the store -> a
fork at the failing tool call with a corrected output (the prefix from the capture) -> a
signed eval hook synthesizes the regression eval -> ``afr eval run`` against the fixing
model (green) and the original behaviour (red) -> a sweep over the evals directory. The
run is printed as the span tree the API returns, with the red tool span marked; the
Grafana timeline will show the same once the dashboards land.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from agents import gen_trace_id

import afr_exporter
from afr.incident import RefundDesk, build_model, failing_script, fixed_script, run_incident
from afr.local import LOCAL_KEY_FILE, ensure_local_key, ensure_webhook_secret, read_local_key
from afr.scripted_model import ScriptedModelServer
from collector.server import CollectorThread
from collector.settings import CollectorSettings
from replay_worker.app import WorkerThread
from replay_worker.eval_run import RunOptions, run_command
from replay_worker.settings import WorkerSettings
from replay_worker.sweeps import run_foreground
from replay_worker.trigger import request_replay, signed_headers, wait_for_job

__all__ = ["DEMO_DATA_DIR", "run_demo"]

DEMO_DATA_DIR = Path(".afr/demo")


def _print_tree(spans: list[dict[str, Any]]) -> None:
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_span_id"], []).append(span)

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["start_time_unix_nano"]):
            ms = span["duration_ns"] / 1e6
            red = span["status"]["code"] == "Error"
            mark = f"  <-- ERROR {span['error_type']}" if red else ""
            print(f"     {'  ' * depth}{span['name']} [{span['span_type']}, {ms:.1f} ms]{mark}")
            walk(span["span_id"], depth + 1)

    walk("", 0)


def run_demo(data_dir: Path = DEMO_DATA_DIR) -> int:
    settings = CollectorSettings(data_dir=data_dir, grpc_port=0, http_port=0, batch_interval_s=0.2)
    with CollectorThread(settings) as collector:
        ensure_local_key(collector.keys, data_dir)
        key = read_local_key(data_dir)
        assert key is not None
        headers = {"authorization": f"Bearer {key}"}
        print(f"0. collector up on the embedded store ({data_dir}/chdb)")
        print(f"   OTLP/gRPC :{collector.grpc_port}  OTLP/HTTP + read API :{collector.http_port}")

        processor = afr_exporter.install(
            endpoint=f"http://127.0.0.1:{collector.grpc_port}", headers=headers
        )
        desk = RefundDesk()
        trace_id = gen_trace_id()
        run_id = trace_id.removeprefix("trace_")
        print("1. seeded failing run: triage -> refund agent -> refund_order(amount='12.OO')")
        with ScriptedModelServer(failing_script()) as model:
            result = asyncio.run(
                run_incident(build_model("responses", model.base_url), desk, trace_id=trace_id)
            )
        print(f"   final answer: {result.final_output}")
        print(f"   refunds actually made: {len(desk.refunds)}")
        processor.force_flush(15)
        processor.shutdown(timeout=2)
        stats = processor.stats
        print(
            f"2. bridge -> collector over OTLP/gRPC: {stats.exported} spans, dropped {stats.dropped}"
        )
        collector.flush()
        api = f"http://127.0.0.1:{collector.http_port}/api/v1/runs/{run_id}"
        response = httpx.get(api, headers=headers, timeout=30)
        if response.status_code != 200:
            print(f"   the run did not come back from the store: HTTP {response.status_code}")
            return 1
        body = response.json()
        summary = body["run"]
        print(f"3. stored in ClickHouse; the read API returns run {run_id}:")
        print(
            f"   status {summary['status']}, {summary['span_count']} spans, "
            f"{summary['error_count']} error, workflow {summary['workflow']!r}, "
            f"tokens in/out {summary['input_tokens']}/{summary['output_tokens']}"
        )
        _print_tree(body["spans"])
        failing = next(
            (s for s in body["spans"] if s["span_id"] == summary["failing_span_id"]), None
        )
        if failing is None:
            print("   no failing span found: the seeded run did not fail as expected")
            return 1
        print("4. the red span:")
        print(f"   tool {failing['tool_name']} call {failing['tool_call_id']}")
        print(f"   arguments {json.loads(failing['input'])}")
        print(f"   error.type {failing['error_type']!r}")
        if _replay(collector, key, data_dir, run_id, desk) != 0:
            return 1
    print("where to look:")
    print(
        f"   .venv/bin/afr up --data-dir {data_dir}   (then, with the key in {data_dir / LOCAL_KEY_FILE}:)"
    )
    print(f"   curl -H 'authorization: Bearer <key>' http://127.0.0.1:4318/api/v1/runs/{run_id}")
    print(f"   .venv/bin/afr runs show {run_id} --data-dir {data_dir}   (runs list, runs tail)")
    print(
        f"   .venv/bin/afr replay {run_id} --data-dir {data_dir} --stub 'refund_order={REFUND_STUB}'"
    )
    print("   (with that afr up running and OPENAI_API_KEY set: a live model replays it)")
    print(
        f"   .venv/bin/afr replay {run_id} --data-dir {data_dir} --from {FAILING_CALL}"
        f" --output '{FAILING_CALL}={REFUND_STUB}'   (a fork: the calls before it from the capture)"
    )
    print(
        f"   .venv/bin/afr eval run {data_dir / 'evals'} --junit report.xml   (in CI: --shard I/N)"
    )
    print(f"   .venv/bin/afr sweep run --evals {data_dir / 'evals'} --data-dir {data_dir}")
    print(
        f"   .venv/bin/afr up --data-dir {data_dir} --sql --grafana-url http://127.0.0.1:3000"
        "   (Grafana on the embedded store)"
    )
    print(
        f"   .venv/bin/afr grafana push --data-dir {data_dir}   (datasource + 5 dashboards; "
        "token in AFR_GRAFANA_TOKEN)"
    )
    print(
        "deploy: docker compose -f deploy/compose/compose.yaml up -d --build (one machine);"
        " deploy/kubernetes/ and `afr schema --cluster NAME` for more (README: Deploy)"
    )
    return 0


REFUND_STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})


def _replay(collector: Any, key: str, data_dir: Path, run_id: str, desk: RefundDesk) -> int:
    """Signed hook -> replay against a model that gets the amount right -> verdict."""
    secret = ensure_webhook_secret(data_dir)
    # per_conversation: every conversation (the replay, each eval run, the sweep) walks the
    # fixing model's script from its start.
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        settings = WorkerSettings(
            port=0,
            collector_url=f"http://127.0.0.1:{collector.http_port}",
            collector_otlp_endpoint=f"http://127.0.0.1:{collector.grpc_port}",
            collector_key=key,
            webhook_secret=secret,
            model_base_url=model.base_url,
            model_api_key="scripted-no-key",
            data_dir=data_dir / "worker",
            evals_dir=data_dir / "evals",
            sweep_enabled=False,  # the demo triggers its sweep itself
        )
        with WorkerThread(settings) as worker:
            print("5. signed POST /hooks/replay: replay against a model that sends amount=12.0,")
            print(
                "   every captured tool output stubbed in (refund_order has none: a labelled stub)"
            )
            accepted = request_replay(
                worker.url, secret, run_id, stubs={"refund_order": REFUND_STUB}
            )
            job = wait_for_job(worker.url, accepted["job_id"], 120)
            if job["state"] != "succeeded":
                print(f"   replay job failed: {job['error']}")
                return 1
            if _show_replay(collector, key, job, desk) != 0:
                return 1
            if _fork(worker.url, secret, run_id) != 0:
                return 1
            return _evals(worker.url, secret, settings, model.base_url, job["result"])


def _show_replay(collector: Any, key: str, job: dict[str, Any], desk: RefundDesk) -> int:
    result = job["result"]
    print(f"   verdict {result['verdict']} (cost reserved and settled: ${job['cost_usd']:.6f})")
    print(f"   first divergence: {result['first_divergence']}")
    print(f"   refunds actually made, still: {len(desk.refunds)}")
    collector.flush()
    replay = httpx.get(
        f"http://127.0.0.1:{collector.http_port}/api/v1/runs/{result['replay_run_id']}",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ).json()["run"]
    print(
        f"6. replay run {result['replay_run_id']} stored: kind {replay['kind']}, status {replay['status']}, "
        f"linked to source {replay['source_run_id']}"
    )
    _terminal_views(collector, key, replay["source_run_id"])
    return 0


FAILING_CALL = "call_refund_1"


def _fork(worker_url: str, secret: str, run_id: str) -> int:
    """What if the failing tool call had answered? A fork at it with a corrected output."""
    print(f"   what if refund_order had answered? afr replay --from {FAILING_CALL} --output ...:")
    fork = {
        "step": FAILING_CALL,
        "overrides": [{"kind": "tool_output", "call_id": FAILING_CALL, "output": REFUND_STUB}],
    }
    accepted = request_replay(worker_url, secret, run_id, fork=fork)
    job = wait_for_job(worker_url, accepted["job_id"], 120)
    if job["state"] != "succeeded":
        print(f"   fork job failed: {job['error']}")
        return 1
    result, forked = job["result"], job["result"]["fork"]
    print(
        f"   fork verdict {result['verdict']}: {forked['recorded_model_calls']} model calls"
        f" answered from the capture ($0), {forked['live_model_calls']} live"
        f" (${job['cost_usd']:.6f}); replay run {result['replay_run_id']}"
    )
    return 0


def _terminal_views(collector: Any, key: str, run_id: str) -> None:
    """The same runs as ``afr runs list`` and ``afr runs show`` print them, indented."""
    from dataclasses import replace

    from afr.runs.cli import list_lines, show_lines
    from afr.runs.client import RunsApiError, RunsClient
    from afr.runs.terminal import terminal_for

    term = terminal_for(sys.stdout, os.environ)
    term = replace(term, width=term.width - 3)
    try:
        with RunsClient(f"http://127.0.0.1:{collector.http_port}", key) as client:
            listed = list_lines(client, {"limit": "10"}, term)
            shown = show_lines(client, run_id, term)
    except RunsApiError as exc:
        print(f"   afr runs: {exc}")
        return
    print("   in a terminal, afr runs list:")
    for line in listed:
        print(f"   {line}")
    print(f"   afr runs show {run_id}:")
    for line in shown:
        print(f"   {line}" if line else "")


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``afr eval run`` reads its settings from the environment, as it would in CI."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _evals(
    worker_url: str, secret: str, settings: WorkerSettings, model_url: str, result: dict[str, Any]
) -> int:
    """Signed eval hook -> the eval file -> ``afr eval run`` green and red -> a sweep."""
    body = json.dumps({"replay_run_id": result["replay_run_id"]}).encode()
    answer = httpx.post(
        f"{worker_url}/hooks/evals", content=body, headers=signed_headers(secret, body), timeout=60
    )
    if answer.status_code != 201:
        print(f"7. eval synthesis refused: HTTP {answer.status_code} {answer.text}")
        return 1
    created = answer.json()
    print(f"7. signed POST /hooks/evals: the fixed replay became eval {created['eval_id']}")
    print(f"   file {created['path']} (afr.eval/v1, the replay fixture embedded), asserting:")
    for assertion in created["eval"]["assertions"]:
        detail = {k: v for k, v in assertion.items() if k != "kind"}
        print(f"     {assertion['kind']} {json.dumps(detail, sort_keys=True)}")
    environment = {
        "AFR_WORKER_MODEL_API_KEY": "scripted-no-key",
        "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT": settings.collector_otlp_endpoint,
        "AFR_WORKER_COLLECTOR_KEY": settings.collector_key.get_secret_value()
        if settings.collector_key
        else "",
        "AFR_WORKER_DATA_DIR": str(settings.data_dir),
    }
    print("8. afr eval run against the fixing model (expect green):")
    with _environment({**environment, "AFR_WORKER_MODEL_BASE_URL": model_url}):
        green = run_command(RunOptions(paths=[settings.evals_dir]))
    print("   afr eval run against the original behaviour, amount '12.OO' (expect red):")
    with (
        ScriptedModelServer(failing_script(), per_conversation=True) as original,
        _environment({**environment, "AFR_WORKER_MODEL_BASE_URL": original.base_url}),
    ):
        red = run_command(RunOptions(paths=[settings.evals_dir]))
    print(f"   exit codes: fixing model {green}, original behaviour {red}")
    if green != 0 or red == 0:
        print("   the eval did not separate the fix from the failure")
        return 1
    print("9. a sweep over the evals directory (what the worker runs nightly, AFR_SWEEP_CRON):")
    sweep_settings = settings.model_copy(update={"model_base_url": model_url})
    summary, _ = run_foreground(sweep_settings, slot_label=f"demo-{result['replay_run_id'][:12]}")
    if summary is None:
        print("   the demo's sweep slot already ran in this data directory")
        return 0
    print(
        f"   sweep {summary.sweep_id}: {summary.passed} passed, {summary.failed} failed, "
        f"{summary.inconclusive} inconclusive, {summary.errored} errored "
        f"in {summary.duration_s:.1f} s; summary run {summary.sweep_run_id} (kind sweep)"
    )
    return 0 if summary.ok else 1
