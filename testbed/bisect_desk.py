"""Long travel-desk runs whose failure is decided at a known model call: the scenarios
``afr replay bisect`` is tested (tests/e2e/test_replay_bisect.py) and benched (``python -m
bench bisect``) on.

An intake agent checks the customer's profile and hands off to the booking agent
(``search_flights``, ``book_flight``, a structured ``BookingReply``) or to the support agent
(``lookup_trip`` only). Everything runs through the real ``Runner`` and the SDK's OpenAI
model classes against the scripted model server.

Each scenario has a *source* script (what the captured, failing run's model did) and a
*fixed* one (what the model does with the change). The fixed script differs from the source
at the deciding call ``deciding`` (and after it): with the scripted model answering by
position in the conversation (``per_conversation``), a fork live from ``llm:k`` with
``k <= deciding`` makes the corrected call and reaches FAILURE_FIXED, while a later fork
has the bad call in its recorded prefix and fails again. The corrected call is guarded by
the change's text in the agent's instructions, so it is only made when the change reached
the live model.

- ``handoff``: an early bad handoff (to support, at ``llm:2``), the run failing many calls
  later when support tries to book;
- ``argument``: a middle bad tool argument (a date the flight does not fly), the booking
  raising;
- ``format``: the last call's reply is not a ``BookingReply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agents import (
    Agent,
    Model,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
    gen_trace_id,
)
from agents.tool import FunctionTool
from agents.tracing import set_trace_processors
from pydantic import BaseModel

import afr_exporter
from afr.incident import ModelApi, build_model
from afr.scripted_model import ScriptedModelServer, ScriptedToolCall, ScriptedTurn

__all__ = [
    "BOOKED",
    "SCENARIOS",
    "Scenario",
    "ScenarioName",
    "capture",
    "flaky",
    "scenario",
]

WORKFLOW = "flight-desk-long"
INPUT = "Please book 2 seats on the first flight from SFO to JFK on 2026-12-05."
TRAVEL_DATE = "2026-12-05"
WRONG_DATE = "2026-12-25"  # FL-100 does not fly then: book_flight raises
MAX_TURNS = 80

INTAKE = "You are the intake agent. Check the customer's profile, then route the request."
BOOKING = (
    "You are the booking agent. Search flights, book one with the passenger count as an"
    " integer, then answer with a BookingReply."
)
SUPPORT = "You are the support agent. You look trips up; you cannot book."
ROUTE_FIX = " Flight bookings always go to the Booking Agent."
DATE_FIX = " Book on the travel date the customer asked for."
JSON_FIX = " Answer with the BookingReply JSON only."

BOOKED = json.dumps({"status": "booked", "flight_id": "FL-100", "seats": 2})
SEARCHED = json.dumps([{"flight_id": "FL-100", "date": TRAVEL_DATE}])

ScenarioName = Literal["handoff", "argument", "format"]


class BookingReply(BaseModel):
    status: Literal["booked", "failed"]
    flight_id: str | None
    message: str


@dataclass
class Desk:
    """The desk's real side effects: a replay must never add to them."""

    calls: list[str] = field(default_factory=list)

    def tools(self) -> dict[str, FunctionTool]:
        desk = self

        @function_tool
        def check_profile(customer_id: str) -> str:
            """Read a customer's profile.

            Args:
                customer_id: The customer, e.g. cust_7.
            """
            desk.calls.append("check_profile")
            return json.dumps({"customer_id": customer_id, "tier": "gold"})

        @function_tool
        def search_flights(origin: str, destination: str, date: datetime.date) -> str:
            """Search the flights between two airports on a date.

            Args:
                origin: IATA code of the departure airport.
                destination: IATA code of the arrival airport.
                date: The travel date.
            """
            desk.calls.append("search_flights")
            flights = (
                ["FL-100"]
                if (origin, destination, date.isoformat())
                == (
                    "SFO",
                    "JFK",
                    TRAVEL_DATE,
                )
                else []
            )
            return json.dumps([{"flight_id": f, "date": date.isoformat()} for f in flights])

        def booking_failed(ctx: RunContextWrapper[Any], error: Exception) -> str:
            return f"Booking failed: {error}"

        @function_tool(failure_error_function=booking_failed)
        def book_flight(flight_id: str, passenger_count: int, date: datetime.date) -> str:
            """Book seats on a flight.

            Args:
                flight_id: The flight to book.
                passenger_count: How many seats.
                date: The travel date.
            """
            desk.calls.append("book_flight")
            if (flight_id, date.isoformat()) != ("FL-100", TRAVEL_DATE):
                raise ValueError(f"no flight {flight_id} on {date.isoformat()}")
            return json.dumps(
                {"status": "booked", "flight_id": flight_id, "seats": passenger_count}
            )

        @function_tool
        def lookup_trip(trip_id: str) -> str:
            """Look an existing trip up.

            Args:
                trip_id: The trip, e.g. T-1.
            """
            desk.calls.append("lookup_trip")
            return json.dumps({"trip_id": trip_id, "status": "unknown"})

        return {t.name: t for t in (check_profile, search_flights, book_flight, lookup_trip)}


def build_agents(model: Model, desk: Desk) -> Agent[Any]:
    tools = desk.tools()
    booking: Agent[Any] = Agent(
        name="Booking Agent",
        instructions=BOOKING,
        model=model,
        tools=[tools["search_flights"], tools["book_flight"]],
        output_type=BookingReply,
    )
    support: Agent[Any] = Agent(
        name="Support Agent", instructions=SUPPORT, model=model, tools=[tools["lookup_trip"]]
    )
    return Agent(
        name="Intake Agent",
        instructions=INTAKE,
        model=model,
        tools=[tools["check_profile"]],
        handoffs=[booking, support],
    )


# --- scripted turns ----------------------------------------------------------------------
def _call(name: str, arguments: dict[str, Any], call_id: str, guard: str) -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=(ScriptedToolCall(name, json.dumps(arguments), call_id),),
        expect_instructions_containing=guard,
    )


def _profile() -> ScriptedTurn:
    return _call("check_profile", {"customer_id": "cust_7"}, "call_profile_1", "intake agent")


def _handoff(target: str, guard: str = "intake agent") -> ScriptedTurn:
    return _call(f"transfer_to_{target}_agent", {}, f"call_to_{target}", guard)


def _search(n: int) -> ScriptedTurn:
    arguments = {"origin": "SFO", "destination": "JFK", "date": TRAVEL_DATE}
    return ScriptedTurn(
        tool_calls=(ScriptedToolCall("search_flights", json.dumps(arguments), f"call_search_{n}"),)
    )


def _book(date: str, guard: str | None = None) -> ScriptedTurn:
    arguments = {"flight_id": "FL-100", "passenger_count": 2, "date": date}
    return ScriptedTurn(
        tool_calls=(ScriptedToolCall("book_flight", json.dumps(arguments), "call_book_1"),),
        expect_instructions_containing=guard,
    )


def _reply(status: str, guard: str | None = None) -> ScriptedTurn:
    reply = {
        "status": status,
        "flight_id": "FL-100" if status == "booked" else None,
        "message": "Booked 2 seats on FL-100." if status == "booked" else "I could not book it.",
    }
    return ScriptedTurn(text=json.dumps(reply), expect_instructions_containing=guard)


@dataclass(frozen=True)
class Scenario:
    name: ScenarioName
    deciding: int
    """The latest model call from which the change still fixes the run (llm:N)."""
    source: tuple[ScriptedTurn, ...]
    fixed: tuple[ScriptedTurn, ...]
    change: tuple[str, ...]
    """The change as ``afr replay bisect`` takes it (flags)."""
    overrides: tuple[dict[str, Any], ...]
    """The same change as a fork's overrides."""
    stubs: dict[str, str] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """The source run's model calls."""
        return len(self.source)

    def live_calls(self, step: int) -> int:
        """How many live model calls a fork at ``llm:step`` makes."""
        if step <= self.deciding:
            return len(self.fixed) - step + 1
        # After the bad call the live model walks the fixed script in the bad context: it
        # fails at the first call that context cannot make, or walks to the source's end.
        return _failing_calls(self, step)


def _failing_calls(scenario: Scenario, step: int) -> int:
    if scenario.name == "handoff":  # support has no search_flights: the first live call fails
        return 1
    return len(scenario.source) - step + 1


def _instructions(agent: str, text: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    return (
        ("--instructions", f"{agent}={text}"),
        {"kind": "instructions", "agent": agent, "instructions": text},
    )


def scenario(name: ScenarioName, steps: int | None = None, deciding: int | None = None) -> Scenario:
    """The scenario ``name`` with ``steps`` model calls in its source run (and, for
    ``argument``, the bad call at ``deciding``)."""
    stubs = {"search_flights": SEARCHED, "book_flight": BOOKED}
    stub_flags = tuple(f for tool, out in stubs.items() for f in ("--stub", f"{tool}={out}"))
    if name == "handoff":
        n = steps or 12
        source = [_profile(), _handoff("support")]
        source += [
            _call("lookup_trip", {"trip_id": f"T-{i}"}, f"call_trip_{i}", "support agent")
            for i in range(1, n - 2)
        ]
        source.append(_book(TRAVEL_DATE, "support agent"))  # not a support tool: the run fails
        # Booking calls to the end, longer than the source: in support's context every live
        # call the fixed script makes is a tool support lacks.
        fixed = [_profile(), _handoff("booking", ROUTE_FIX)]
        fixed += [_search(i) for i in range(1, n)]
        fixed += [_book(TRAVEL_DATE), _reply("booked")]
        flags, override = _instructions("Intake Agent", INTAKE + ROUTE_FIX)
        return Scenario(
            name, 2, tuple(source), tuple(fixed), flags + stub_flags, (override,), stubs
        )
    if name == "argument":
        n = steps or 40
        d = deciding or n // 2
        before = [_search(i) for i in range(1, d - 1)]
        after = [_search(i) for i in range(d - 1, n - 2)]
        source = [_handoff("booking"), *before, _book(WRONG_DATE), *after, _reply("failed")]
        fixed = [
            _handoff("booking"),
            *before,
            _book(TRAVEL_DATE, DATE_FIX),
            *after,
            _reply("booked"),
        ]
        flags, override = _instructions("Booking Agent", BOOKING + DATE_FIX)
        book_stub = ("--stub", f"book_flight={BOOKED}")
        return Scenario(
            name,
            d,
            tuple(source),
            tuple(fixed),
            flags + book_stub,
            (override,),
            {"book_flight": BOOKED},
        )
    n = steps or 16
    searches = [_search(i) for i in range(1, n - 2)]
    source = [
        _handoff("booking"),
        *searches,
        _book(TRAVEL_DATE),
        ScriptedTurn(text="Booked 2 seats on FL-100!"),
    ]
    fixed = [_handoff("booking"), *searches, _book(TRAVEL_DATE), _reply("booked", JSON_FIX)]
    flags, override = _instructions("Booking Agent", BOOKING + JSON_FIX)
    return Scenario("format", n, tuple(source), tuple(fixed), flags, (override,))


SCENARIOS: tuple[ScenarioName, ...] = ("handoff", "argument", "format")


def flaky(base: Scenario, wrong_every: int) -> Scenario:
    """``base`` with a flaky deciding call: of every ``wrong_every`` times the corrected call
    is made, the last makes the source's call instead."""
    index = base.deciding - 1
    right, wrong = base.fixed[index], base.source[index]
    turn = replace(right, variants=(*([right] * (wrong_every - 2)), wrong))
    fixed = (*base.fixed[:index], turn, *base.fixed[index + 1 :])
    return replace(base, fixed=fixed)


def capture(
    scenario: Scenario,
    api: ModelApi,
    model: ScriptedModelServer,
    endpoint: str,
    headers: dict[str, str] | None,
) -> str:
    """Runs the scenario's source through the real ``Runner`` against ``model`` with afr's
    exporter shipping it to ``endpoint``; returns the run id. The run fails (its error is
    what the capture records)."""
    trace_id = gen_trace_id()
    processor = afr_exporter.install(endpoint=endpoint, headers=headers)
    try:
        model.script(list(scenario.source), per_conversation=False)
        config = RunConfig(
            workflow_name=WORKFLOW,
            trace_id=trace_id,
            group_id=f"conv_{scenario.name}",
            trace_include_sensitive_data=True,
        )
        agent = build_agents(build_model(api, model.base_url), Desk())
        with contextlib.suppress(Exception):  # the source fails
            asyncio.run(Runner.run(agent, INPUT, max_turns=MAX_TURNS, run_config=config))
        if not processor.force_flush(30):
            raise RuntimeError("the source run was not exported")
    finally:
        set_trace_processors([])
    return trace_id.removeprefix("trace_")
