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

Overhead per stub: the incident's replay answers one tool call from a stub; a second seeded
run makes ``AFR_BENCH_WORKER_STUBS`` refund calls in one model answer, each answered by the
stub in its replay (the same three model calls). Two workers of one replay process each, one
per run, take rounds in turn; the difference of their median overheads per job, over the
extra stubs, is the overhead per stub. Target: < 100 ms per job.

Fork overhead: one worker of one replay process takes, in turn, rounds of plain replays of
the incident, of forks at ``llm:1`` with no override (the same three live model calls: what
forking itself costs) and of forks at the failing tool call with a corrected output (two
model calls answered from the capture, one live); the figures are medians over rounds, with
how long the hook takes to answer each (a fork is checked against its run first).

Last, the eval commands' start against a bare ``import agents`` (``bench.cli_start``), on an
eval synthesized from one of the jobs' replays.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
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
from afr.scripted_model import ScriptedModelServer, ScriptedToolCall, ScriptedTurn
from bench import cli_start
from collector.auth import KeyStore
from replay_worker.hooks.signature import generate_secret
from replay_worker.trigger import signed_headers

RESULTS = Path(__file__).parent / "results"
CONCURRENCY = (1, 2, 4)
JOBS_INSTANT = int(os.environ.get("AFR_BENCH_WORKER_JOBS", "24"))
JOBS_SLOW = int(os.environ.get("AFR_BENCH_WORKER_SLOW_JOBS", "12"))
SLOW_LATENCY_S = 0.5
STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})
STUBS_PER_JOB = int(os.environ.get("AFR_BENCH_WORKER_STUBS", "8"))
STUB_ROUNDS, JOBS_PER_STUB_ROUND = 3, 12
OVERHEAD_TARGET_MS = 100.0


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


def with_refund_calls(script: list[ScriptedTurn], calls: int) -> list[ScriptedTurn]:
    """The incident's script with ``calls`` refund calls (orders A-1001, A-1002...) in its
    second answer instead of one."""
    handoff, refund, final = script
    (call,) = refund.tool_calls
    arguments = json.loads(call.arguments)
    many = tuple(
        ScriptedToolCall(
            call.name, json.dumps({**arguments, "order_id": f"A-{1001 + n}"}), f"{call.call_id}_{n}"
        )
        for n in range(calls)
    )
    return [handoff, dataclasses.replace(refund, tool_calls=many), final]


def seed_failing_run(collector: Collector, script: list[ScriptedTurn] | None = None) -> str:
    """The failing refund-desk run (``script``: the failing incident's by default)."""
    processor = afr_exporter.install(
        endpoint=f"http://127.0.0.1:{collector.grpc_port}",
        headers={"authorization": f"Bearer {collector.key}"},
    )
    trace_id = gen_trace_id()
    with ScriptedModelServer(script or failing_script()) as model:
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Worker:
    """``afr worker`` in its own process, and a client that posts hooks to it."""

    def __init__(
        self, collector: Collector, model_url: str, concurrency: int, jobs_per_process: int
    ) -> None:
        self.secret = generate_secret()
        self.port = _free_port()
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

    def post(self, run_id: str, fork: dict[str, Any] | None = None) -> str:
        self.posted += 1
        payload: dict[str, Any] = {"run_id": run_id, "stubs": {"refund_order": STUB}}
        if fork is not None:
            payload["fork"] = fork
        body = json.dumps(payload).encode()
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


def _tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by ``root`` and every process below it (the fork server, the
    replay processes), those already reaped included. Linux ``/proc``; 0 elsewhere."""
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, int]] = {}  # pid -> (parent, clock ticks)
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        # after the name: state, ppid, ... utime, stime, cutime, cstime (fields 14-17)
        procs[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in procs.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    return sum(procs[pid][1] for pid in tree if pid in procs) * tick_s


def measure_round(
    worker: Worker,
    model: ScriptedModelServer,
    run_id: str,
    jobs: int,
    fork: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Wall figures as the worker stamps its jobs, and the CPU its processes used per job
    (what the wall figures become on a machine that other work shares)."""
    model.clear()
    cpu_s = _tree_cpu_s(worker.process.pid)
    started = time.time()
    job_ids = []
    post_s = []
    for _ in range(jobs):
        posted = time.monotonic()
        job_ids.append(worker.post(run_id, fork))
        post_s.append(time.monotonic() - posted)
    finished = worker.finish(job_ids)
    cpu_s = _tree_cpu_s(worker.process.pid) - cpu_s
    wall_s = max(job["finished_at"] for job in finished) - started
    model_s = sum(r.answered_s - r.received_s for r in model.requests)
    run_s = [job["finished_at"] - job["started_at"] for job in finished]
    return {
        "jobs": jobs,
        "jobs_per_min": jobs / wall_s * 60,
        "job_run_s_mean": statistics.mean(run_s),
        "model_s_per_job": model_s / jobs,
        "overhead_ms_per_job": (statistics.mean(run_s) - model_s / jobs) * 1000,
        "worker_cpu_ms_per_job": cpu_s / jobs * 1000,
        "model_peak_in_flight": model.max_in_flight,
        "model_requests_per_job": len(model.requests) / jobs,
        "hook_ms_per_job": statistics.mean(post_s) * 1000,
    }


def bench_worker(
    collector: Collector,
    model: ScriptedModelServer,
    run_id: str,
    concurrency: int,
    *,
    jobs_per_process: int = 100,
    slow_round: bool = True,
) -> tuple[dict[str, dict[str, float]], str]:
    """The rounds' figures, and the replay run of a job (to synthesize an eval from)."""
    worker = Worker(collector, model.base_url, concurrency, jobs_per_process)
    try:
        model.latency_s = 0.0
        warm = worker.finish([worker.post(run_id) for _ in range(concurrency)])  # every process up
        figures = {"instant": measure_round(worker, model, run_id, JOBS_INSTANT)}
        if slow_round:
            model.latency_s = SLOW_LATENCY_S
            figures["slow"] = measure_round(worker, model, run_id, JOBS_SLOW)
            model.latency_s = 0.0
        return figures, str(warm[0]["result"]["replay_run_id"])
    finally:
        worker.stop()


def bench_stubs(collector: Collector, one_stub_run_id: str) -> dict[str, float]:
    """Overhead per job with one stubbed call and with ``STUBS_PER_JOB``, one replay process
    each, in alternating rounds; their difference per extra stub."""
    many_stubs_run_id = seed_failing_run(
        collector, with_refund_calls(failing_script(), STUBS_PER_JOB)
    )
    overheads: dict[int, list[float]] = {1: [], STUBS_PER_JOB: []}
    cpu: dict[int, list[float]] = {1: [], STUBS_PER_JOB: []}
    with (
        ScriptedModelServer(fixed_script(), per_conversation=True) as one_model,
        ScriptedModelServer(
            with_refund_calls(fixed_script(), STUBS_PER_JOB), per_conversation=True
        ) as many_model,
    ):
        sides = [
            (1, Worker(collector, one_model.base_url, 1, 1000), one_model, one_stub_run_id),
            (
                STUBS_PER_JOB,
                Worker(collector, many_model.base_url, 1, 1000),
                many_model,
                many_stubs_run_id,
            ),
        ]
        try:
            for _, worker, _, run_id in sides:
                (job,) = worker.finish([worker.post(run_id)])
                assert job["result"]["verdict"] == "FAILURE_FIXED", job["result"]
            for _ in range(STUB_ROUNDS):
                for stubs, worker, model, run_id in sides:
                    row = measure_round(worker, model, run_id, JOBS_PER_STUB_ROUND)
                    overheads[stubs].append(row["overhead_ms_per_job"])
                    cpu[stubs].append(row["worker_cpu_ms_per_job"])
        finally:
            for _, worker, _, _ in sides:
                worker.stop()
    figures: dict[str, float] = {"stubs_per_job": STUBS_PER_JOB}
    for name, values in (("overhead", overheads), ("worker_cpu", cpu)):
        one, many = statistics.median(values[1]), statistics.median(values[STUBS_PER_JOB])
        figures[f"{name}_ms_per_job_1_stub"] = one
        figures[f"{name}_ms_per_job_{STUBS_PER_JOB}_stubs"] = many
        figures[f"{name}_ms_per_stub"] = (many - one) / (STUBS_PER_JOB - 1)
    return figures


FORK_ROUNDS = int(os.environ.get("AFR_BENCH_WORKER_FORK_ROUNDS", "5"))
JOBS_PER_FORK_ROUND = 6
FORKS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "fork_llm1": {"step": "llm:1"},
    "fork_at_call": {
        "step": "call_refund_1",
        "overrides": [{"kind": "tool_output", "call_id": "call_refund_1", "output": STUB}],
    },
}


def bench_fork(collector: Collector, run_id: str) -> dict[str, float]:
    """Plain replays and forks of one run in alternating rounds, one replay process."""
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in FORKS}
    with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
        worker = Worker(collector, model.base_url, 1, 1000)
        try:
            for fork in FORKS.values():  # warm: and each answers as expected
                (job,) = worker.finish([worker.post(run_id, fork)])
                assert job["result"]["verdict"] == "FAILURE_FIXED", job["result"]
            for _ in range(FORK_ROUNDS):
                for name, fork in FORKS.items():
                    rows[name].append(
                        measure_round(worker, model, run_id, JOBS_PER_FORK_ROUND, fork)
                    )
        finally:
            worker.stop()
    figures: dict[str, float] = {}
    for name, measured in rows.items():
        for key in ("job_run_s_mean", "overhead_ms_per_job", "worker_cpu_ms_per_job"):
            figures[f"{name}_{key}"] = statistics.median(r[key] for r in measured)
        for key in ("hook_ms_per_job", "model_requests_per_job"):
            figures[f"{name}_{key}"] = statistics.median(r[key] for r in measured)
    figures["fork_overhead_ms_per_job"] = (
        figures["fork_llm1_overhead_ms_per_job"] - figures["plain_overhead_ms_per_job"]
    )
    return figures


def main() -> dict[str, Any]:
    collector = start_collector()
    try:
        run_id = seed_failing_run(collector)
        with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
            by_n: dict[int, dict[str, dict[str, float]]] = {}
            for n in CONCURRENCY:
                by_n[n], replay_run_id = bench_worker(collector, model, run_id, n)
            fresh_rounds, _ = bench_worker(
                collector, model, run_id, 1, jobs_per_process=1, slow_round=False
            )
            stubs = bench_stubs(collector, run_id)
            forks = bench_fork(collector, run_id)
            access = cli_start.CollectorAccess(
                collector.http_url, f"http://127.0.0.1:{collector.grpc_port}", collector.key
            )
            cli = cli_start.measure(access, replay_run_id, model.base_url)
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
    for key, value in stubs.items():
        figures[f"instant_model_1_processes_{key}"] = value
    for key, value in forks.items():
        figures[f"instant_model_1_processes_{key}"] = value
    for key, value in cli.items():
        figures[f"cli_{key}"] = value
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
                f"{row['overhead_ms_per_job']:5.0f} ms/job (worker CPU "
                f"{row['worker_cpu_ms_per_job']:4.0f} ms/job); peak concurrent model calls "
                f"{row['model_peak_in_flight']:.0f}"
            )
    reused = by_n[1]["instant"]
    print(
        f"  a fresh process per job (1 process): {fresh['jobs_per_min']:7.1f} jobs/min, "
        f"overhead {fresh['overhead_ms_per_job']:5.0f} ms/job, worker CPU "
        f"{fresh['worker_cpu_ms_per_job']:.0f} ms/job (reused: {reused['overhead_ms_per_job']:.0f} "
        f"and {reused['worker_cpu_ms_per_job']:.0f} ms/job)"
    )
    many = stubs["stubs_per_job"]
    print(
        f"  harness overhead (1 replay process, instant model; target < {OVERHEAD_TARGET_MS:.0f} "
        f"ms/job): {stubs['overhead_ms_per_job_1_stub']:.0f} ms/job with 1 stubbed call, "
        f"{stubs[f'overhead_ms_per_job_{many}_stubs']:.0f} ms/job with {many:.0f}: "
        f"{stubs['overhead_ms_per_stub']:.1f} ms per stub (medians of {STUB_ROUNDS} rounds each); "
        f"worker CPU {stubs['worker_cpu_ms_per_job_1_stub']:.0f} and "
        f"{stubs[f'worker_cpu_ms_per_job_{many}_stubs']:.0f} ms/job: "
        f"{stubs['worker_cpu_ms_per_stub']:.1f} ms per stub"
    )
    print(
        f"  forks (1 replay process, instant model, medians of {FORK_ROUNDS} rounds): a plain"
        f" replay runs {forks['plain_job_run_s_mean'] * 1000:.0f} ms/job"
        f" ({forks['plain_model_requests_per_job']:.0f} model calls), a fork at llm:1"
        f" {forks['fork_llm1_job_run_s_mean'] * 1000:.0f} ms/job"
        f" (fork overhead {forks['fork_overhead_ms_per_job']:+.0f} ms/job), a fork at the"
        f" failing call {forks['fork_at_call_job_run_s_mean'] * 1000:.0f} ms/job"
        f" ({forks['fork_at_call_model_requests_per_job']:.0f} live model call); the hook answers"
        f" in {forks['plain_hook_ms_per_job']:.0f} ms (plain) and"
        f" {forks['fork_at_call_hook_ms_per_job']:.0f} ms (fork: the run is checked first)"
    )
    for line in cli_start.lines(cli):
        print(line)
    return figures


if __name__ == "__main__":
    main()
