"""Sweeps end to end, with real parts: a collector on the embedded store, evals synthesized
from the seeded run's FAILURE_FIXED replay, the worker (its sweep process forked like the
replay processes) against the scripted model, and ``afr sweep run``.

A sweep writes each eval run once and a summary run of kind ``sweep`` linked to them; the
same slot asked for again runs nothing; a worker killed in the middle of a sweep finishes
it after a restart, and the store still holds each eval run once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.cli import main
from afr.incident import fixed_script
from afr.scripted_model import ScriptedModelServer
from afr_exporter import semconv as sc
from replay_worker.app import WorkerThread
from replay_worker.evals.contract import EvalDocument, write_eval
from replay_worker.evals.runner import eval_trace_id
from replay_worker.evals.synthesis import synthesize
from replay_worker.hooks.signature import generate_secret
from replay_worker.schedule import manual_slot
from replay_worker.settings import WorkerSettings
from replay_worker.state import StateStore
from replay_worker.sweeps import sweep_trace_id
from replay_worker.trigger import signed_headers
from tests.e2e.captured import capture_fixed_incident
from tests.e2e.test_worker_scale import _alive, _descendants
from tests.fakes import free_port, stop_process, wait_for_line
from tests.integration.conftest import Running, start_collector
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})
EVALS = 3


@dataclass
class World:
    running: Running
    evals: Path
    documents: list[EvalDocument]
    secret: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The seeded failing run and its FAILURE_FIXED replay in a real collector, and three
    evals synthesized from them (same capture, three names: three ids)."""
    root = tmp_path_factory.mktemp("sweep")
    thread, running = start_collector(root / "data")
    try:
        source, replayed = capture_fixed_incident(running)
        synthesized = synthesize(source, running.run(replayed.replay_run_id))
        documents = [
            EvalDocument.create(
                name=f"{synthesized.name} #{n}",
                provenance=synthesized.provenance,
                fixture=synthesized.fixture,
                replay=synthesized.replay,
                assertions=list(synthesized.assertions),
            )
            for n in range(EVALS)
        ]
        for document in documents:
            write_eval(document, root / "evals")
        yield World(running, root / "evals", documents, generate_secret())
    finally:
        thread.stop()


def settings_values(world: World, model_url: str, data_dir: Path) -> dict[str, Any]:
    return {
        "port": 0,
        "collector_url": world.running.http_url,
        "collector_otlp_endpoint": world.running.grpc_endpoint,
        "collector_key": world.running.key,
        "webhook_secret": world.secret,
        "model_base_url": model_url,
        "model_api_key": "scripted",
        "data_dir": data_dir,
        "evals_dir": world.evals,
        "sweep_enabled": False,  # tonight's slot would run too, depending on the hour
    }


def post_sweep(url: str, secret: str, payload: dict[str, Any], webhook_id: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    return httpx.post(
        url + "/hooks/sweeps",
        content=body,
        headers=signed_headers(secret, body, webhook_id),
        timeout=10,
    )


def wait_sweep(url: str, sweep_id: str, timeout_s: float = 120) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        sweep: dict[str, Any] = httpx.get(f"{url}/sweeps/{sweep_id}", timeout=10).json()
        return sweep if sweep["state"] in ("finished", "failed") else None

    return wait_until(ended, timeout_s=timeout_s, what=f"sweep {sweep_id} to end", interval_s=0.2)


def span_shape(running: Running, run_id: str) -> Counter[str]:
    """The run's spans by name, as stored (the read API deduplicates replaced rows)."""
    spans = running.run(run_id)["spans"]
    assert len({s["span_id"] for s in spans}) == len(spans)
    return Counter(s["name"] for s in spans)


def assert_stored_once(world: World, sweep_id: str, summary: dict[str, Any]) -> None:
    """The summary run links each eval run of the sweep; each is stored as one run."""
    expected = {d.id: eval_trace_id(sweep_id, d.id).removeprefix("trace_") for d in world.documents}
    assert {r["eval_id"]: r["eval_run_id"] for r in summary["results"]} == expected
    sweep_run = world.running.run(summary["sweep_run_id"])
    assert summary["sweep_run_id"] == sweep_trace_id(sweep_id).removeprefix("trace_")
    assert sweep_run["run"]["kind"] == "sweep"
    assert sweep_run["run"]["status"] == "ok"
    (root,) = [s for s in sweep_run["spans"] if s["parent_span_id"] == ""]
    links = {link["trace_id"]: link["attributes"]["afr.link.role"] for link in root["links"]}
    assert links == {run_id: eval_id for eval_id, run_id in expected.items()}
    metadata = json.loads(root["attributes"]["afr.trace.metadata"])
    assert metadata["afr.sweep.counts"] == {
        "passed": EVALS,
        "failed": 0,
        "inconclusive": 0,
        "errored": 0,
        "evals": EVALS,
    }
    assert metadata["afr.sweep.id"] == sweep_id
    assert metadata["afr.sweep.cost_usd"] > 0
    assert world.running.evaluations(summary["sweep_run_id"]) == [
        {
            sc.GEN_AI_EVALUATION_NAME: sc.EVALUATION_SWEEP,
            sc.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
            sc.GEN_AI_EVALUATION_SCORE_VALUE: "1.0",
            sc.GEN_AI_EVALUATION_EXPLANATION: (
                f"{EVALS} evals: {EVALS} passed, 0 failed, 0 inconclusive, 0 errored"
            ),
        }
    ]
    shapes = [span_shape(world.running, run_id) for run_id in expected.values()]
    assert shapes[0]["eval.result"] == 1 and shapes[0]["replay.verdict"] == 1
    assert shapes[1:] == shapes[:-1], "every eval run has the spans of one run, none twice"
    for run_id in expected.values():
        run = world.running.run(run_id)["run"]
        assert (run["kind"], run["status"]) == ("eval", "ok")


def test_a_hooked_sweep_stores_each_eval_run_once_and_a_linked_summary_run(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        settings = WorkerSettings(**settings_values(world, model.base_url, tmp_path / "worker"))
        with WorkerThread(settings) as worker:
            answer = post_sweep(worker.url, world.secret, {"slot": "e2e nightly"}, "msg_1")
            assert answer.status_code == 202, answer.text
            sweep_id = answer.json()["sweep_id"]
            assert sweep_id == manual_slot("e2e nightly").sweep_id
            sweep = wait_sweep(worker.url, sweep_id)
            requests = len(model.requests)
            # The same slot again, by another delivery: the same sweep, nothing runs.
            again = post_sweep(worker.url, world.secret, {"slot": "e2e nightly"}, "msg_2")
            assert again.json()["sweep_id"] == sweep_id and again.json()["state"] == "finished"
            health = httpx.get(worker.url + "/healthz", timeout=10).json()
        # And from the command line: the slot is swept already.
        monkeypatch.setenv("AFR_WORKER_DATA_DIR", str(tmp_path / "worker"))
        code = main(["sweep", "run", "--evals", str(world.evals), "--slot", "e2e nightly"])
        assert len(model.requests) == requests == 3 * EVALS, "three model turns per eval, once"
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "swept already" in err and json.loads(out)["sweep_id"] == sweep_id
    assert sweep["state"] == "finished" and sweep["attempts"] == 1, sweep
    summary = sweep["summary"]
    assert (summary["passed"], summary["evals"], summary["trigger"]) == (EVALS, EVALS, "hook")
    assert health["ok"] and health["sweeps"]["counts"]["finished"] == 1
    assert health["sweeps"]["last"]["sweep_id"] == sweep_id
    assert_stored_once(world, sweep_id, summary)


def test_afr_sweep_run_runs_a_slot_in_the_foreground(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        monkeypatch.setenv("AFR_WORKER_MODEL_BASE_URL", model.base_url)
        monkeypatch.setenv("AFR_WORKER_MODEL_API_KEY", "scripted")
        monkeypatch.setenv("AFR_WORKER_DATA_DIR", str(tmp_path / "worker"))
        monkeypatch.setenv("AFR_WORKER_COLLECTOR_OTLP_ENDPOINT", world.running.grpc_endpoint)
        monkeypatch.setenv("AFR_WORKER_COLLECTOR_KEY", world.running.key)
        code = main(["sweep", "run", "--evals", str(world.evals), "--slot", "2026-12-01T03:00:00Z"])
        out, err = capsys.readouterr()
        assert code == 0, err
        again = main(
            ["sweep", "run", "--evals", str(world.evals), "--slot", "2026-12-01T03:00:00Z"]
        )
        assert len(model.requests) == 3 * EVALS
    summary = json.loads(out)
    assert f"{EVALS} passed, 0 failed, 0 inconclusive, 0 errored" in err
    assert summary["slot"] == "2026-12-01T03:00:00Z", "an instant of the schedule: that slot"
    assert again == 0 and "swept already" in capsys.readouterr().err
    assert_stored_once(world, summary["sweep_id"], summary)


def _afr_worker(env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "afr.cli", "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    wait_for_line(process, "afr replay worker up", 60)
    return process


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_killed_mid_sweep_finishes_it_on_restart_without_duplicates(
    world: World, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data_dir = tmp_path / "worker"
    with ScriptedModelServer(fixed_script(), per_conversation=True, latency_s=0.5) as model:
        values = settings_values(world, model.base_url, data_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AFR_")}
        env.update({f"AFR_WORKER_{k.upper()}": str(v) for k, v in values.items()})
        env.update({"AFR_WORKER_PORT": str(port), "AFR_SWEEP_ENABLED": "false"})
        first = _afr_worker(env)
        try:
            answer = post_sweep(url, world.secret, {"slot": "e2e killed"}, "msg_k")
            sweep_id = answer.json()["sweep_id"]
            store = StateStore(data_dir / "state.sqlite")
            # One eval recorded, the next one on its third model turn (its first turns' spans
            # exported already): kill the worker.
            wait_until(
                lambda: store.sweep_results(sweep_id) and len(model.requests) > 5,
                timeout_s=60,
                what="the sweep to get going",
            )
            family = _descendants(first.pid)
        finally:
            first.kill()
            first.wait(10)
            assert first.stdout is not None
            first.stdout.close()
        assert family
        wait_until(
            lambda: not _alive(family),
            timeout_s=10,
            what="the sweep process to die with its worker",
            interval_s=0.1,
        )
        recorded_before = [r.eval_id for r in store.sweep_results(sweep_id)]
        assert len(recorded_before) == 1
        cut_short = sorted(d.id for d in world.documents if d.id not in recorded_before)
        partial = [
            world.running.api(f"/api/v1/runs/{eval_trace_id(sweep_id, e).removeprefix('trace_')}")
            for e in cut_short
        ]
        assert any(r.status_code == 200 for r in partial), (
            "the eval cut short had spans in the store already: its rerun must replace them"
        )
        model.latency_s = 0.0
        second = _afr_worker(env)
        try:
            sweep = wait_sweep(url, sweep_id)
        finally:
            stop_process(second, signal.SIGTERM)
        store.close()
        requests = len(model.requests)
    assert sweep["state"] == "finished", sweep
    assert sweep["attempts"] == 2, "resumed once, by the restarted worker"
    summary = sweep["summary"]
    assert summary["passed"] == EVALS
    # The recorded eval ran once; the one cut short ran again; none ran a third time.
    assert 3 * EVALS < requests <= 3 * (EVALS + 1)
    assert_stored_once(world, sweep_id, summary)
    evals = world.running.api("/api/v1/runs", kind="eval", limit=100).json()["runs"]
    ours = [
        r["run_id"] for r in evals if r["run_id"] in {x["eval_run_id"] for x in summary["results"]}
    ]
    assert len(ours) == EVALS, "each eval run of the sweep is listed once"
