"""The replay verdict matrix, end to end, on both model APIs.

Each source run of the travel desk (``tests/booking_agent.py``) is captured for real: the
real ``Runner`` and the SDK's real OpenAI model classes against the scripted model server,
``afr_exporter.install`` shipping the trace to a real collector, the run read back through the
collector's read API and turned into a fixture with ``build_fixture``. Each cell replays it
(``run_replay``) against a replay model -- ``same`` (the source's behaviour), ``fixed`` (the
corrected behaviour) or ``breaking`` (another failure) -- and checks the verdict, what each
stand-in did, how the replay ended, and that no real tool ran.

Source runs: a success, the success where the model sent ``passenger_count: "2"`` (the SDK
coerced it), and one per failure kind: the SDK rejected the arguments' schema (a 13th
month), the tool ran and raised (a date the flight does not fly), the final output is not a
``BookingReply``, the input guardrail tripped, max turns exceeded, the first model call
failed, and a handoff to the support agent, which has no ``book_flight``.

Expected semantics: a replay that behaves like its source gets the source's outcomes
(``STILL_FAILING`` / ``UNCHANGED``); a corrected replay whose new calls get labelled stub
outputs is ``FAILURE_FIXED``, and ``INCONCLUSIVE`` without them; a replay that fails
otherwise is ``STILL_FAILING`` (or ``REGRESSED`` from a successful source). An input
guardrail's trip depends on the input alone, which a replay keeps: no model fixes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import gen_trace_id
from agents.tracing import set_trace_processors

import afr_exporter
from afr.scripted_model import ScriptedModelServer
from replay_worker.client import CollectorClient
from replay_worker.replay.engine import ReplayResult, run_replay
from replay_worker.replay.fixture import Fixture, build_fixture
from tests.booking_agent import (
    BOOKING_INPUT,
    GUARDRAIL_INPUT,
    MAX_TURNS,
    BookingDesk,
    ModelApi,
    ReplayModel,
    SourceKind,
    build_model,
    replay_script,
    run_booking,
    source_script,
    stub_outputs,
)
from tests.integration.conftest import Running, start_collector

pytestmark = pytest.mark.slow

APIS: tuple[ModelApi, ...] = ("responses", "chat")
CO, CE, STUB, INVALID, UNAVAILABLE = (
    "captured_output",
    "captured_error",
    "replay_stub_output",
    "invalid_arguments",
    "unavailable",
)


@dataclass(frozen=True)
class Cell:
    kind: SourceKind
    model: ReplayModel
    verdict: str
    outcomes: tuple[str, ...]
    """What the stand-ins did with each call the replay made, in order."""
    error: str | None = None
    """The exception type the replay ended with (None: it completed)."""
    stubs: bool = True
    """Whether the replay request gives labelled stub outputs for the booking tools."""

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.model}" + ("" if self.stubs else "-nostub")


CELLS = [
    # A successful source: the same calls get the captured outputs; a call the SDK would
    # reject fails the replay (validation comes before any stub output).
    Cell("success", "same", "UNCHANGED", (CO, CO)),
    Cell("success", "breaking", "REGRESSED", (CO, INVALID)),
    # passenger_count "2": the SDK coerced it and the booking went through; the identical
    # call gets the captured booking.
    Cell("coerced_count", "same", "UNCHANGED", (CO, CO)),
    Cell("coerced_count", "breaking", "REGRESSED", (CO, INVALID)),
    # A date with a 13th month: the SDK rejected it before book_flight ran.
    Cell("schema_rejection", "same", "STILL_FAILING", (CO, CE)),
    Cell("schema_rejection", "fixed", "FAILURE_FIXED", (CO, STUB)),
    Cell("schema_rejection", "fixed", "INCONCLUSIVE", (CO, UNAVAILABLE), stubs=False),
    Cell("schema_rejection", "breaking", "STILL_FAILING", (CO, INVALID)),
    # book_flight ran and raised ("no flight FL-100 on 2026-12-25"): repeating the exact
    # call must fail again, whatever the stub outputs say.
    Cell("tool_raised", "same", "STILL_FAILING", (CO, CE)),
    Cell("tool_raised", "fixed", "FAILURE_FIXED", (CO, STUB)),
    Cell("tool_raised", "breaking", "STILL_FAILING", (CO, INVALID)),
    # The reply is not a BookingReply (plain text; then JSON without "message").
    Cell("format_violation", "same", "STILL_FAILING", (CO, CO), "ModelBehaviorError"),
    Cell("format_violation", "fixed", "FAILURE_FIXED", (CO, CO)),
    Cell("format_violation", "breaking", "STILL_FAILING", (CO, CO), "ModelBehaviorError"),
    # The input guardrail tripped: the replay keeps the input, so it trips again.
    Cell("guardrail_tripped", "same", "STILL_FAILING", (), "InputGuardrailTripwireTriggered"),
    Cell("guardrail_tripped", "fixed", "STILL_FAILING", (), "InputGuardrailTripwireTriggered"),
    Cell("guardrail_tripped", "breaking", "STILL_FAILING", (), "InputGuardrailTripwireTriggered"),
    # Three identical searches, then the source's bound (4 turns) was exceeded.
    Cell("max_turns", "same", "STILL_FAILING", (CO, CO, CO), "MaxTurnsExceeded"),
    Cell("max_turns", "fixed", "FAILURE_FIXED", (CO, STUB)),
    Cell("max_turns", "breaking", "STILL_FAILING", (CO, INVALID)),
    # The first model call failed (HTTP 500).
    Cell("model_error", "same", "STILL_FAILING", (), "InternalServerError"),
    Cell("model_error", "fixed", "FAILURE_FIXED", (STUB, STUB)),
    Cell("model_error", "breaking", "STILL_FAILING", (), "BadRequestError"),
    # Routed to the support agent, which has no book_flight: the SDK's tool-not-found.
    Cell("wrong_agent", "same", "STILL_FAILING", (), "ModelBehaviorError"),
    Cell("wrong_agent", "fixed", "FAILURE_FIXED", (STUB, STUB)),
    Cell("wrong_agent", "breaking", "STILL_FAILING", (), "ModelBehaviorError"),
]


@dataclass
class Source:
    run_id: str
    fixture: Fixture
    desk: BookingDesk


class Captures:
    """Each (api, kind) source run, captured once per module."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self._runs: dict[tuple[ModelApi, SourceKind], dict[str, Any]] = {}
        self._desks: dict[tuple[ModelApi, SourceKind], BookingDesk] = {}

    def stored_run(self, api: ModelApi, kind: SourceKind) -> tuple[dict[str, Any], BookingDesk]:
        key = (api, kind)
        if key not in self._runs:
            desk = BookingDesk()
            trace_id = gen_trace_id()
            processor = afr_exporter.install(
                endpoint=self.running.grpc_endpoint, headers=self.running.headers()
            )
            try:
                with (
                    ScriptedModelServer(source_script(kind)) as server,
                    contextlib.suppress(Exception),  # the failing source runs raise
                ):
                    model = build_model(api, server.base_url)
                    asyncio.run(run_booking(model, desk, kind, trace_id=trace_id))
                assert processor.force_flush(10)
            finally:
                set_trace_processors([])  # replays are not exported
            run_id = trace_id.removeprefix("trace_")
            self.running.run(run_id)  # waits until the collector stored it
            client = CollectorClient(self.running.http_url, self.running.key)
            self._runs[key] = asyncio.run(client.get_run(run_id))
            self._desks[key] = desk
        return self._runs[key], self._desks[key]

    def source(self, api: ModelApi, kind: SourceKind) -> Source:
        run, desk = self.stored_run(api, kind)
        return Source(run["run"]["run_id"], build_fixture(run), desk)


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Captures]:
    thread, running = start_collector(Path(tmp_path_factory.mktemp("matrix")) / "data")
    try:
        yield Captures(running)
    finally:
        thread.stop()


def replay(api: ModelApi, source: Source, cell: Cell) -> tuple[ReplayResult, list[str]]:
    with ScriptedModelServer(replay_script(cell.kind, cell.model)) as server:
        replay_model = build_model(api, server.base_url)
        result = asyncio.run(
            run_replay(
                source.fixture,
                model_for=lambda name: replay_model,
                stub_outputs=stub_outputs() if cell.stubs else None,
            )
        )
        paths = [r.path for r in server.requests]
    return result, paths


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
@pytest.mark.parametrize("api", APIS)
def test_replay_verdict_matrix(captures: Captures, api: ModelApi, cell: Cell) -> None:
    source = captures.source(api, cell.kind)
    assert source.fixture.source_failed == (cell.kind not in ("success", "coerced_count"))
    before = source.desk.snapshot()

    result, paths = replay(api, source, cell)

    assert source.desk.snapshot() == before, "a real tool ran during the replay"
    expected_path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    assert set(paths) <= {expected_path}
    error_type = result.error.split(":", 1)[0] if result.error else None
    got = (result.verdict, tuple(i["outcome"] for i in result.invocations), error_type)
    assert got == (cell.verdict, cell.outcomes, cell.error), json.dumps(result.to_json(), indent=1)
    assert "Error code: 409" not in (result.error or ""), "the replay script drifted out of step"
    if cell.model == "same":
        # The replay made the source's calls: each was answered with its captured outcome.
        assert result.first_divergence is None, result.first_divergence
        assert [i["captured_index"] for i in result.invocations] == list(
            range(len(result.invocations))
        )


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("kind", ["guardrail_tripped", "model_error"])
def test_runs_stopped_before_any_tool_are_replayable(
    captures: Captures, api: ModelApi, kind: SourceKind
) -> None:
    """A run its input guardrail stopped, and a run whose first model call failed, become
    fixtures with the run's input, entry agent, bound and failure."""
    run, _ = captures.stored_run(api, kind)
    fixture = build_fixture(run)
    assert fixture.source_failed
    assert fixture.input == (GUARDRAIL_INPUT if kind == "guardrail_tripped" else BOOKING_INPUT)
    assert fixture.entry_agent == "Intake Agent"
    assert fixture.max_turns == 10
    assert fixture.tool_calls == []
    assert fixture.guardrails == [
        {
            "name": "injection_screen",
            "agent": "Intake Agent",
            "triggered": kind == "guardrail_tripped",
        }
    ]
    assert fixture.unreplayable_errors == []


@pytest.mark.parametrize("api", APIS)
def test_max_turns_source_keeps_its_bound(captures: Captures, api: ModelApi) -> None:
    fixture = captures.source(api, "max_turns").fixture
    assert fixture.max_turns == MAX_TURNS
    assert [c.tool for c in fixture.tool_calls] == ["search_flights"] * 3
