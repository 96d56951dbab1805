"""Replay worker throughput and per-job overhead, against the scripted model.

The collector runs as ``afr up --no-worker`` and each worker as ``afr worker``, each in its
own process as a user runs them; this process seeds the failing refund-desk run and serves
the scripted model (per conversation, so concurrent replays each walk the script; three
model calls per replay). For 1, 2 and 4 replay processes (``AFR_WORKER_CONCURRENCY``), after
a warm-up round that starts every replay process, all of a round's hooks are posted at once:

- jobs/min: jobs over the wall time from the first hook to the last finished job;
- overhead per job: the mean time a job ran (claimed -> finished, as the worker stamps it)
  minus the time the model spent answering its requests (server side): fetching the run,
  the fixture, the SDK's Runner, the ledger, exporting and flushing the replay trace, the
  state store and the hand-offs between processes.

Two model latencies: 0 (the worker's own capacity; CPU-bound, and the machine's cores are
shared with the collector and this process) and 0.5 s per call (a fast real model: there,
concurrency hides the wait). And one worker with a fresh process for every job
(``AFR_WORKER_JOBS_PER_PROCESS=1``), to show what reusing replay processes saves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from agents import gen_trace_id

import afr_exporter
from afr.incident import build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from collector.auth import KeyStore
from replay_worker.hooks.signature import generate_secret
from replay_worker.trigger import signed_headers

RESULTS = Path(__file__).parent / "results"
CONCURRENCY = (1, 2, 4)
JOBS_INSTANT = int(os.environ.get("AFR_BENCH_WORKER_JOBS", "24"))
JOBS_SLOW = int(os.environ.get("AFR_BENCH_WORKER_SLOW_JOBS", "12"))
SLOW_LATENCY_S = 0.5
STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})


@dataclass
class Collector:
    process: subprocess.Popen[str]
    data_dir: Path
    key: str
    grpc_port: int
    http_port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


def _read_until(process: subprocess.Popen[str], prefix: str, timeout_s: float = 120) -> None:
    assert process.stdout is not None
    command = " ".join(str(part) for part in process.args)  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith(prefix):
            return
        if not line and process.poll() is not None:
            raise RuntimeError(f"{command} exited with {process.returncode}")
    raise RuntimeError(f"{command} printed no {prefix!r}")


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    if process.stdout is not None:
        process.stdout.close()


def start_collector() -> Collector:
    data_dir = Path(tempfile.mkdtemp(prefix="afr-bench-worker-"))
    key = KeyStore(data_dir / "keys.sqlite").create("bench")
    grpc_port, http_port = 43370 + os.getpid() % 100, 43470 + os.getpid() % 100
    env = {**os.environ, "AFR_DATA_DIR": str(data_dir), "AFR_INGEST_WORKERS": "0"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "afr.cli",
            "up",
            "--no-worker",
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    _read_until(process, "  read API")
    return Collector(process, data_dir, key, grpc_port, http_port)


def seed_failing_run(collector: Collector) -> str:
    processor = afr_exporter.install(
        endpoint=f"http://127.0.0.1:{collector.grpc_port}",
        headers={"authorization": f"Bearer {collector.key}"},
    )
    trace_id = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        asyncio.run(run_incident(build_model("responses", model.base_url), trace_id=trace_id))
    assert processor.force_flush(30)
    processor.shutdown(timeout=5)
    run_id = trace_id.removeprefix("trace_")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{collector.http_url}/api/v1/runs/{run_id}",
            headers={"authorization": f"Bearer {collector.key}"},
        )
        if response.status_code == 200:
            return run_id
        time.sleep(0.2)
    raise RuntimeError("the seeded run never became readable")


class Worker:
    """``afr worker`` in its own process, and a client that posts hooks to it."""

    def __init__(
        self, collector: Collector, model_url: str, concurrency: int, jobs_per_process: int
    ) -> None:
        self.secret = generate_secret()
        self.port = 43570 + (os.getpid() + concurrency + jobs_per_process) % 100
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AFR_WORKER_")}
        env.update(
            {
                "AFR_WORKER_PORT": str(self.port),
                "AFR_WORKER_DATA_DIR": tempfile.mkdtemp(prefix="afr-bench-worker-state-"),
                "AFR_WORKER_COLLECTOR_URL": collector.http_url,
                "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}",
                "AFR_WORKER_COLLECTOR_KEY": collector.key,
                "AFR_WORKER_WEBHOOK_SECRET": self.secret,
                "AFR_WORKER_MODEL_BASE_URL": model_url,
                "AFR_WORKER_MODEL_API_KEY": "scripted",
                "AFR_WORKER_CONCURRENCY": str(concurrency),
                "AFR_WORKER_JOBS_PER_PROCESS": str(jobs_per_process),
                "AFR_WORKER_DAY_BUDGET_USD": "1000",
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "afr.cli", "worker"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        _read_until(self.process, "afr replay worker up")
        self.client = httpx.Client(timeout=30)
        self.posted = 0

    def post(self, run_id: str) -> str:
        self.posted += 1
        body = json.dumps({"run_id": run_id, "stubs": {"refund_order": STUB}}).encode()
        headers = signed_headers(self.secret, body, f"msg_bench_{self.posted}")
        response = self.client.post(self.url + "/hooks/replay", content=body, headers=headers)
        response.raise_for_status()
        job_id: str = response.json()["job_id"]
        return job_id

    def finish(self, job_ids: list[str], timeout_s: float = 600) -> list[dict[str, Any]]:
        """Waits on /healthz (cheap for the worker), then reads each job once."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            jobs = self.client.get(self.url + "/healthz").json()["jobs"]
            if jobs["succeeded"] + jobs["failed"] >= self.posted:
                break
            time.sleep(0.1)
        found = [self.client.get(f"{self.url}/jobs/{job_id}").json() for job_id in job_ids]
        failed = [job for job in found if job["state"] != "succeeded"]
        if failed:
            raise RuntimeError(f"{len(failed)} bench job(s) did not succeed: {failed[0]}")
        return found

    def stop(self) -> None:
        self.client.close()
        _stop(self.process)


def measure_round(
    worker: Worker, model: ScriptedModelServer, run_id: str, jobs: int
) -> dict[str, float]:
    model.clear()
    started = time.time()
    job_ids = [worker.post(run_id) for _ in range(jobs)]
    finished = worker.finish(job_ids)
    wall_s = max(job["finished_at"] for job in finished) - started
    model_s = sum(r.answered_s - r.received_s for r in model.requests)
    run_s = [job["finished_at"] - job["started_at"] for job in finished]
    return {
        "jobs": jobs,
        "jobs_per_min": jobs / wall_s * 60,
        "job_run_s_mean": statistics.mean(run_s),
        "model_s_per_job": model_s / jobs,
        "overhead_ms_per_job": (statistics.mean(run_s) - model_s / jobs) * 1000,
        "model_peak_in_flight": model.max_in_flight,
    }


def bench_worker(
    collector: Collector,
    model: ScriptedModelServer,
    run_id: str,
    concurrency: int,
    *,
    jobs_per_process: int = 100,
    slow_round: bool = True,
) -> dict[str, dict[str, float]]:
    worker = Worker(collector, model.base_url, concurrency, jobs_per_process)
    try:
        model.latency_s = 0.0
        worker.finish([worker.post(run_id) for _ in range(concurrency)])  # every process up
        figures = {"instant": measure_round(worker, model, run_id, JOBS_INSTANT)}
        if slow_round:
            model.latency_s = SLOW_LATENCY_S
            figures["slow"] = measure_round(worker, model, run_id, JOBS_SLOW)
        return figures
    finally:
        worker.stop()


def main() -> dict[str, Any]:
    collector = start_collector()
    try:
        run_id = seed_failing_run(collector)
        with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
            by_n = {n: bench_worker(collector, model, run_id, n) for n in CONCURRENCY}
            fresh_rounds = bench_worker(
                collector, model, run_id, 1, jobs_per_process=1, slow_round=False
            )
    finally:
        _stop(collector.process)
    fresh = fresh_rounds["instant"]

    figures: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "model_calls_per_job": 3,
        "slow_model_latency_s": SLOW_LATENCY_S,
    }
    for n, rounds in by_n.items():
        for name, values in rounds.items():
            for key, value in values.items():
                figures[f"{name}_model_{n}_processes_{key}"] = value
    for key, value in fresh.items():
        figures[f"instant_model_fresh_process_per_job_{key}"] = value
    for name in ("instant", "slow"):
        base = by_n[1][name]["jobs_per_min"]
        for n in CONCURRENCY[1:]:
            figures[f"{name}_model_{n}_vs_1_processes_ratio"] = by_n[n][name]["jobs_per_min"] / base
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "worker.json").write_text(json.dumps(figures, indent=2))

    print(
        f"worker bench (afr worker against the scripted model, 3 model calls per replay; "
        f"{os.cpu_count()} CPUs shared with the collector and the model)"
    )
    for name, label in (("instant", "model answers at once"), ("slow", "model takes 0.5 s/call")):
        print(f"  {label}:")
        base = by_n[1][name]["jobs_per_min"]
        for n in CONCURRENCY:
            row = by_n[n][name]
            print(
                f"    {n} replay process{'es' if n > 1 else '  '}  {row['jobs_per_min']:7.1f} jobs/min "
                f"= {row['jobs_per_min'] / base:4.2f}x 1 process; overhead outside the model "
                f"{row['overhead_ms_per_job']:5.0f} ms/job; peak concurrent model calls "
                f"{row['model_peak_in_flight']:.0f}"
            )
    reused = by_n[1]["instant"]
    print(
        f"  a fresh process per job (1 process): {fresh['jobs_per_min']:7.1f} jobs/min, "
        f"overhead {fresh['overhead_ms_per_job']:5.0f} ms/job "
        f"(reused: {reused['overhead_ms_per_job']:.0f} ms/job)"
    )
    return figures


if __name__ == "__main__":
    main()
