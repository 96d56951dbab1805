"""The worker at scale, with real parts: the collector, replay processes, the state store
and the scripted model over HTTP. Replays run in parallel up to the bound and never mix
their traces; workers on one state share jobs, webhook ids and the day's spend; an overrun
is charged and shown; a worker killed mid-replay leaves no process behind and its job runs
again on the next start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from afr.incident import INCIDENT_MODEL, fixed_script
from afr.scripted_model import ScriptedModelServer
from replay_worker.app import WorkerThread
from tests.e2e import test_replay
from tests.e2e.test_replay import STUB, Stack, post_hook, wait_job, worker_settings
from tests.fakes import free_port, stop_process, wait_for_line
from tests.waiting import wait_until

stack = test_replay.stack  # the collector with the seeded failing run, as a fixture here too
STUBS = {"refund_order": STUB}


def test_replays_run_in_parallel_up_to_the_bound_and_keep_their_traces_apart(
    stack: Stack,
) -> None:
    with (
        ScriptedModelServer(fixed_script(), per_conversation=True, latency_s=0.4) as model,
        WorkerThread(worker_settings(stack, model.base_url, concurrency=2)) as worker,
    ):
        accepted = []
        for n in range(5):
            started = time.monotonic()
            answer = post_hook(
                worker, stack.secret, {"run_id": stack.run_id, "stubs": STUBS}, f"msg_{n}"
            )
            assert answer.status_code == 202
            assert time.monotonic() - started < 1.0, "the hook answers at once"
            accepted.append(answer.json()["job_id"])
        jobs = [wait_job(worker, job_id) for job_id in accepted]
        health = httpx.get(worker.url + "/healthz", timeout=10).json()
        peak = model.max_in_flight
    assert [job["result"]["verdict"] for job in jobs] == ["FAILURE_FIXED"] * 5, jobs
    assert peak == 2, "two replays at once, never more"
    assert health["pool"]["processes_started"] == 2, "replay processes are reused"
    assert health["jobs"]["succeeded"] == 5
    replay_ids = {job["result"]["replay_run_id"] for job in jobs}
    assert len(replay_ids) == 5
    for replay_id in replay_ids:
        spans = stack.running.run(replay_id)["spans"]
        assert {s["trace_id"] for s in spans} == {replay_id}
        assert len([s for s in spans if s["parent_span_id"] == ""]) == 1
        assert len([s for s in spans if s["name"] == "replay.verdict"]) == 1, (
            "each replay's spans are its own: no processor saw two replays"
        )


def test_usage_beyond_the_reservation_is_charged_and_shown(stack: Stack) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(
            worker_settings(
                stack,
                model.base_url,
                max_output_tokens=1,  # reserved: 1 output token; reported: dozens
                # the replayed model (a database one) priced as an override: $100 out
                prices_per_mtok={INCIDENT_MODEL: (0.0, 100.0)},
            )
        ) as worker,
    ):
        answer = post_hook(worker, stack.secret, {"run_id": stack.run_id, "stubs": STUBS})
        job = wait_job(worker, answer.json()["job_id"])
        health = httpx.get(worker.url + "/healthz", timeout=10).json()
    assert job["state"] == "succeeded", job
    reserved = job["model_requests"] * 100.0 / 1e6
    assert job["overrun_usd"] > 0
    assert job["cost_usd"] == pytest.approx(reserved + job["overrun_usd"], abs=2e-6), (
        "the real cost is charged, not capped at the reservation"
    )
    assert health["day_spent_usd"] == job["cost_usd"]
    assert health["day_overrun_usd"] == job["overrun_usd"]


def test_two_workers_on_one_state_share_jobs_webhook_ids_and_spend(stack: Stack) -> None:
    with ScriptedModelServer(fixed_script()) as model:
        settings = worker_settings(stack, model.base_url)
        with WorkerThread(settings) as left, WorkerThread(settings) as right:
            payload = {"run_id": stack.run_id, "stubs": STUBS}
            first = post_hook(left, stack.secret, payload, "msg_shared").json()
            second = post_hook(right, stack.secret, payload, "msg_shared").json()
            assert first["job_id"] == second["job_id"], "one job for one webhook id"
            job = wait_job(right, first["job_id"])
            assert httpx.get(f"{left.url}/jobs/{first['job_id']}").json() == job
            healths = [httpx.get(w.url + "/healthz").json() for w in (left, right)]
        assert model.turns_served == 3, "the replay ran once"
    assert job["result"]["verdict"] == "FAILURE_FIXED" and job["attempts"] == 1
    assert healths[0]["day_spent_usd"] == healths[1]["day_spent_usd"] == job["cost_usd"] > 0


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.add(child)
            pending.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


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


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_killed_mid_replay_leaves_no_process_and_its_job_runs_on_restart(
    stack: Stack, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ScriptedModelServer(fixed_script(), per_conversation=True, latency_s=1.5) as model:
        settings: dict[str, Any] = worker_settings(stack, model.base_url).model_dump()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AFR_")}
        env.update(
            {
                "AFR_WORKER_PORT": str(port),
                "AFR_WORKER_DATA_DIR": str(tmp_path / "worker"),
                "AFR_WORKER_COLLECTOR_URL": settings["collector_url"],
                "AFR_WORKER_COLLECTOR_OTLP_ENDPOINT": settings["collector_otlp_endpoint"],
                "AFR_WORKER_COLLECTOR_KEY": stack.running.key,
                "AFR_WORKER_WEBHOOK_SECRET": stack.secret,
                "AFR_WORKER_MODEL_BASE_URL": model.base_url,
                "AFR_WORKER_MODEL_API_KEY": "scripted",
            }
        )
        first = _afr_worker(env)
        try:
            body = json.dumps({"run_id": stack.run_id, "stubs": STUBS}).encode()
            from replay_worker.trigger import signed_headers

            answer = httpx.post(
                url + "/hooks/replay", content=body, headers=signed_headers(stack.secret, body)
            )
            job_id = answer.json()["job_id"]
            wait_until(lambda: model.requests, timeout_s=60, what="the replay to talk to the model")
            family = _descendants(first.pid)
            assert family, "the replay runs in processes of the worker's own"
        finally:
            first.kill()
            first.wait(10)
            assert first.stdout is not None
            first.stdout.close()
        wait_until(
            lambda: not _alive(family),
            timeout_s=10,
            what="the replay processes to die with their worker (never orphaned)",
            interval_s=0.1,
        )

        second = _afr_worker(env)
        try:

            def finished() -> dict[str, Any] | None:
                job: dict[str, Any] = httpx.get(f"{url}/jobs/{job_id}", timeout=10).json()
                return job if job["state"] in ("succeeded", "failed") else None

            job = wait_until(finished, timeout_s=60, what=f"job {job_id} to finish", interval_s=0.2)
            family = _descendants(second.pid)
        finally:
            stop_process(second, signal.SIGTERM)
    assert job["state"] == "succeeded", job
    assert job["attempts"] == 2, "re-queued at start: its worker's pid was gone"
    assert job["result"]["verdict"] == "FAILURE_FIXED"
    assert second.returncode == 0
    wait_until(  # the fork server sees its worker gone: end of file
        lambda: not _alive(family),
        timeout_s=10,
        what="SIGTERM to end every replay process",
        interval_s=0.1,
    )
