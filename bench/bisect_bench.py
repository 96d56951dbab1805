"""``afr replay bisect`` wall time on a 40-step run, against a plain replay of the same run.

The collector runs as ``afr up --no-worker`` and the worker as ``afr worker`` (two replay
processes), each in its own process; this process seeds the failing 40-model-call run of
``testbed/bisect_desk.py`` (a bad ``book_flight`` date at ``llm:23``) and serves the
scripted model (per conversation, instant). In alternating rounds it times

- a plain replay of the run (the hook, the job with its 40 live model calls, the verdict,
  as ``afr replay`` waits for it), and
- ``afr replay bisect RUN --json`` with the change that fixes it, run as a user runs it (its
  own process: the CLI's start, reading and planning the run, every probe's job);

and reports the medians and their ratio: what finding the deciding step costs in plain
replays of the run. Each probe forks at ``llm:k`` and makes only the live calls from k on,
so the ratio is under the number of probes (6 for 40 steps).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from afr.scripted_model import ScriptedModelServer
from bench.worker_bench import RESULTS, Collector, Worker, _stop, start_collector
from replay_worker.trigger import request_replay, wait_for_job
from testbed.bisect_desk import capture, scenario

STEPS, DECIDING = 40, 23
ROUNDS = int(os.environ.get("AFR_BENCH_BISECT_ROUNDS", "3"))


def _plain_replay_s(worker: Worker, run_id: str) -> float:
    started = time.monotonic()
    accepted = request_replay(worker.url, worker.secret, run_id)
    job = wait_for_job(worker.url, accepted["job_id"], 300)
    elapsed = time.monotonic() - started
    if job["state"] != "succeeded" or job["result"]["verdict"] != "STILL_FAILING":
        raise RuntimeError(f"the plain replay did not replay the run: {job}")
    return elapsed


def _bisect_s(
    collector: Collector, worker: Worker, run_id: str, change: tuple[str, ...]
) -> tuple[float, dict[str, Any]]:
    env = {
        **os.environ,
        "AFR_WORKER_WEBHOOK_SECRET": worker.secret,
        "AFR_API_KEY": collector.key,
    }
    command = [
        sys.executable,
        "-m",
        "afr.cli",
        "replay",
        "bisect",
        run_id,
        "--worker",
        worker.url,
        "--url",
        collector.http_url,
        "--json",
        *change,
    ]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"afr replay bisect exited {done.returncode}: {done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    if report["deciding_step"] != f"llm:{DECIDING}":
        raise RuntimeError(f"the bisection found {report['deciding_step']}, not llm:{DECIDING}")
    return elapsed, report


def main() -> dict[str, Any]:
    chosen = scenario("argument", STEPS, DECIDING)
    collector = start_collector()
    try:
        with ScriptedModelServer([]) as model:
            run_id = capture(
                chosen,
                "responses",
                model,
                f"http://127.0.0.1:{collector.grpc_port}",
                {"authorization": f"Bearer {collector.key}"},
            )
            worker = Worker(collector, model.base_url, 2, 1000)
            try:
                plain: list[float] = []
                bisects: list[float] = []
                live: list[int] = []
                report: dict[str, Any] = {}
                for round_ in range(ROUNDS + 1):  # the first warms the replay processes
                    model.script(list(chosen.source), per_conversation=True)
                    plain_s = _plain_replay_s(worker, run_id)
                    model.script(list(chosen.fixed), per_conversation=True)
                    bisect_s, report = _bisect_s(collector, worker, run_id, chosen.change)
                    if round_:
                        plain.append(plain_s)
                        bisects.append(bisect_s)
                        live.append(len(model.requests))
            finally:
                worker.stop()
    finally:
        _stop(collector.process)
    figures: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "steps": STEPS,
        "deciding_step": DECIDING,
        "rounds": ROUNDS,
        "probes": len(report["probes"]),
        "probe_steps": [p["step"] for p in report["probes"]],
        "bisect_live_model_calls": statistics.median(live),
        "plain_replay_s": statistics.median(plain),
        "bisect_s": statistics.median(bisects),
    }
    figures["bisect_vs_plain_replay_ratio"] = figures["bisect_s"] / figures["plain_replay_s"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bisect.json").write_text(json.dumps(figures, indent=2))
    print(
        f"bisect bench ({STEPS}-step run, deciding step llm:{DECIDING}, afr worker with 2 replay"
        f" processes, instant scripted model, medians of {ROUNDS} rounds; {os.cpu_count()} CPUs)"
    )
    print(
        f"  a plain replay: {figures['plain_replay_s']:.2f} s ({STEPS} live model calls);"
        f" afr replay bisect: {figures['bisect_s']:.2f} s ({figures['probes']} probes at"
        f" {', '.join(figures['probe_steps'])}; {figures['bisect_live_model_calls']:.0f} live"
        f" model calls) = {figures['bisect_vs_plain_replay_ratio']:.2f}x a plain replay"
    )
    return figures


if __name__ == "__main__":
    main()
