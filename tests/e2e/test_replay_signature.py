"""The replay hook (and ``afr replay --signature``) given a failure signature instead of a run:
it replays the newest production run that failed that way, through the real collector, worker
and Runner; a signature nobody failed with, a malformed one, or a collector that cannot say
is refused before any job is queued or model called."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from agents import gen_trace_id

import afr_exporter
from afr.incident import RefundDesk, build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from replay_worker.app import WorkerThread
from tests.e2e.test_replay import STUB, Stack, post_hook, stack, wait_job, worker_settings
from tests.fakes import free_port

__all__ = ["stack"]  # the fixture, shared with test_replay.py

pytestmark = pytest.mark.slow


def _capture_again(stack: Stack) -> str:
    """The same incident once more, a new production run that fails the same way."""
    trace_id = gen_trace_id()
    with ScriptedModelServer(failing_script()) as model:
        processor = afr_exporter.install(
            endpoint=stack.running.grpc_endpoint, headers=stack.running.headers()
        )
        asyncio.run(
            run_incident(build_model("responses", model.base_url), RefundDesk(), trace_id=trace_id)
        )
        assert processor.force_flush(10)
    run_id = trace_id.removeprefix("trace_")
    assert stack.running.run(run_id)["run"]["status"] == "error"
    return run_id


def _signature(stack: Stack, run_id: str) -> str:
    signature = stack.running.run(run_id)["run"]["signature"]
    assert isinstance(signature, str) and len(signature) == 16
    return signature


def _jobs(worker: WorkerThread) -> int:
    health: dict[str, Any] = httpx.get(worker.url + "/healthz", timeout=10).json()
    return sum((health.get("jobs") or {}).values())


def test_a_signature_replays_its_newest_failing_run(stack: Stack) -> None:
    signature = _signature(stack, stack.run_id)
    newest = _capture_again(stack)
    assert _signature(stack, newest) == signature, "the same failure, the same signature"
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        payload = {"signature": signature.upper(), "stubs": {"refund_order": STUB}}
        answer = post_hook(worker, stack.secret, payload, webhook_id="msg_sig")
        assert answer.status_code == 202, answer.text
        accepted = answer.json()
        assert accepted["run_id"] == newest
        job = wait_job(worker, accepted["job_id"])
        assert job["state"] == "succeeded", job
        assert job["run_id"] == newest
        assert job["result"]["verdict"] == "FAILURE_FIXED"
        replay = stack.running.run(job["result"]["replay_run_id"])["run"]
        assert replay["source_run_id"] == newest
        # The same hook again, after a newer run failed the same way: the same job.
        newer = _capture_again(stack)
        again = post_hook(worker, stack.secret, payload, webhook_id="msg_sig")
        assert again.status_code == 202
        assert (again.json()["job_id"], again.json()["run_id"]) == (accepted["job_id"], newest)
        # A new hook picks the newer run; the replay (kind replay, ok) never counts.
        other = post_hook(worker, stack.secret, payload, webhook_id="msg_sig_2")
        assert other.json()["run_id"] == newer
        wait_job(worker, other.json()["job_id"])


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        ({"signature": "nope"}, 400, "signature must be a failure signature: 16 hex digits"),
        ({"signature": 1234567890123456}, 400, "signature must be a failure signature"),
        ({"signature": "0123456789abcdef0"}, 400, "16 hex digits"),
        ({}, 400, "give exactly one of run_id and signature"),
        ({"run_id": "a" * 32, "signature": "0123456789abcdef"}, 400, "exactly one"),
        ({"signature": "0123456789abcdef"}, 404, "failed with signature 0123456789abcdef"),
        (
            {"signature": "0123456789abcdef", "fork": {"step": "llm:1", "overrides": []}},
            404,
            "no production run of the last 30 days",
        ),
    ],
)
def test_bad_or_unknown_signatures_queue_nothing(
    stack: Stack, payload: dict[str, Any], status: int, says: str
) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        answer = post_hook(worker, stack.secret, payload)
        assert answer.status_code == status, answer.text
        assert says in answer.json()["error"]
        assert _jobs(worker) == 0 and model.requests == []


def test_a_collector_that_cannot_say_is_a_503_and_queues_nothing(stack: Stack) -> None:
    signature = _signature(stack, stack.run_id)
    dead = f"http://127.0.0.1:{free_port()}"
    with WorkerThread(
        worker_settings(stack, "http://127.0.0.1:9/v1", collector_url=dead)
    ) as worker:
        answer = post_hook(worker, stack.secret, {"signature": signature})
        assert answer.status_code == 503, answer.text
        assert "collector unreachable" in answer.json()["error"]
        assert _jobs(worker) == 0
    # A key of another project: its failures are not this project's (404, not a guess).
    other = stack.running.collector.keys.create("elsewhere")
    with WorkerThread(
        worker_settings(stack, "http://127.0.0.1:9/v1", collector_key=other)
    ) as worker:
        answer = post_hook(worker, stack.secret, {"signature": signature})
        assert answer.status_code == 404, answer.text
        assert _jobs(worker) == 0


def test_afr_replay_signature_names_the_run_and_prints_the_verdict(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from afr.cli import main

    signature = _signature(stack, stack.run_id)
    monkeypatch.setenv("AFR_WORKER_WEBHOOK_SECRET", stack.secret)
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        code = main(
            [
                *("replay", "--signature", signature, "--worker", worker.url),
                *("--stub", f"refund_order={STUB}"),
            ]
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert json.loads(captured.out)["run_id"] == stack.run_id
        assert f"replaying run {stack.run_id}, the newest with {signature}" in captured.err
        assert "verdict FAILURE_FIXED" in captured.err
        for argv in (
            ["replay", "--worker", worker.url],
            ["replay", stack.run_id, "--signature", signature, "--worker", worker.url],
        ):
            assert main(argv) == 2
            assert "give one of a run id and --signature" in capsys.readouterr().err
        assert main(["replay", "--signature", "0123456789abcdef", "--worker", worker.url]) == 1
        assert "HTTP 404" in capsys.readouterr().err
        assert _jobs(worker) == 1
