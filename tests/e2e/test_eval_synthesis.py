"""The sacred path's last step: a FAILURE_FIXED replay becomes an eval file.

The seeded failing run is captured through a real collector and replayed with the real
engine (its replays exported to the same collector, as the worker's are): to FAILURE_FIXED
(a model that sends the amount as a number, with a labelled stub), STILL_FAILING (the same
malformed call, answered with its captured error) and INCONCLUSIVE (the corrected call, no
stub). Synthesis reads them back through the collector's read API, as the worker does.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import gen_trace_id, set_trace_processors

import afr_exporter
from afr.incident import RefundDesk, build_model, failing_script, fixed_script, run_incident
from afr.scripted_model import ScriptedModelServer, ScriptedTurn
from replay_worker.app import WorkerThread
from replay_worker.client import CollectorClient
from replay_worker.evals.assertions import Observed, check_all
from replay_worker.evals.contract import (
    EvalDocument,
    HandoffTaken,
    MaxTurns,
    NoSpanErrored,
    ReplaySpec,
    ToolArgument,
    ToolCalled,
    load_eval,
)
from replay_worker.evals.synthesis import (
    SynthesisError,
    fetch_runs,
    observed_from_run,
    synthesize,
)
from replay_worker.hooks.signature import generate_secret
from replay_worker.replay.engine import ReplayResult, run_replay
from replay_worker.replay.fixture import Fixture, build_fixture
from replay_worker.settings import WorkerSettings
from replay_worker.trigger import signed_headers
from tests.integration.conftest import Running, start_collector

STUB = json.dumps({"status": "refunded", "order_id": "A-1001", "amount": 12.0})


@dataclass
class Runs:
    running: Running
    source_id: str
    fixed: ReplayResult
    still_failing: ReplayResult
    inconclusive: ReplayResult

    def client(self) -> CollectorClient:
        return CollectorClient(self.running.http_url, self.running.key)

    def pair(self, replay_run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(source, replay) as the worker reads them."""
        return asyncio.run(fetch_runs(self.client(), replay_run_id, wait_s=5))

    def stored(self, replay_run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(source, replay) straight from the read API, whatever the replay's verdict."""
        return self.running.run(self.source_id), self.running.run(replay_run_id)


def _replay(fixture: Fixture, script: list[ScriptedTurn], **options: Any) -> ReplayResult:
    with ScriptedModelServer(script) as server:
        model = build_model("responses", server.base_url)
        return asyncio.run(run_replay(fixture, lambda name: model, **options))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    thread, running = start_collector(tmp_path_factory.mktemp("evals") / "data")
    processor = afr_exporter.install(endpoint=running.grpc_endpoint, headers=running.headers())
    try:
        trace_id = gen_trace_id()
        with ScriptedModelServer(failing_script()) as server:
            asyncio.run(
                run_incident(
                    build_model("responses", server.base_url), RefundDesk(), trace_id=trace_id
                )
            )
        assert processor.force_flush(10)
        source_id = trace_id.removeprefix("trace_")
        fixture = build_fixture(running.run(source_id))
        fixed = _replay(fixture, fixed_script(), stub_outputs={"refund_order": STUB})
        still_failing = _replay(fixture, failing_script())
        inconclusive = _replay(fixture, fixed_script())
        assert processor.force_flush(10)
        assert (fixed.verdict, still_failing.verdict, inconclusive.verdict) == (
            "FAILURE_FIXED",
            "STILL_FAILING",
            "INCONCLUSIVE",
        )
        for result in (fixed, still_failing, inconclusive):
            running.run(result.replay_run_id)  # stored and readable
        yield Runs(running, source_id, fixed, still_failing, inconclusive)
    finally:
        set_trace_processors([])
        processor.shutdown()
        thread.stop()


def test_a_fixed_replay_gives_an_eval_of_the_correction_and_the_structure(runs: Runs) -> None:
    source, replay = runs.pair(runs.fixed.replay_run_id)
    document = synthesize(source, replay)

    assert [a.model_dump(mode="json") for a in document.assertions] == [
        a.model_dump(mode="json")
        for a in (
            # The correction: "12.OO" became the number 12.0, at /amount.
            ToolArgument(tool="refund_order", pointer="/amount", equals=12.0, call="any"),
            # The structure: called once (a loop of 4 fails), the handoff, 3 model calls + 2.
            ToolCalled(tool="refund_order", min_count=1, max_count=3),
            HandoffTaken(from_agent="Triage Agent", to_agent="Refund Agent"),
            MaxTurns(turns=5),
            NoSpanErrored(),
        )
    ]
    assert document.name == "refund-desk: refund_order /amount=12.0 corrected"
    # It replays the source, the way the fixing replay did.
    assert document.fixture == json.loads(json.dumps(build_fixture(source).to_json()))
    assert document.to_fixture().tool_calls[0].error == "Error running tool (non-fatal)"
    assert document.replay == ReplaySpec(stub_outputs={"refund_order": STUB}, policy="exact")
    seconds, nanos = divmod(replay["run"]["start_ns"], 1_000_000_000)  # exact: no float
    started = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=nanos // 1000)
    assert document.provenance.model_dump() == {
        "source_run_id": runs.source_id,
        "replay_run_id": runs.fixed.replay_run_id,
        "created_at": started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }

    # Deterministic: the same runs, read again, give the same bytes and id.
    again = synthesize(*runs.pair(runs.fixed.replay_run_id))
    assert again.to_json_text() == document.to_json_text()
    assert again.id == document.id

    # Every assertion holds on the fixing replay, as stored and as the engine saw it...
    assert all(r.passed for r in check_all(document.assertions, observed_from_run(replay)))
    assert all(
        r.passed for r in check_all(document.assertions, Observed.from_replay(runs.fixed, 0))
    )
    # ...and the eval catches the original failure.
    failed = [
        r.kind for r in check_all(document.assertions, observed_from_run(source)) if not r.passed
    ]
    assert failed == ["tool_argument", "no_span_errored"]


def test_the_synthesized_eval_passes_a_fixing_model_and_fails_the_failing_one(runs: Runs) -> None:
    document = synthesize(*runs.pair(runs.fixed.replay_run_id))

    def run(script: list[ScriptedTurn]) -> list[str]:
        result = _replay(
            document.to_fixture(),
            script,
            stub_outputs=document.replay.stub_outputs,
            policy=document.replay.policy,
        )
        return [
            r.kind
            for r in check_all(document.assertions, Observed.from_replay(result, 0))
            if not r.passed
        ]

    assert run(fixed_script()) == []
    assert run(failing_script()) == ["tool_argument", "no_span_errored"]


def test_anything_but_a_clean_failure_fixed_replay_is_refused_with_the_reason(runs: Runs) -> None:
    with pytest.raises(SynthesisError) as still:
        synthesize(*runs.stored(runs.still_failing.replay_run_id))
    assert still.value.verdict == "STILL_FAILING"
    assert str(still.value) == (
        f"replay {runs.still_failing.replay_run_id} has verdict STILL_FAILING, not "
        "FAILURE_FIXED: the replay failed: refund_order (captured_error)"
    )
    with pytest.raises(SynthesisError) as unknown:
        synthesize(*runs.stored(runs.inconclusive.replay_run_id))
    assert unknown.value.verdict == "INCONCLUSIVE"
    assert "not FAILURE_FIXED: no captured outcome and no replay_stub_output for: refund_order" in (
        unknown.value.reason
    )
    # Reading the runs refuses as early: before the source is read.
    with pytest.raises(SynthesisError, match="has verdict STILL_FAILING"):
        runs.pair(runs.still_failing.replay_run_id)

    source, replay = runs.pair(runs.fixed.replay_run_id)
    with pytest.raises(SynthesisError, match="is a capture run, not a replay"):
        synthesize(source, source)
    _, other_replay = runs.stored(runs.still_failing.replay_run_id)
    with pytest.raises(SynthesisError) as mismatched:
        synthesize(other_replay, replay)
    assert str(mismatched.value) == (
        f"run {runs.still_failing.replay_run_id} is not the source of replay "
        f"{runs.fixed.replay_run_id} (its source is {runs.source_id})"
    )
    with pytest.raises(SynthesisError, match="approximately"):
        synthesize(source, _edited_verdict(replay, approximate=True))

    unlinked = copy.deepcopy(replay)
    unlinked["run"]["source_run_id"] = ""
    for span in unlinked["spans"]:
        if not span["parent_span_id"]:
            metadata = json.loads(span["attributes"]["afr.trace.metadata"])
            del metadata["afr.source_run_id"]
            span["attributes"]["afr.trace.metadata"] = json.dumps(metadata)
    with pytest.raises(SynthesisError, match="is not linked to a source run"):
        synthesize(source, unlinked)


def _edited_verdict(replay: dict[str, Any], **data: Any) -> dict[str, Any]:
    edited = copy.deepcopy(replay)
    for span in edited["spans"]:
        if span["name"] == "replay.verdict":
            current = json.loads(span["attributes"]["afr.custom.data"])
            span["attributes"]["afr.custom.data"] = json.dumps({**current, **data})
    return edited


def test_afr_eval_synthesize_writes_one_file_per_eval(
    runs: Runs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from afr.cli import main
    from afr.local import LOCAL_KEY_FILE

    # The key is found as `afr replay` finds the secret: in the local data directory.
    data_dir = tmp_path / "afr-data"
    data_dir.mkdir()
    (data_dir / LOCAL_KEY_FILE).write_text(runs.running.key + "\n")
    monkeypatch.delenv("AFR_WORKER_COLLECTOR_KEY", raising=False)
    monkeypatch.setenv("AFR_WORKER_COLLECTOR_URL", runs.running.http_url)
    monkeypatch.setenv("AFR_WORKER_EVALS_DIR", str(tmp_path / "evals"))
    command = ["eval", "synthesize", runs.fixed.replay_run_id, "--data-dir", str(data_dir)]

    assert main(command) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.parent == tmp_path / "evals"
    document = load_eval(path)
    assert path.name == f"{document.id}.json"
    assert document == synthesize(*runs.pair(runs.fixed.replay_run_id))
    first = path.read_bytes()

    assert main([*command, "-o", str(tmp_path / "evals")]) == 0
    assert capsys.readouterr().out.strip() == str(path)
    assert path.read_bytes() == first
    assert [p.name for p in (tmp_path / "evals").iterdir()] == [path.name]

    assert (
        main(["eval", "synthesize", runs.still_failing.replay_run_id, "--data-dir", str(data_dir)])
        == 1
    )
    refused = capsys.readouterr()
    assert "refused" in refused.err and "STILL_FAILING" in refused.err
    assert refused.out == ""
    assert main(["eval", "synthesize", "nope", "--data-dir", str(data_dir)]) == 2


def post(
    worker: WorkerThread, secret: str, payload: dict[str, Any], webhook_id: str
) -> httpx.Response:
    body = json.dumps(payload).encode()
    return httpx.post(
        worker.url + "/hooks/evals",
        content=body,
        headers=signed_headers(secret, body, webhook_id),
        timeout=30,
    )


def test_the_signed_eval_hook_writes_the_eval(runs: Runs, tmp_path: Path) -> None:
    secret = generate_secret()
    settings = WorkerSettings(
        port=0,
        collector_url=runs.running.http_url,
        collector_otlp_endpoint=runs.running.grpc_endpoint,
        collector_key=runs.running.key,
        webhook_secret=secret,
        model_base_url="http://127.0.0.1:9/v1",
        model_api_key="unused",
        data_dir=tmp_path / "worker",
        evals_dir=tmp_path / "evals",
        run_wait_s=0.5,
        concurrency=1,
    )
    fixed = {"replay_run_id": runs.fixed.replay_run_id}
    with WorkerThread(settings) as worker:
        unsigned = httpx.post(worker.url + "/hooks/evals", json=fixed, timeout=10)
        wrong = post(worker, generate_secret(), fixed, "msg_wrong")
        stale = httpx.post(
            worker.url + "/hooks/evals",
            content=json.dumps(fixed).encode(),
            headers={
                **signed_headers(secret, json.dumps(fixed).encode(), "msg_stale"),
                "webhook-timestamp": str(int(time.time()) - 3600),
            },
            timeout=10,
        )
        assert (unsigned.status_code, wrong.status_code, stale.status_code) == (401, 401, 401)
        assert not (tmp_path / "evals").exists(), "a refused hook does no work"

        created = post(worker, secret, fixed, "msg_1")
        again = post(worker, secret, fixed, "msg_1")  # a re-delivery
        other = post(
            worker, secret, {"replay_run_id": "trace_" + runs.fixed.replay_run_id}, "msg_2"
        )
        still = post(worker, secret, {"replay_run_id": runs.still_failing.replay_run_id}, "msg_3")
        missing = post(worker, secret, {"replay_run_id": "f" * 32}, "msg_4")
        malformed = post(worker, secret, {"run_id": runs.fixed.replay_run_id}, "msg_5")

    assert created.status_code == 201, created.text
    answer = created.json()
    path = Path(answer["path"])
    assert path == tmp_path / "evals" / f"{answer['eval_id']}.json"
    document = load_eval(path)
    assert document.id == answer["eval_id"]
    assert EvalDocument.model_validate(answer["eval"]) == document
    assert document == synthesize(*runs.pair(runs.fixed.replay_run_id))
    assert (again.status_code, again.json()) == (201, answer)
    assert (other.status_code, other.json()) == (201, answer)
    assert [p.name for p in (tmp_path / "evals").iterdir()] == [path.name]

    assert still.status_code == 422
    assert still.json()["verdict"] == "STILL_FAILING"
    assert (
        "not FAILURE_FIXED: the replay failed: refund_order (captured_error)"
        in still.json()["error"]
    )
    assert missing.status_code == 404
    assert malformed.status_code == 400


def test_assist_keeps_only_valid_proposals_that_hold_and_pays_through_the_ledger(
    runs: Runs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from afr.cli import main
    from replay_worker.state import StateStore, utc_day

    def argument(pointer: str, **check: Any) -> dict[str, Any]:
        checks = {"equals_json": None, "matches": None, "type": None, **check}
        return {
            "kind": "tool_argument",
            "tool": "refund_order",
            "pointer": pointer,
            "call": "any",
            **checks,
        }

    proposals = [
        argument("/order_id", matches=r"^A-\d+$"),  # valid, holds: kept
        {"kind": "guardrail", "name": "abuse_screen", "triggered": False},  # kept
        {"kind": "tool_not_called", "tool": "refund_order"},  # does not hold
        argument("amount", type="number"),  # not a JSON Pointer
        argument("/amount", equals_json="12", type="number"),  # two checks
        {"kind": "max_turns", "turns": 5},  # already in the eval
    ]
    monkeypatch.setenv("AFR_WORKER_COLLECTOR_URL", runs.running.http_url)
    monkeypatch.setenv("AFR_WORKER_COLLECTOR_KEY", runs.running.key)
    monkeypatch.setenv("AFR_WORKER_MODEL_API_KEY", "scripted")
    monkeypatch.setenv("AFR_WORKER_MODEL_API", "responses")
    monkeypatch.setenv("AFR_WORKER_DATA_DIR", str(tmp_path / "worker"))
    with ScriptedModelServer([ScriptedTurn(text=json.dumps({"assertions": proposals}))]) as model:
        monkeypatch.setenv("AFR_WORKER_MODEL_BASE_URL", model.base_url)
        code = main(
            [
                "eval",
                "synthesize",
                runs.fixed.replay_run_id,
                "--assist",
                "-o",
                str(tmp_path / "evals"),
            ]
        )
        requests = model.requests
    captured = capsys.readouterr()
    assert code == 0, captured.err

    plain = synthesize(*runs.pair(runs.fixed.replay_run_id))
    document = load_eval(Path(captured.out.strip()))
    added = [a.model_dump(mode="json") for a in document.assertions[len(plain.assertions) :]]
    assert document.assertions[: len(plain.assertions)] == plain.assertions
    assert added == [
        {
            "kind": "tool_argument",
            "tool": "refund_order",
            "pointer": "/order_id",
            "matches": r"^A-\d+$",
            "call": "any",
        },
        {"kind": "guardrail", "name": "abuse_screen", "triggered": False},
    ]
    assert document.id != plain.id
    assert "--assist kept 2 of 6 proposed assertions" in captured.err
    assert "does not hold on the fixing replay" in captured.err
    assert "String should match pattern" in captured.err
    assert "exactly one of equals, matches or type" in captured.err
    assert "already in the eval" in captured.err

    # One Structured Outputs request with a strict schema, store=False, paid through the ledger.
    (request,) = requests
    text_format = request.body["text"]["format"]
    assert (text_format["type"], text_format["strict"]) == ("json_schema", True)
    assert request.body["store"] is False
    store = StateStore(tmp_path / "worker" / "state.sqlite")
    try:
        spend = store.day(utc_day(time.time()))
    finally:
        store.close()
    assert spend.requests == 1 and spend.spent_usd > 0
