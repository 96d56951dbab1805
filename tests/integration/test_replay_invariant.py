"""The replay invariant, as a property over generated runs.

A replay whose calls equal the source's calls gets the source's outcomes, so it fails exactly
where the source failed: ``STILL_FAILING`` when the source failed, ``UNCHANGED`` when it did
not -- never ``FAILURE_FIXED`` or ``REGRESSED`` (nor ``INCONCLUSIVE``: every call has a
captured outcome).

Each example is a generated fixture: one or two agents (the entry agent may hand off to the
other) with a few tools of simple integer/string schemas, a sequence of captured calls each
with an output or an error outcome (arguments the SDK would have rejected always carry an
error), sometimes a captured input guardrail (that triggered, or not), sometimes the tight
``max_turns`` the source ran with. The source failed iff an outcome is an error or the
guardrail triggered. The replay runs through the real engine, the real ``Runner`` and the
SDK's real OpenAI model classes against the scripted model server, whose script makes
exactly the source's calls in the source's order (same tool, arguments equal as JSON;
sometimes re-serialized with another key order and spacing), then a final text.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from afr.incident import ModelApi, build_model
from afr.scripted_model import ScriptedModelServer, ScriptedToolCall, ScriptedTurn
from replay_worker.replay.engine import run_replay
from replay_worker.replay.fixture import AgentSpec, CapturedCall, Fixture

TOOL_PROPERTIES: dict[str, dict[str, str]] = {
    "lookup_order": {"order_id": "integer"},
    "add_note": {"order_id": "integer", "text": "string"},
    "find_customer": {"email": "string"},
}
ENTRY, OTHER = "Front Agent", "Back Agent"
API_CHOICES: tuple[ModelApi, ...] = ("responses", "chat")
INSTRUCTIONS = {ENTRY: "You are the front agent.", OTHER: "You are the back agent."}
TOOL_ERROR = "Error running tool (non-fatal)"
TOOL_ERROR_OUTPUTS = (
    "An error occurred while running the tool. Please try again.",
    "Lookup failed: no such order",
)


def tool_definition(name: str, strict: bool) -> dict[str, Any]:
    properties = TOOL_PROPERTIES[name]
    return {
        "name": name,
        "description": f"The {name.replace('_', ' ')} tool.",
        "parameters": {
            "type": "object",
            "properties": {
                key: {"type": kind, "title": key.title()} for key, kind in properties.items()
            },
            "required": list(properties),
            "title": f"{name}_args",
            "additionalProperties": False,
        },
        "strict": strict,
    }


@dataclass(frozen=True)
class Call:
    agent: str
    tool: str
    arguments: dict[str, Any]
    """Only the keys present; a missing key or a wrong type: the SDK rejected the call."""
    output: str
    error: str | None
    new_turn: bool
    """The call starts a model turn (else it is a parallel call of the previous one)."""
    reserialized: bool
    """The replayed call sends the same arguments with another key order and spacing."""


@dataclass(frozen=True)
class Case:
    api: ModelApi
    tools: dict[str, tuple[str, ...]]
    """agent -> its tools; a second agent is the entry agent's handoff target."""
    strict: bool
    calls: tuple[Call, ...]
    guardrail: bool | None
    """None: no input guardrail; else whether it triggered."""
    tight_max_turns: bool

    @property
    def source_failed(self) -> bool:
        return self.guardrail is True or any(c.error is not None for c in self.calls)


def _valid(value: Any, kind: str) -> bool:
    if kind == "integer":  # the SDK's lax int: 2 and "2" pass, 2.5 and "x" do not
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.isdigit()
        )
    return isinstance(value, str)


_VALUES = {
    "integer": st.one_of(st.integers(0, 3), st.sampled_from(["2", "x", 2.5])),
    "string": st.one_of(st.sampled_from(["a", "b", "", "ü"]), st.just(7)),
}


@st.composite
def calls_of(draw: st.DrawFn, agent: str, tools: tuple[str, ...]) -> list[Call]:
    calls = []
    for index in range(draw(st.integers(0, 4))):
        tool = draw(st.sampled_from(tools))
        properties = TOOL_PROPERTIES[tool]
        arguments = {
            key: draw(_VALUES[kind])
            for key, kind in properties.items()
            if draw(st.integers(0, 9))  # now and then a required key is missing
        }
        valid = len(arguments) == len(properties) and all(
            _valid(arguments[key], kind) for key, kind in properties.items()
        )
        failed = not valid or draw(st.booleans())
        calls.append(
            Call(
                agent=agent,
                tool=tool,
                arguments=arguments,
                output=draw(st.sampled_from(TOOL_ERROR_OUTPUTS))
                if failed
                else draw(st.text(max_size=12)),
                error=TOOL_ERROR if failed else None,
                new_turn=index == 0 or draw(st.booleans()),
                reserialized=draw(st.booleans()),
            )
        )
    return calls


@st.composite
def cases(draw: st.DrawFn) -> Case:
    names = list(TOOL_PROPERTIES)
    tools = {
        ENTRY: tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)))
    }
    if draw(st.booleans()):
        tools[OTHER] = tuple(
            draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        )
    calls = [c for agent, offered in tools.items() for c in draw(calls_of(agent, offered))]
    return Case(
        api=draw(st.sampled_from(API_CHOICES)),
        tools=tools,
        strict=draw(st.booleans()),
        calls=tuple(calls),
        guardrail=draw(st.sampled_from([None, False, True])),
        tight_max_turns=draw(st.booleans()),
    )


def _call_id(index: int) -> str:
    return f"call_{index}"


def script_of(case: Case) -> list[ScriptedTurn]:
    """The source's calls, turn by turn and agent by agent, then a final text."""
    turns: list[ScriptedTurn] = []
    group: list[ScriptedToolCall] = []
    group_agent = ENTRY

    def flush() -> None:
        if group:
            guard = INSTRUCTIONS[group_agent].removeprefix("You are ").rstrip(".")
            turns.append(
                ScriptedTurn(tool_calls=tuple(group), expect_instructions_containing=guard)
            )
            group.clear()

    handed_off = False
    for index, call in enumerate(case.calls):
        if call.agent == OTHER and not handed_off:
            flush()
            turns.append(_handoff())
            handed_off = True
        elif call.new_turn:
            flush()
        group_agent = call.agent
        arguments = (
            json.dumps(dict(reversed(call.arguments.items())), indent=1)
            if call.reserialized
            else json.dumps(call.arguments)
        )
        group.append(ScriptedToolCall(call.tool, arguments, _call_id(index)))
    flush()
    if OTHER in case.tools and not handed_off:
        turns.append(_handoff())
    final_agent = OTHER if OTHER in case.tools else ENTRY
    turns.append(
        ScriptedTurn(
            text="All done.",
            expect_instructions_containing=INSTRUCTIONS[final_agent]
            .removeprefix("You are ")
            .rstrip("."),
        )
    )
    return turns


def _handoff() -> ScriptedTurn:
    return ScriptedTurn(
        tool_calls=(ScriptedToolCall("transfer_to_back_agent", "{}", "call_handoff"),),
        expect_instructions_containing="front agent",
    )


def fixture_of(case: Case, model_turns: int) -> Fixture:
    agents = {
        name: AgentSpec(
            instructions=INSTRUCTIONS[name],
            model="gpt-4.1-mini",
            tools=[tool_definition(t, case.strict) for t in offered],
            handoffs=[OTHER] if name == ENTRY and OTHER in case.tools else [],
            output_type="str",
        )
        for name, offered in case.tools.items()
    }
    source_errors = [{"span_type": "tool", "error_type": TOOL_ERROR} for c in case.calls if c.error]
    guardrails = []
    if case.guardrail is not None:
        guardrails.append({"name": "screen", "agent": ENTRY, "triggered": case.guardrail})
        if case.guardrail:
            source_errors.append(
                {"span_type": "turn", "error_type": "Guardrail tripwire triggered"}
            )
    return Fixture(
        source_run_id="0" * 32,
        source_status="error" if case.source_failed else "ok",
        workflow="generated",
        input="Please help with my order.",
        entry_agent=ENTRY,
        agents=agents,
        tool_calls=[
            CapturedCall(
                tool=c.tool,
                call_id=_call_id(index),
                arguments=json.dumps(c.arguments),
                output=c.output,
                error=c.error,
                agent=c.agent,
            )
            for index, c in enumerate(case.calls)
        ],
        guardrails=guardrails,
        source_errors=source_errors,
        max_turns=model_turns if case.tight_max_turns else None,
    )


def _case(*calls: Call, guardrail: bool | None = None, api: ModelApi = "chat") -> Case:
    return Case(
        api=api,
        tools={ENTRY: ("lookup_order", "add_note")},
        strict=True,
        calls=calls,
        guardrail=guardrail,
        tight_max_turns=True,
    )


def _lookup(order_id: Any, error: bool, *, new_turn: bool = True) -> Call:
    return Call(
        ENTRY,
        "lookup_order",
        {"order_id": order_id},
        TOOL_ERROR_OUTPUTS[1] if error else '{"status": "shipped"}',
        TOOL_ERROR if error else None,
        new_turn,
        False,
    )


@settings(
    max_examples=25,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@example(_case(_lookup(1, True)))  # the tool raised; the model repeats the call
@example(_case(_lookup(1, True), _lookup(1, False), api="responses"))  # same call: error, output
@example(_case(_lookup("2", False), _lookup(1, True, new_turn=False)))  # coerced "2"; parallel
@example(_case(guardrail=True))  # the input guardrail stopped the run
@example(_case(_lookup(3, False), guardrail=False, api="responses"))  # a clean run
@given(case=cases())
def test_a_replay_making_the_source_calls_never_changes_the_outcome(case: Case) -> None:
    script = script_of(case)
    fixture = fixture_of(case, model_turns=len(script))
    with ScriptedModelServer(script) as server:
        model = build_model(case.api, server.base_url)
        result = asyncio.run(run_replay(fixture, model_for=lambda name: model))
        served = server.turns_served

    expected = "STILL_FAILING" if case.source_failed else "UNCHANGED"
    assert result.verdict == expected, json.dumps(result.to_json(), indent=1)
    assert "Error code: 409" not in (result.error or ""), "the script drifted out of step"
    if case.guardrail is True:  # replayed from its captured outcome: it trips again
        assert (result.error or "").startswith("InputGuardrailTripwireTriggered"), result.error
    else:  # the whole script was played and every call got its captured outcome
        assert served == len(script)
        assert result.error is None, result.error
        assert result.first_divergence is None
        # (parallel calls of one turn may run in either order)
        assert Counter((i["tool"], i["outcome"]) for i in result.invocations) == Counter(
            (c.tool, "captured_error" if c.error else "captured_output") for c in case.calls
        )
