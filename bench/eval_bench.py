"""``afr eval run`` throughput and per-eval harness overhead, against the scripted model.

The collector runs as ``afr up --no-worker`` in its own process; this process seeds the
failing refund-desk run, replays it to FAILURE_FIXED, synthesizes the eval and writes
``AFR_BENCH_EVALS`` variants of it (same capture, another name: another eval). The scripted
model answers per conversation (three model calls per eval). Each round runs the evals as a
user does, with ``afr eval run`` processes, exporting every eval run to the collector:

- 1 process: one ``afr eval run``;
- 2 processes, sharded: ``--shard 1/2`` and ``--shard 2/2`` side by side (a CI matrix, or
  the nightly CronJob's pods);
- 2 processes, ``--workers 2``: one command, a pool of eval processes.

Figures: evals/min over the wall time of the round (process start-up included, as CI sees
it), the harness overhead per eval outside the model: the mean time an eval took (its
replay, assertions, ledger, state store, exporting) minus the time the model spent
answering its requests (server side). Two model latencies: instant (the harness's own
capacity; 2 CPUs shared with the collector and this process) and 0.5 s per call. And the
eval commands' start against a bare ``import agents`` (``bench.cli_start``: ``afr eval
synthesize``, ``afr eval run --list``, ``afr eval run`` of one eval).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from agents import Model

import afr_exporter
from afr.incident import build_model, fixed_script
from afr.scripted_model import ScriptedModelServer
from bench import cli_start
from bench.worker_bench import RESULTS, STUB, Collector, _stop, seed_failing_run, start_collector
from replay_worker.evals.contract import EvalDocument, write_eval
from replay_worker.evals.synthesis import synthesize
from replay_worker.replay.engine import run_replay
from replay_worker.replay.fixture import build_fixture

EVALS_INSTANT = int(os.environ.get("AFR_BENCH_EVALS", "96"))
EVALS_SLOW = int(os.environ.get("AFR_BENCH_SLOW_EVALS", "24"))
SLOW_LATENCY_S = 0.5
MODES = ("1 process", "2 processes, sharded", "2 processes, --workers 2")


def _get_run(collector: Collector, run_id: str) -> dict[str, Any]:
    """The run once all of it is stored: its root span is there (the exporter sends it when
    the trace ends) and two reads a batch interval apart agree."""
    deadline = time.monotonic() + 60
    previous: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{collector.http_url}/api/v1/runs/{run_id}",
            headers={"authorization": f"Bearer {collector.key}"},
            timeout=30,
        )
        if response.status_code == 200:
            run: dict[str, Any] = response.json()
            complete = any(s["parent_span_id"] == "" for s in run["spans"])
            if complete and previous is not None and len(previous["spans"]) == len(run["spans"]):
                return run
            previous = run
        time.sleep(1.2)
    raise RuntimeError(f"run {run_id} never became readable in full")


def synthesized_eval(collector: Collector, source_run_id: str) -> tuple[EvalDocument, str]:
    """The eval of the sacred path: the seeded run, replayed to FAILURE_FIXED, synthesized;
    and the replay's run id."""
    source = _get_run(collector, source_run_id)
    processor = afr_exporter.install(
        endpoint=f"http://127.0.0.1:{collector.grpc_port}",
        headers={"authorization": f"Bearer {collector.key}"},
    )
    with ScriptedModelServer(fixed_script()) as model:

        def model_for(name: str) -> Model:
            return build_model("responses", model.base_url)

        replayed = asyncio.run(
            run_replay(build_fixture(source), model_for, stub_outputs={"refund_order": STUB})
        )
    assert processor.force_flush(30)
    processor.shutdown(timeout=5)
    assert replayed.verdict == "FAILURE_FIXED", replayed.reason
    return synthesize(source, _get_run(collector, replayed.replay_run_id)), replayed.replay_run_id


def write_variants(document: EvalDocument, count: int, directory: Path) -> None:
    for n in range(count):
        write_eval(
            EvalDocument.create(
                name=f"{document.name} #{n}",
                provenance=document.provenance,
                fixture=document.fixture,
                replay=document.replay,
                assertions=list(document.assertions),
            ),
            directory,
        )


def _env(collector: Collector, model_url: str, data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AFR_WORKER_MODEL_BASE_URL": model_url,
        "AFR_WORKER_MODEL_API_KEY": "scripted",
        "AFR_WORKER_DATA_DIR": str(data_dir),
        "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}",
        "AFR_WORKER_COLLECTOR_KEY": collector.key,
    }


def _command(evals: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "afr.cli", "eval", "run", str(evals), "--json", *extra]


def _timed_lines(process: subprocess.Popen[str], into: list[tuple[float, str]]) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        into.append((time.monotonic(), line))


def run_round(
    collector: Collector, model: ScriptedModelServer, evals: Path, count: int, mode: str
) -> dict[str, float]:
    env = _env(collector, model.base_url, Path(tempfile.mkdtemp(prefix="afr-bench-evals-")))
    if mode == MODES[0]:
        commands = [_command(evals)]
    elif mode == MODES[1]:
        commands = [_command(evals, "--shard", f"{i}/2") for i in (1, 2)]
    else:
        commands = [_command(evals, "--workers", "2")]
    model.clear()
    started = time.monotonic()
    processes = [
        subprocess.Popen(
            c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        for c in commands
    ]
    lines: list[list[tuple[float, str]]] = [[] for _ in processes]
    readers = [
        threading.Thread(target=_timed_lines, args=(p, into), daemon=True)
        for p, into in zip(processes, lines, strict=True)
    ]
    for reader in readers:
        reader.start()
    outputs = [p.stdout.read() if p.stdout else "" for p in processes]
    for process in processes:
        process.wait(1800)
    wall_s = time.monotonic() - started
    for reader in readers:
        reader.join(10)
    outcomes = [o for out in outputs for o in json.loads(out)]
    if len(outcomes) != count or {o["status"] for o in outcomes} != {"passed"}:
        raise RuntimeError(f"{mode}: not every eval passed: {outcomes[:2]}")
    # The eval phase: from the first process saying "running" to the last eval finished.
    first = min(t for process in lines for t, line in process if line.startswith("running"))
    last = max(t for process in lines for t, line in process if line.startswith("["))
    requests = model.requests
    model_s_per_eval = sum(r.answered_s - r.received_s for r in requests) / count
    eval_s = statistics.fmean(o["duration_s"] for o in outcomes)
    return {
        "evals": count,
        "wall_s": wall_s,
        "evals_per_min": count / wall_s * 60,
        "startup_s": first - started,
        "eval_phase_s": last - first,
        "evals_per_min_eval_phase": count / (last - first) * 60,
        "eval_s_mean": eval_s,
        "model_s_per_eval": model_s_per_eval,
        "overhead_ms_per_eval": (eval_s - model_s_per_eval) * 1000,
        "model_calls_per_eval": len(requests) / count,
    }


def main() -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="afr-bench-evalset-"))
    collector = start_collector()
    try:
        document, replay_run_id = synthesized_eval(collector, seed_failing_run(collector))
        write_variants(document, EVALS_INSTANT, root / "instant")
        write_variants(document, EVALS_SLOW, root / "slow")
        rounds: dict[str, dict[str, dict[str, float]]] = {}
        with ScriptedModelServer(fixed_script(), per_conversation=True) as model:
            access = cli_start.CollectorAccess(
                collector.http_url, f"http://127.0.0.1:{collector.grpc_port}", collector.key
            )
            cli = cli_start.measure(access, replay_run_id, model.base_url)
            for name, latency_s, count in (
                ("instant", 0.0, EVALS_INSTANT),
                ("slow", SLOW_LATENCY_S, EVALS_SLOW),
            ):
                model.latency_s = latency_s
                rounds[name] = {
                    mode: run_round(collector, model, root / name, count, mode) for mode in MODES
                }
    finally:
        _stop(collector.process)

    figures: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "slow_model_latency_s": SLOW_LATENCY_S,
        "startup_s": cli["eval_run_list_s"],
        **{f"cli_{key}": value for key, value in cli.items()},
    }
    keys = {MODES[0]: "1_process", MODES[1]: "2_processes_sharded", MODES[2]: "2_workers"}
    for name, by_mode in rounds.items():
        base = by_mode[MODES[0]]
        for mode, values in by_mode.items():
            for key, value in values.items():
                figures[f"{name}_model_{keys[mode]}_{key}"] = value
            if mode != MODES[0]:
                for rate in ("evals_per_min", "evals_per_min_eval_phase"):
                    figures[f"{name}_model_{keys[mode]}_{rate}_vs_1_process_ratio"] = (
                        values[rate] / base[rate]
                    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "eval.json").write_text(json.dumps(figures, indent=2))

    print(
        f"eval bench (afr eval run against the scripted model, 3 model calls per eval, eval "
        f"runs exported to the collector; {os.cpu_count()} CPUs shared with the collector and "
        f"the model)"
    )
    for line in cli_start.lines(cli):
        print(line)
    for name, label in (("instant", "model answers at once"), ("slow", "model takes 0.5 s/call")):
        by_mode = rounds[name]
        base = by_mode[MODES[0]]
        print(f"  {label} ({base['evals']:.0f} evals):")
        for mode, row in by_mode.items():
            print(
                f"    {mode:26} {row['evals_per_min']:6.1f} evals/min over the wall "
                f"({row['evals_per_min'] / base['evals_per_min']:4.2f}x; wall {row['wall_s']:5.1f} s, "
                f"start-up {row['startup_s']:4.1f} s); "
                f"{row['evals_per_min_eval_phase']:6.1f} evals/min once started "
                f"({row['evals_per_min_eval_phase'] / base['evals_per_min_eval_phase']:4.2f}x); "
                f"overhead outside the model {row['overhead_ms_per_eval']:4.0f} ms/eval"
            )
    return figures


if __name__ == "__main__":
    main()
