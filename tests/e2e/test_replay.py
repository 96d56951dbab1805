"""The sacred path through replay: seeded failing run -> collector -> signed hook -> replay
against a model that gets the amount right -> FAILURE_FIXED, linked replay run, no refund."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import gen_trace_id

import afr_exporter
from afr.incident import RefundDesk, build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer
from afr_exporter import semconv as sc
from replay_worker.app import WorkerThread
from replay_worker.hooks.signature import generate_secret
from replay_worker.settings import WorkerSettings
from replay_worker.trigger import signed_headers
from tests.e2e.workers import scripted_worker_settings
from tests.fakes import free_port
from tests.integration.conftest import Running, start_collector
from tests.waiting import wait_until

STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})


@dataclass
class Stack:
    running: Running
    run_id: str
    desk: RefundDesk
    secret: str


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    thread, running = start_collector(tmp_path / "data")
    desk = RefundDesk()
    trace_id = gen_trace_id()
    try:
        with ScriptedModelServer(failing_script()) as model:
            processor = afr_exporter.install(
                endpoint=running.grpc_endpoint, headers=running.headers()
            )
            asyncio.run(
                run_incident(build_model("responses", model.base_url), desk, trace_id=trace_id)
            )
            assert processor.force_flush(10)
        run_id = trace_id.removeprefix("trace_")
        assert running.run(run_id)["run"]["status"] == "error"
        yield Stack(running, run_id, desk, generate_secret())
    finally:
        thread.stop()


def worker_settings(stack: Stack, model_url: str, **overrides: Any) -> WorkerSettings:
    overrides.setdefault("data_dir", stack.running.settings.data_dir / "worker")
    return scripted_worker_settings(stack.running, stack.secret, model_url, **overrides)


def post_hook(
    worker: WorkerThread,
    secret: str,
    payload: dict[str, Any],
    webhook_id: str = "msg_1",
    **header_overrides: str,
) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = {**signed_headers(secret, body, webhook_id), **header_overrides}
    return httpx.post(worker.url + "/hooks/replay", content=body, headers=headers, timeout=10)


def wait_job(worker: WorkerThread, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        job: dict[str, Any] = httpx.get(f"{worker.url}/jobs/{job_id}", timeout=10).json()
        return job if job["state"] in ("succeeded", "failed") else None

    return wait_until(finished, timeout_s=timeout_s, what=f"job {job_id} to finish", interval_s=0.1)


def test_signed_hook_replays_the_failing_run_to_failure_fixed(stack: Stack) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        answer = post_hook(
            worker, stack.secret, {"run_id": stack.run_id, "stubs": {"refund_order": STUB}}
        )
        assert answer.status_code == 202
        job = wait_job(worker, answer.json()["job_id"])
        requests = model.requests
    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["verdict"] == "FAILURE_FIXED"
    assert result["first_divergence"] == {
        "step": 0,
        "tool": "refund_order",
        "kind": "different_arguments",
        "arguments": {"amount": {"source": "12.OO", "replay": 12.0}},
    }
    assert [c["outcome"] for c in result["tool_calls"]] == ["replay_stub_output"]
    assert stack.desk.refunds == [], "the real refund_order never ran"
    assert requests and all(r.body.get("store") is False for r in requests), (
        "store=False on every call"
    )
    assert job["cost_usd"] > 0

    replay = stack.running.run(result["replay_run_id"])
    summary = replay["run"]
    assert summary["kind"] == "replay"
    assert summary["source_run_id"] == stack.run_id
    assert summary["status"] == "ok"
    (root,) = [s for s in replay["spans"] if s["parent_span_id"] == ""]
    assert [link["trace_id"] for link in root["links"]] == [stack.run_id]
    assert json.loads(root["attributes"]["afr.trace.metadata"])["afr.verdict"] == "FAILURE_FIXED"
    # The verdict in the OTel GenAI vocabulary, on the replay's root, as stored.
    assert stack.running.evaluations(result["replay_run_id"]) == [
        {
            sc.GEN_AI_EVALUATION_NAME: sc.EVALUATION_REPLAY_VERDICT,
            sc.GEN_AI_EVALUATION_SCORE_LABEL: "FAILURE_FIXED",
            sc.GEN_AI_EVALUATION_SCORE_VALUE: "1.0",
            sc.GEN_AI_EVALUATION_EXPLANATION: "the replay ran clean (the source failed)",
        }
    ]
    assert sc.METADATA_EVALUATIONS not in json.loads(root["attributes"]["afr.trace.metadata"])
    names = {s["name"] for s in replay["spans"]}
    assert {"replay.replay_stub_output", "replay.verdict"} <= names
    listed = stack.running.api("/api/v1/runs", kind="replay").json()["runs"]
    assert [r["run_id"] for r in listed] == [result["replay_run_id"]]
    # Findable by the source's workflow, with the source's group id and trace metadata.
    by_workflow = stack.running.api("/api/v1/runs", kind="replay", workflow="refund-desk")
    assert [r["run_id"] for r in by_workflow.json()["runs"]] == [result["replay_run_id"]]
    assert root["attributes"]["gen_ai.conversation.id"] == "conv_refund_desk_demo"
    assert json.loads(root["attributes"]["afr.trace.metadata"])["customer"] == "cust_42"


def test_a_call_with_no_captured_outcome_and_no_stub_is_inconclusive(stack: Stack) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        answer = post_hook(worker, stack.secret, {"run_id": stack.run_id})
        job = wait_job(worker, answer.json()["job_id"])
        tool_messages = [
            item
            for request in model.requests
            for item in request.body.get("input", [])
            if isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and item.get("call_id") == "call_refund_1"
        ]
    result = job["result"]
    # The corrected call (amount 12.0) was never made in the source: its result is unknown,
    # so whether the failure is fixed is unknown too.
    assert result["verdict"] == "INCONCLUSIVE"
    assert "refund_order" in result["reason"]
    assert [d["tool"] for d in result["unavailable"]] == ["refund_order"]
    assert result["final_output"], "the run still completes"
    assert "unavailable" in tool_messages[-1]["output"], (
        "the model is told the output is unavailable"
    )
    assert stack.desk.refunds == []
    replay = stack.running.run(result["replay_run_id"])
    assert any(s["name"] == "replay.unavailable" for s in replay["spans"])
    # An unknown outcome has no score: the label alone says it, the reason says why.
    (evaluation,) = stack.running.evaluations(result["replay_run_id"])
    assert evaluation == {
        sc.GEN_AI_EVALUATION_NAME: sc.EVALUATION_REPLAY_VERDICT,
        sc.GEN_AI_EVALUATION_SCORE_LABEL: "INCONCLUSIVE",
        sc.GEN_AI_EVALUATION_EXPLANATION: result["reason"],
    }


def test_bad_signatures_do_no_work_and_webhook_ids_are_idempotent(stack: Stack) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        payload = {"run_id": stack.run_id, "stubs": {"refund_order": STUB}}
        assert post_hook(worker, generate_secret(), payload).status_code == 401, "wrong secret"
        assert (
            post_hook(
                worker, stack.secret, payload, **{"webhook-timestamp": str(int(time.time()) - 3600)}
            ).status_code
            == 401
        )
        assert (
            post_hook(worker, stack.secret, payload, **{"webhook-signature": "v1,AAAA"}).status_code
            == 401
        )
        unsigned = httpx.post(worker.url + "/hooks/replay", json=payload)
        assert unsigned.status_code == 401
        assert stack.secret not in unsigned.text
        assert model.requests == [], "no replay ran"
        first = post_hook(worker, stack.secret, payload, webhook_id="msg_same")
        again = post_hook(worker, stack.secret, payload, webhook_id="msg_same")
        assert first.json()["job_id"] == again.json()["job_id"]
        wait_job(worker, first.json()["job_id"])
        assert (
            post_hook(worker, stack.secret, {"run": "x"}, webhook_id="msg_bad").status_code == 400
        )
        assert httpx.get(worker.url + "/jobs/job_nope").status_code == 404


def test_unknown_run_fails_the_job_with_404(stack: Stack) -> None:
    settings = worker_settings(stack, "http://127.0.0.1:9/v1", run_wait_s=0.5)
    with WorkerThread(settings) as worker:
        job = wait_job(
            worker, post_hook(worker, stack.secret, {"run_id": "f" * 32}).json()["job_id"]
        )
    assert job["state"] == "failed"
    assert job["error"]["status"] == 404


def test_collector_unreachable_fails_the_job_with_a_clear_reason(stack: Stack) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    settings = worker_settings(stack, "http://127.0.0.1:9/v1", collector_url=dead)
    with WorkerThread(settings) as worker:
        job = wait_job(
            worker, post_hook(worker, stack.secret, {"run_id": stack.run_id}).json()["job_id"]
        )
    assert job["state"] == "failed"
    assert job["error"]["status"] == 503
    assert "collector unreachable" in job["error"]["reason"]


def test_budget_exhausted_sends_no_request(stack: Stack) -> None:
    with ScriptedModelServer(fixed_script()) as model:
        settings = worker_settings(stack, model.base_url, job_budget_usd=0.000001)
        with WorkerThread(settings) as worker:
            job = wait_job(
                worker, post_hook(worker, stack.secret, {"run_id": stack.run_id}).json()["job_id"]
            )
        assert model.requests == []
    assert job["state"] == "failed"
    assert job["error"]["status"] == 402
    assert "budget" in job["error"]["reason"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_fixture_from_a_stored_run_has_what_a_replay_needs(stack: Stack, api: str) -> None:
    from replay_worker.client import CollectorClient
    from replay_worker.replay.fixture import Fixture, build_fixture

    run_id = stack.run_id
    if api == "chat":
        trace_id = gen_trace_id()
        with ScriptedModelServer(failing_script()) as model:
            processor = afr_exporter.install(
                endpoint=stack.running.grpc_endpoint, headers=stack.running.headers()
            )
            asyncio.run(run_incident(build_model("chat", model.base_url), trace_id=trace_id))
            assert processor.force_flush(10)
        run_id = trace_id.removeprefix("trace_")
        stack.running.run(run_id)
    run = asyncio.run(CollectorClient(stack.running.http_url, stack.running.key).get_run(run_id))
    fixture = build_fixture(run)
    assert fixture.source_status == "error"
    assert isinstance(fixture.input, str) and fixture.input.startswith("I was charged twice")
    assert fixture.max_turns == 10, "the source's own bound (the SDK default)"
    assert fixture.group_id == "conv_refund_desk_demo"
    assert fixture.trace_metadata == {"customer": "cust_42"}
    assert fixture.entry_agent == "Triage Agent"
    triage, refund = fixture.agents["Triage Agent"], fixture.agents["Refund Agent"]
    assert triage.handoffs == ["Refund Agent"]
    assert triage.instructions is not None and triage.instructions.startswith(
        "You are the triage agent"
    )
    assert refund.model == "gpt-4.1-mini"
    (tool,) = refund.tools
    assert tool["name"] == "refund_order"
    assert tool["parameters"]["properties"]["amount"]["type"] == "number"
    (call,) = fixture.tool_calls
    # The outcome the model saw: the SDK's failure text, and the failure itself.
    assert (call.tool, call.call_id, call.output, call.error, call.agent) == (
        "refund_order",
        "call_refund_1",
        "An error occurred while running the tool. Please try again.",
        "Error running tool (non-fatal)",
        "Refund Agent",
    )
    assert json.loads(call.arguments)["amount"] == "12.OO"
    assert fixture.guardrails == [
        {"name": "abuse_screen", "agent": "Triage Agent", "triggered": False}
    ]
    # The model calls in order, as the SDK's output items, whichever API made them.
    assert fixture.model_calls is not None
    assert [(c.agent, c.api, c.turn) for c in fixture.model_calls] == [
        ("Triage Agent", "responses" if api == "responses" else "chat_completions", 1),
        ("Refund Agent", "responses" if api == "responses" else "chat_completions", 2),
        ("Refund Agent", "responses" if api == "responses" else "chat_completions", 3),
    ]
    handoff, refunding, _ = (c.output or [] for c in fixture.model_calls)
    assert [i["name"] for i in handoff] == ["transfer_to_refund_agent"]
    assert [(i["call_id"], json.loads(i["arguments"])["amount"]) for i in refunding] == [
        ("call_refund_1", "12.OO")
    ]
    assert all((c.usage["output_tokens"] or 0) > 0 for c in fixture.model_calls)
    document = json.loads(json.dumps(fixture.to_json()))
    assert document["version"] == "afr.fixture/3"
    assert Fixture.from_json(document) == fixture


def test_chat_completions_and_a_model_chosen_per_request(stack: Stack) -> None:
    with ScriptedModelServer(fixed_script()) as model:
        settings = worker_settings(stack, model.base_url, model_api="chat")
        with WorkerThread(settings) as worker:
            payload = {"run_id": stack.run_id, "model": "gpt-4.1", "stubs": {"refund_order": STUB}}
            job = wait_job(worker, post_hook(worker, stack.secret, payload).json()["job_id"])
        requests = model.requests
    assert job["result"]["verdict"] == "FAILURE_FIXED"
    assert {r.path for r in requests} == {"/v1/chat/completions"}
    assert {r.body["model"] for r in requests} == {"gpt-4.1"}
    assert all(r.body.get("store") is False for r in requests)


def test_afr_replay_command_prints_the_verdict(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from afr.cli import main

    monkeypatch.setenv("AFR_WORKER_WEBHOOK_SECRET", stack.secret)
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        code = main(
            ["replay", stack.run_id, "--worker", worker.url, "--stub", f"refund_order={STUB}"]
        )
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(captured.out)["result"]["verdict"] == "FAILURE_FIXED"
    assert "verdict FAILURE_FIXED" in captured.err


def test_oversized_hook_is_refused_before_verification(stack: Stack) -> None:
    with WorkerThread(worker_settings(stack, "http://127.0.0.1:9/v1")) as worker:
        answer = httpx.post(
            worker.url + "/hooks/replay",
            content=b"x" * (2 * 1024 * 1024),
            headers={
                "webhook-id": "m",
                "webhook-timestamp": str(int(time.time())),
                "webhook-signature": "v1,AAAA",
            },
        )
    assert answer.status_code == 413


def test_lenient_policy_is_available_on_request_and_marks_the_verdict_approximate(
    stack: Stack,
) -> None:
    with (
        ScriptedModelServer(fixed_script()) as model,
        WorkerThread(worker_settings(stack, model.base_url)) as worker,
    ):
        answer = post_hook(worker, stack.secret, {"run_id": stack.run_id, "policy": "lenient"})
        job = wait_job(worker, answer.json()["job_id"])
        refused = post_hook(
            worker, stack.secret, {"run_id": stack.run_id, "policy": "any"}, webhook_id="msg_2"
        )
    result = job["result"]
    # The corrected call (12.0) is answered with the original call's captured outcome.
    assert [c["outcome"] for c in result["tool_calls"]] == ["captured_error"]
    assert (result["verdict"], result["approximate"]) == ("STILL_FAILING", True)
    (evaluation,) = stack.running.evaluations(result["replay_run_id"])
    assert evaluation[sc.GEN_AI_EVALUATION_SCORE_LABEL] == "STILL_FAILING"
    assert evaluation[sc.GEN_AI_EVALUATION_SCORE_VALUE] == "0.0"
    assert evaluation[sc.GEN_AI_EVALUATION_EXPLANATION] == (
        result["reason"] + " (decided with a lenient match)"
    )
    assert refused.status_code == 400
