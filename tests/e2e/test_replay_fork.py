"""What-if replay: forks of captured runs, end to end.

Every source run of the travel desk (``tests/booking_agent.py``) is captured for real (the
real ``Runner`` and the SDK's OpenAI model classes against the scripted model server, afr's
exporter, a real collector) and forked through the real worker: the signed hook with a
``fork`` object, a replay process, the recorded-model stand-in answering the prefix, the
scripted model live from the step on (``per_conversation``: it answers by the number of
model answers in the request's history, so a live call after a recorded prefix gets the
script's turn for that position). One collector, one scripted model server and one worker
per model API serve the whole module.

- The matrix: override kinds at four step positions (the first model call, a middle tool
  call, the last turn, a handoff) on both model APIs, each with its verdict, what each
  stand-in did, its first divergence (never before the step), how many model calls were
  recorded and how many were live (counted at the model server and in the job's ledger).
- Prefix determinism, as a property: random captured runs, each forked at random steps
  with no override and the source's own (deterministic) script, give the verdict of a
  replay that behaves like its source, no divergence, and no model request in the prefix.
- Refusals: a fork that cannot be made is a 422 naming what is wrong, before any job or
  model call; ``afr replay --from`` exits non-zero with the message.
- A FAILURE_FIXED fork synthesizes an eval that forks the same way, and passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Model, RunConfig, Runner, gen_trace_id
from agents.tracing import set_trace_processors

import afr_exporter
from afr.scripted_model import ScriptedModelServer, ScriptedToolCall, ScriptedTurn
from afr_exporter import semconv as sc
from replay_worker.app import WorkerThread
from replay_worker.client import CollectorClient
from replay_worker.evals.contract import EvalDocument
from replay_worker.evals.runner import run_eval
from replay_worker.hooks.models import Fork
from replay_worker.hooks.signature import generate_secret
from replay_worker.replay.engine import run_fork
from replay_worker.replay.fixture import build_fixture
from replay_worker.trigger import signed_headers
from tests.booking_agent import (
    BOOKING_INPUT,
    BOOKING_INSTRUCTIONS,
    INTAKE_INSTRUCTIONS,
    INVALID_DATE,
    TRAVEL_DATE,
    WRONG_DATE,
    BookingDesk,
    ModelApi,
    SourceKind,
    build_agents,
    build_model,
    replay_script,
    stub_outputs,
)
from tests.e2e.test_replay_matrix import Captures
from tests.e2e.workers import scripted_worker_settings
from tests.integration.conftest import Running, start_collector
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

APIS: tuple[ModelApi, ...] = ("responses", "chat")
CO, OO, OE, STUB, UNAVAILABLE = (
    "captured_output",
    "override_output",
    "override_error",
    "replay_stub_output",
    "unavailable",
)
BOOKED = stub_outputs()["book_flight"]
RIGHT_BOOKING = json.dumps({"flight_id": "FL-100", "passenger_count": 2, "date": TRAVEL_DATE})
JSON_ONLY = " Answer with the BookingReply JSON only."
ROUTE_BOOKINGS = " Flight bookings always go to the Booking Agent."
NEW_INPUT = "Please book 2 window seats on the first flight from SFO to JFK on 2026-12-05."


# --- the module's stack --------------------------------------------------------------------
@dataclass
class Stack:
    running: Running
    captures: Captures
    model: ScriptedModelServer
    secret: str
    root: Path
    workers: dict[ModelApi, WorkerThread] = field(default_factory=dict)

    def worker(self, api: ModelApi) -> WorkerThread:
        """One worker per model API, started when first needed."""
        if api not in self.workers:
            settings = scripted_worker_settings(
                self.running,
                self.secret,
                self.model.base_url,
                self.root / f"worker-{api}",
                model_api=api,
                evals_dir=self.root / "evals",
                sweep_enabled=False,
                run_wait_s=0.5,  # every run is stored before it is forked; an unknown one: 404
            )
            self.workers[api] = WorkerThread(settings).__enter__()
        return self.workers[api]

    def post(self, api: ModelApi, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = signed_headers(self.secret, body, "msg_" + uuid.uuid4().hex)
        return httpx.post(
            self.worker(api).url + "/hooks/replay", content=body, headers=headers, timeout=30
        )

    def job(self, api: ModelApi, job_id: str) -> dict[str, Any]:
        url = f"{self.worker(api).url}/jobs/{job_id}"

        def finished() -> dict[str, Any] | None:
            job: dict[str, Any] = httpx.get(url, timeout=10).json()
            return job if job["state"] in ("succeeded", "failed") else None

        return wait_until(finished, timeout_s=60, what=f"job {job_id}", interval_s=0.05)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = Path(tmp_path_factory.mktemp("fork"))
    (root / "evals").mkdir()
    thread, running = start_collector(root / "data")
    try:
        with ScriptedModelServer([], per_conversation=True) as model:
            stack = Stack(running, Captures(running), model, generate_secret(), root)
            try:
                yield stack
            finally:
                for worker in stack.workers.values():
                    worker.__exit__(None, None, None)
    finally:
        thread.stop()


# --- the matrix ----------------------------------------------------------------------------
def _turns(kind: SourceKind, model: str = "same") -> list[ScriptedTurn]:
    return replay_script(kind, "fixed" if model == "fixed" else "same")


def _guarded(turns: list[ScriptedTurn], index: int, text: str) -> list[ScriptedTurn]:
    """``turns`` with turn ``index`` answered only when the instructions hold ``text``: the
    live model does what the turn says only if the override reached it."""
    turn = turns[index]
    guarded = ScriptedTurn(
        text=turn.text, tool_calls=turn.tool_calls, expect_instructions_containing=text
    )
    return [*turns[:index], guarded, *turns[index + 1 :]]


@dataclass(frozen=True)
class Cell:
    id: str
    kind: SourceKind
    step: str
    overrides: tuple[dict[str, Any], ...]
    script: tuple[ScriptedTurn, ...]
    verdict: str
    outcomes: tuple[str, ...]
    recorded: int
    live: int
    divergence: dict[str, Any] | None = None
    stubs: bool = False
    live_model: str | None = None
    """The model every live request must name (an agent_model override)."""
    live_body: tuple[str, Any] | None = None
    """(key, value) every live request's body must hold (a model_settings override)."""


CELLS = [
    # A middle tool call: book_flight raised in the source; its output is corrected at it.
    Cell(
        "output-at-tool-call",
        "tool_raised",
        "call_book_1",
        ({"kind": "tool_output", "call_id": "call_book_1", "output": BOOKED},),
        tuple(_turns("tool_raised", "fixed")),
        "FAILURE_FIXED",
        (CO, OO),
        recorded=3,
        live=1,
    ),
    Cell(
        "error-at-tool-call",
        "success",
        "call_book_1",
        ({"kind": "tool_error", "call_id": "call_book_1", "error": "Booking failed: sold out"},),
        tuple(_turns("success")),
        "REGRESSED",
        (CO, OE),
        recorded=3,
        live=1,
    ),
    # The SDK rejected the 13th month; the call made with the right date has no captured
    # outcome: unknown without one, fixed with one.
    Cell(
        "arguments-at-tool-call",
        "schema_rejection",
        "call_book_1",
        ({"kind": "tool_arguments", "call_id": "call_book_1", "arguments": RIGHT_BOOKING},),
        tuple(_turns("schema_rejection", "fixed")),
        "INCONCLUSIVE",
        (CO, UNAVAILABLE),
        recorded=3,
        live=1,
        divergence={
            "step": 1,
            "tool": "book_flight",
            "kind": "different_arguments",
            "arguments": {"date": {"source": INVALID_DATE, "replay": TRAVEL_DATE}},
        },
    ),
    Cell(
        "arguments-and-output-at-tool-call",
        "schema_rejection",
        "call_book_1",
        (
            {"kind": "tool_arguments", "call_id": "call_book_1", "arguments": RIGHT_BOOKING},
            {"kind": "tool_output", "call_id": "call_book_1", "output": BOOKED},
        ),
        tuple(_turns("schema_rejection", "fixed")),
        "FAILURE_FIXED",
        (CO, OO),
        recorded=3,
        live=1,
        divergence={
            "step": 1,
            "tool": "book_flight",
            "kind": "different_arguments",
            "arguments": {"date": {"source": INVALID_DATE, "replay": TRAVEL_DATE}},
        },
    ),
    # The last turn: the reply was not a BookingReply. The live turn answers with one only
    # when the overridden instructions reach it.
    Cell(
        "instructions-at-last-turn",
        "format_violation",
        "turn:4",
        (
            {
                "kind": "instructions",
                "agent": "Booking Agent",
                "instructions": BOOKING_INSTRUCTIONS + JSON_ONLY,
            },
        ),
        tuple(_guarded(_turns("format_violation", "fixed"), 3, JSON_ONLY)),
        "FAILURE_FIXED",
        (CO, CO),
        recorded=3,
        live=1,
    ),
    Cell(
        "agent-model-at-last-turn",
        "format_violation",
        "turn:4",
        ({"kind": "agent_model", "agent": "Booking Agent", "model": "gpt-4.1"},),
        tuple(_turns("format_violation", "fixed")),
        "FAILURE_FIXED",
        (CO, CO),
        recorded=3,
        live=1,
        live_model="gpt-4.1",
    ),
    Cell(
        "model-settings-at-last-call",
        "format_violation",
        "llm:4",
        ({"kind": "model_settings", "agent": "Booking Agent", "settings": {"temperature": 0}},),
        tuple(_turns("format_violation", "fixed")),
        "FAILURE_FIXED",
        (CO, CO),
        recorded=3,
        live=1,
        live_body=("temperature", 0),
    ),
    # The first model call: nothing recorded, the overrides apply from the start.
    Cell(
        "guardrail-at-first-call",
        "guardrail_tripped",
        "llm:1",
        ({"kind": "guardrail", "name": "injection_screen", "triggered": False},),
        tuple(_turns("success")),
        "FAILURE_FIXED",
        (STUB, STUB),
        recorded=0,
        live=4,
        divergence={"step": 0, "tool": "search_flights", "kind": "extra_call"},
        stubs=True,
    ),
    Cell(
        "input-at-first-call",
        "success",
        "llm:1",
        ({"kind": "input", "input": NEW_INPUT},),
        tuple(_turns("success")),
        "UNCHANGED",
        (CO, CO),
        recorded=0,
        live=4,
    ),
    Cell(
        "output-at-first-call",
        "tool_raised",
        "llm:1",
        ({"kind": "tool_output", "call_id": "call_book_1", "output": BOOKED},),
        tuple(_turns("tool_raised")),
        "FAILURE_FIXED",
        (CO, OO),
        recorded=0,
        live=4,
    ),
    # A handoff: the bad one to support is re-decided live with routing instructions...
    Cell(
        "instructions-at-handoff",
        "wrong_agent",
        "llm:1",
        (
            {
                "kind": "instructions",
                "agent": "Intake Agent",
                "instructions": INTAKE_INSTRUCTIONS + ROUTE_BOOKINGS,
            },
        ),
        tuple(_guarded(_turns("wrong_agent", "fixed"), 0, ROUTE_BOOKINGS)),
        "FAILURE_FIXED",
        (STUB, STUB),
        recorded=0,
        live=4,
        divergence={"step": 0, "tool": "search_flights", "kind": "extra_call"},
        stubs=True,
    ),
    # ...and a fork at the handoff's own call: the handoff is recorded, the target is live.
    Cell(
        "agent-model-at-handoff",
        "success",
        "call_to_booking",
        ({"kind": "agent_model", "agent": "Booking Agent", "model": "gpt-4.1"},),
        tuple(_turns("success")),
        "UNCHANGED",
        (CO, CO),
        recorded=1,
        live=3,
        live_model="gpt-4.1",
    ),
]


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
@pytest.mark.parametrize("api", APIS)
def test_fork_matrix(stack: Stack, api: ModelApi, cell: Cell) -> None:
    source = stack.captures.source(api, cell.kind)
    before = source.desk.snapshot()
    stack.model.script(list(cell.script))
    fork = {"step": cell.step, "overrides": list(cell.overrides)}
    payload: dict[str, Any] = {"run_id": source.run_id, "fork": fork}
    if cell.stubs:
        payload["stubs"] = stub_outputs()
    answer = stack.post(api, payload)
    assert answer.status_code == 202, answer.text
    job = stack.job(api, answer.json()["job_id"])
    requests = stack.model.requests
    assert job["state"] == "succeeded", job
    result = job["result"]
    shown = json.dumps(result, indent=1)

    assert source.desk.snapshot() == before, "a real tool ran during the fork"
    assert "Error code: 409" not in (result["error"] or ""), "the live script drifted: " + shown
    got = (result["verdict"], tuple(c["outcome"] for c in result["tool_calls"]))
    assert got == (cell.verdict, cell.outcomes), shown
    assert result["first_divergence"] == cell.divergence, shown
    forked = result["fork"]
    assert (forked["step"], forked["overrides"]) == (cell.step, list(cell.overrides))
    assert (forked["recorded_model_calls"], forked["live_model_calls"]) == (
        cell.recorded,
        cell.live,
    )
    divergence = result["first_divergence"]
    assert divergence is None or divergence["step"] >= forked["tool_calls_before"], shown
    # The prefix sent nothing: the model server saw the live calls only, and the ledger
    # charged those (the recorded prefix is $0).
    assert len(requests) == cell.live == job["model_requests"]
    assert job["cost_usd"] > 0
    assert all(r.body.get("store") is False for r in requests)
    if cell.live_model is not None:
        assert {r.body["model"] for r in requests} == {cell.live_model}
    if cell.live_body is not None:
        key, value = cell.live_body
        assert all(r.body.get(key) == value for r in requests), [r.body.get(key) for r in requests]
    if any(o["kind"] == "input" for o in cell.overrides):
        assert NEW_INPUT in json.dumps(requests[0].body) and BOOKING_INPUT not in json.dumps(
            requests[0].body
        )

    # A replay run like any other: linked to its source, its fork in the afr.replay metadata,
    # one recorded-call span per recorded model call.
    replay = stack.running.run(result["replay_run_id"])
    assert (replay["run"]["kind"], replay["run"]["source_run_id"]) == ("replay", source.run_id)
    (root,) = [s for s in replay["spans"] if s["parent_span_id"] == ""]
    metadata = json.loads(root["attributes"][sc.AFR_TRACE_METADATA])
    assert metadata[sc.METADATA_REPLAY]["fork"] == fork
    assert metadata[sc.METADATA_VERDICT] == cell.verdict
    recorded = [
        s
        for s in replay["spans"]
        if s["attributes"].get(sc.AFR_CUSTOM_NAME) == sc.REPLAY_RECORDED_MODEL_CALL_SPAN
        or s["name"] == sc.REPLAY_RECORDED_MODEL_CALL_SPAN
    ]
    assert len(recorded) == cell.recorded
    assert sum(1 for s in replay["spans"] if s["span_type"] == "llm") == cell.live


# --- refusals ------------------------------------------------------------------------------
REFUSALS = [
    ("llm:9", [], "step llm:9 does not exist: run {run} made 4 model calls (llm:1..llm:4)"),
    ("turn:7", [], "step turn:7 does not exist"),
    ("call_nope", [], "step 'call_nope' does not exist"),
    (
        "call_book_1",
        [{"kind": "tool_output", "call_id": "call_nope", "output": "x"}],
        "tool_output call_nope: that call was never called in run {run}",
    ),
    (
        "llm:2",
        [{"kind": "tool_error", "call_id": "call_to_booking", "error": "x"}],
        "that call was a handoff, not a tool call",
    ),
    (
        "call_book_1",
        [{"kind": "tool_output", "call_id": "call_search_1", "output": "[]"}],
        "tool_output call_search_1: model call llm:2 issued it, before step call_book_1",
    ),
    (
        "call_book_1",
        [
            {
                "kind": "tool_arguments",
                "call_id": "call_book_1",
                "arguments": json.dumps({"flight_id": "FL-100", "passenger_count": "two"}),
            }
        ],
        "tool_arguments call_book_1: the arguments do not fit the schema of book_flight",
    ),
    (
        "llm:1",
        [{"kind": "tool_arguments", "call_id": "call_book_1", "arguments": RIGHT_BOOKING}],
        "fork at call_book_1 to override them",
    ),
    (
        "llm:2",
        [{"kind": "instructions", "agent": "Nobody", "instructions": "x"}],
        "instructions 'Nobody': no such agent in run {run}",
    ),
    (
        "llm:2",
        [{"kind": "guardrail", "name": "injection_screen", "triggered": True}],
        "input guardrails run before the first model call",
    ),
    (
        "llm:1",
        [{"kind": "model_settings", "agent": "Booking Agent", "settings": {"seed": 1}}],
        "seed is not a setting a replay passes on",
    ),
    (
        "llm:1",
        [{"kind": "model_settings", "agent": "Booking Agent", "settings": {"temperature": "hot"}}],
        "temperature must be int or float",
    ),
]


@pytest.mark.parametrize("api", APIS)
def test_a_fork_that_cannot_be_made_is_a_422_naming_the_fault(stack: Stack, api: ModelApi) -> None:
    source = stack.captures.source(api, "tool_raised")
    stack.model.script([])
    jobs_before = sum(httpx.get(stack.worker(api).url + "/healthz").json()["jobs"].values())
    for step, overrides, message in REFUSALS:
        answer = stack.post(
            api, {"run_id": source.run_id, "fork": {"step": step, "overrides": overrides}}
        )
        assert answer.status_code == 422, (step, overrides, answer.text)
        assert message.format(run=source.run_id) in answer.json()["error"], answer.json()
    # Shapes a fork cannot have are refused by the body's schema (400), naming the field.
    shapes: list[tuple[dict[str, Any], str]] = [
        ({"step": "llm:0"}, "fork.step"),
        ({"step": "llm:1", "overrides": [{"kind": "tool_mood"}]}, "fork.overrides"),
        (
            {
                "step": "llm:1",
                "overrides": [
                    {"kind": "tool_output", "call_id": "c", "output": "a"},
                    {"kind": "tool_error", "call_id": "c", "error": "b"},
                ],
            },
            "fork.overrides",
        ),
    ]
    for fork, field_name in shapes:
        answer = stack.post(api, {"run_id": source.run_id, "fork": fork})
        assert answer.status_code == 400 and field_name in answer.json()["error"], answer.text
    unknown = stack.post(api, {"run_id": "f" * 32, "fork": {"step": "llm:1"}})
    assert unknown.status_code == 404
    assert stack.model.requests == [], "no model call for a refused fork"
    health = httpx.get(stack.worker(api).url + "/healthz", timeout=10).json()
    assert sum(health["jobs"].values()) == jobs_before, "a refused fork queues no job"


def test_afr_replay_from_a_step_prints_the_verdict_and_refuses_with_the_reason(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from afr.cli import main

    source = stack.captures.source("responses", "tool_raised")
    worker = stack.worker("responses").url
    monkeypatch.setenv("AFR_WORKER_WEBHOOK_SECRET", stack.secret)
    stack.model.script(_turns("tool_raised", "fixed"))
    base = ["replay", source.run_id, "--worker", worker]
    code = main([*base, "--from", "call_book_1", "--output", f"call_book_1={BOOKED}"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["result"]["verdict"] == "FAILURE_FIXED"
    assert "verdict FAILURE_FIXED" in captured.err
    assert "fork at call_book_1: 3 model call(s) from the capture, 1 live" in captured.err

    assert main([*base, "--from", "llm:9"]) == 1
    assert "step llm:9 does not exist" in capsys.readouterr().err
    assert main([*base, "--output", "call_book_1=x"]) == 2
    assert "give --from STEP" in capsys.readouterr().err
    assert main([*base, "--from", "llm:1", "--guardrail", "injection_screen=maybe"]) == 2
    assert "--guardrail injection_screen: the value must be true or false" in (
        capsys.readouterr().err
    )


# --- an eval from a fork -------------------------------------------------------------------
def test_a_fixed_fork_synthesizes_an_eval_that_forks_the_same_way(stack: Stack) -> None:
    source = stack.captures.source("responses", "tool_raised")
    stack.model.script(_turns("tool_raised", "fixed"))
    fork = {
        "step": "call_book_1",
        "overrides": [{"kind": "tool_output", "call_id": "call_book_1", "output": BOOKED}],
    }
    answer = stack.post("responses", {"run_id": source.run_id, "fork": fork})
    job = stack.job("responses", answer.json()["job_id"])
    assert job["result"]["verdict"] == "FAILURE_FIXED"
    stack.running.run(job["result"]["replay_run_id"])

    body = json.dumps({"replay_run_id": job["result"]["replay_run_id"]}).encode()
    written = httpx.post(
        stack.worker("responses").url + "/hooks/evals",
        content=body,
        headers=signed_headers(stack.secret, body, "msg_" + uuid.uuid4().hex),
        timeout=30,
    )
    assert written.status_code == 201, written.text
    document = EvalDocument.model_validate(written.json()["eval"])
    assert document.replay.fork == Fork.model_validate(fork)
    assert document.fixture["version"] == "afr.fixture/3"

    stack.model.script(_turns("tool_raised", "fixed"))
    model = build_model("responses", stack.model.base_url)
    set_trace_processors([])
    outcome = asyncio.run(run_eval(document, model_for=lambda name: model))
    assert (outcome.status, outcome.verdict) == ("passed", "FAILURE_FIXED"), outcome.to_json()
    assert len(stack.model.requests) == 1, "the eval forks too: the prefix is recorded"


# --- prefix determinism --------------------------------------------------------------------
def _random_script(rng: random.Random) -> tuple[list[ScriptedTurn], int]:
    """A random travel-desk run: (its script, its max_turns). Searches on dates with or
    without flights, a booking on a good, a wrong (book_flight raises) or an impossible date
    (the SDK rejects it), a reply that is or is not a BookingReply, a handoff to support that
    ends in tool-not-found, or a run cut short by its turn bound."""

    def call(name: str, arguments: dict[str, Any], call_id: str, agent: str) -> ScriptedTurn:
        return ScriptedTurn(
            tool_calls=(ScriptedToolCall(name, json.dumps(arguments), call_id),),
            expect_instructions_containing=agent,
        )

    if rng.random() < 0.15:
        book = {"flight_id": "FL-100", "passenger_count": 2, "date": TRAVEL_DATE}
        return [
            ScriptedTurn(
                tool_calls=(ScriptedToolCall("transfer_to_support_agent", "{}", "call_to_s"),),
                expect_instructions_containing="intake agent",
            ),
            call("book_flight", book, "call_b", "support agent"),
        ], 10
    turns = [
        ScriptedTurn(
            tool_calls=(ScriptedToolCall("transfer_to_booking_agent", "{}", "call_to_b"),),
            expect_instructions_containing="intake agent",
        )
    ]
    for n in range(rng.randint(0, 3)):
        date = rng.choice([TRAVEL_DATE, "2026-12-06"])
        search = {"origin": "SFO", "destination": "JFK", "date": date}
        turns.append(call("search_flights", search, f"call_s{n}", "booking agent"))
    if rng.random() < 0.8:
        date = rng.choice([TRAVEL_DATE, TRAVEL_DATE, WRONG_DATE, INVALID_DATE])
        book = {"flight_id": "FL-100", "passenger_count": rng.choice([1, 2, "2"]), "date": date}
        turns.append(call("book_flight", book, "call_b", "booking agent"))
    reply = json.dumps({"status": "booked", "flight_id": "FL-100", "message": "Booked."})
    text = reply if rng.random() < 0.8 else "Booked it!"
    turns.append(ScriptedTurn(text=text, expect_instructions_containing="booking agent"))
    max_turns = 10 if rng.random() < 0.85 else rng.randint(2, len(turns) - 1)
    return turns, max_turns


def _capture(stack: Stack, api: ModelApi, turns: list[ScriptedTurn], max_turns: int) -> str:
    trace_id = gen_trace_id()
    processor = afr_exporter.install(
        endpoint=stack.running.grpc_endpoint, headers=stack.running.headers()
    )
    try:
        stack.model.script(turns)
        with contextlib.suppress(Exception):  # the failing runs raise
            agent = build_agents(build_model(api, stack.model.base_url), BookingDesk())
            config = RunConfig(
                workflow_name="flight-desk", trace_id=trace_id, trace_include_sensitive_data=True
            )
            asyncio.run(Runner.run(agent, BOOKING_INPUT, max_turns=max_turns, run_config=config))
        assert processor.force_flush(10)
    finally:
        set_trace_processors([])
    return trace_id.removeprefix("trace_")


@pytest.mark.parametrize("seed", range(6))
def test_a_fork_with_no_override_reproduces_its_source_up_to_the_step(
    stack: Stack, seed: int
) -> None:
    rng = random.Random(seed)
    api: ModelApi = rng.choice(APIS)
    turns, max_turns = _random_script(rng)
    run_id = _capture(stack, api, turns, max_turns)
    stack.running.run(run_id)
    run = asyncio.run(CollectorClient(stack.running.http_url, stack.running.key).get_run(run_id))
    fixture = build_fixture(run)
    calls = fixture.model_calls
    assert calls is not None and len(calls) >= 1
    steps = [f"llm:{n}" for n in range(1, len(calls) + 1)]
    steps += [f"turn:{n}" for n in range(1, len(calls) + 1)]
    steps += [
        str(item["call_id"])
        for call in calls
        for item in call.output or []
        if item["type"] == "function_call"
    ]
    expected = "STILL_FAILING" if fixture.source_failed else "UNCHANGED"
    for step in rng.sample(steps, 3):
        stack.model.script(turns)
        model = build_model(api, stack.model.base_url)

        def model_for(name: str, model: Model = model) -> Model:
            return model

        result = asyncio.run(run_fork(fixture, Fork(step=step), model_for))
        shown = json.dumps({"step": step, "result": result.to_json()}, indent=1)
        assert result.fork is not None
        recorded = result.fork["recorded_model_calls"]
        assert (result.verdict, result.first_divergence) == (expected, None), shown
        assert [i["captured_index"] for i in result.invocations] == list(
            range(len(result.invocations))
        ), shown
        assert len(stack.model.requests) == result.fork["live_model_calls"], shown
        assert result.turns == len(calls), "as many model calls as the source made"
        assert recorded + len(stack.model.requests) == len(calls), shown
